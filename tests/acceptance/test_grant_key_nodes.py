"""Nodes on one store must sign grant tokens with one grant key, or a token fetched from
one node fails the key set of the next ("no key ... in the key set"), as the load balancer
routes: real `interlock serve` processes side by side on one SQLite file (and one
PostgreSQL database). A node whose grant key is not the others' (a `--grant-key` file
beside nodes that derive theirs from INTERLOCK_SECRET_KEY, another file, or a key made at
start beside nodes with a file) is refused at start on one line naming both keys' public
ids (exit 4); `interlock grant-key rotate` and `forget` change the key the nodes are held
to. The commands that only touch the store run in process (cli_support); what each store
keeps, a derived key following the secret key's rotation, and nodes that make their keys
at start recording none are tested in process (tests/integration/test_grant_key_port.py)."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from cli_support import invoke, new_store
from interlock.grant_tokens import GrantSigner
from key_support import env_with, node_store, refused
from serve_support import Served, serve

pytestmark = pytest.mark.anyio

KEY, OTHER = "the-nodes-key-0123456789abcdef-0123456789", "another-key-0123456789abcdef-0123456789"


def pem_file(path: Path) -> Path:
    """A new Ed25519 private key in PEM at `path` (as `openssl genpkey -algorithm ed25519` makes)."""
    key = Ed25519PrivateKey.generate()
    path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return path


async def kid_served(node: Served) -> str:
    """The id of the key a node's grant tokens are checked with (`GET /api/v1/grants/keys`)."""
    async with httpx.AsyncClient(base_url=node.url, timeout=10) as http:
        response = await http.get("/api/v1/grants/keys")
        response.raise_for_status()
        [key] = response.json()["keys"]
        return str(key["kid"])


store = pytest.fixture(params=["sqlite", "postgresql"])(node_store)


@pytest.mark.slow
async def test_a_node_with_a_grant_key_file_beside_nodes_that_derive_theirs_is_refused(
    store: str, tmp_path: Path
) -> None:
    pem = pem_file(tmp_path / "grant.pem")
    derived, given = GrantSigner.from_secret(KEY).kid, GrantSigner.from_pem(pem).kid
    async with serve("--db", store, env=env_with(KEY)) as first:
        line = await refused(store, KEY, pem)
        assert line.startswith(
            "error: the other nodes on this store sign grant tokens with the key derived from INTERLOCK_SECRET_KEY "
            f"(kid {derived}), this node with a --grant-key file (kid {given})"
        ), line
        assert "start it without --grant-key (or INTERLOCK_GRANT_KEY) and with their INTERLOCK_SECRET_KEY" in line
        assert "`interlock grant-key rotate`" in line, line
        assert KEY not in line and pem.read_text().splitlines()[1] not in line  # ids only, never a key
        async with serve("--db", store, env=env_with(KEY)) as second:
            assert await kid_served(first) == await kid_served(second) == derived  # one key set, either node
        assert first.proc.returncode is None  # the refused node changed nothing for the running one


@pytest.mark.slow
@pytest.mark.parametrize("store", ["sqlite"], indirect=True)  # (each store's part: test_grant_key_port)
async def test_nodes_sharing_a_grant_key_file_refuse_another_file_and_a_key_made_at_start(
    store: str, tmp_path: Path
) -> None:
    pem, other = pem_file(tmp_path / "grant.pem"), pem_file(tmp_path / "other.pem")
    kid = GrantSigner.from_pem(pem).kid
    async with serve("--db", store, "--grant-key", str(pem), env=env_with(None)) as first:
        line = await refused(store, None, other)
        assert line.startswith(
            f"error: the other nodes on this store sign grant tokens with another --grant-key file (kid {kid})"
        )
        assert "start it with their grant key file (--grant-key FILE or INTERLOCK_GRANT_KEY)" in line, line
        line = await refused(store, None)
        assert f"with a --grant-key file (kid {kid}), and this node has none" in line, line
        assert "`interlock grant-key forget`" in line, line
        line = await refused(store, KEY)  # a secret key alone derives a grant key: not theirs either
        assert "this node with the key derived from INTERLOCK_SECRET_KEY" in line, line
        # The refused node recorded neither key: a node like the first, without a secret key, still starts.
        async with serve("--db", store, env=env_with(None, pem)) as second:  # the file, as INTERLOCK_GRANT_KEY
            assert await kid_served(first) == await kid_served(second) == kid


def kept_grant_key(path: Path) -> list[tuple[str, int]]:
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        return db.execute("SELECT kid, derived FROM grant_key_id").fetchall()


@pytest.mark.slow
async def test_grant_key_rotate_and_forget_change_the_key_the_nodes_are_held_to(tmp_path: Path) -> None:
    path = tmp_path / "nodes.db"
    store = f"sqlite:///{path}"
    async with serve("--db", store, env=env_with(KEY)):
        pass
    pem = pem_file(tmp_path / "grant.pem")
    assert "error: the other nodes on this store sign grant tokens" in await refused(store, KEY, pem)

    rotated = invoke("grant-key", "rotate", "--grant-key", str(pem), "--db", store, env=env_with(KEY))
    kid = GrantSigner.from_pem(pem).kid
    assert rotated.returncode == 0 and f"sign grant tokens with the key {kid} from now on" in rotated.stderr
    assert kept_grant_key(path) == [(kid, 0)]
    again = invoke("grant-key", "rotate", "--db", store, env=env_with(KEY, pem))  # the file, as INTERLOCK_GRANT_KEY
    assert again.returncode == 0 and "unchanged" in again.stderr
    async with serve("--db", store, env=env_with(KEY, pem)) as node:  # the new key's node starts
        assert await kid_served(node) == kid
    assert "error: the other nodes" in await refused(store, KEY)  # and the derived one no longer does

    back = invoke("grant-key", "rotate", "--db", store, env=env_with(KEY))  # the key derived from the secret key
    assert back.returncode == 0 and kept_grant_key(path) == [(GrantSigner.from_secret(KEY).kid, 1)]
    neither = invoke("grant-key", "rotate", "--db", store, env=env_with(None))
    assert neither.returncode == 4 and "neither --grant-key (INTERLOCK_GRANT_KEY) nor INTERLOCK_SECRET_KEY" in (
        neither.stderr
    )
    not_a_key = tmp_path / "not-a-key.pem"
    not_a_key.write_text("hello")
    bad = invoke("grant-key", "rotate", "--grant-key", str(not_a_key), "--db", store, env=env_with(KEY))
    assert bad.returncode == 4 and bad.stderr.startswith(f"error: --grant-key {not_a_key}: "), bad.stderr
    assert kept_grant_key(path) == [(GrantSigner.from_secret(KEY).kid, 1)]  # nothing changed

    forgot = invoke("grant-key", "forget", "--db", store, env=env_with(None))
    assert forgot.returncode == 0 and "keeps no grant key now" in forgot.stderr and kept_grant_key(path) == []
    server = invoke("grant-key", "forget", "--db", "http://127.0.0.1:9", env=env_with(None))
    assert server.returncode == 4
    assert "`interlock grant-key forget` works on the server's store file, not through its URL" in server.stderr


@pytest.mark.parametrize("command", [("serve", "--port", "0"), ("grant-key", "rotate")], ids=lambda c: c[0])
def test_a_grant_key_file_that_cannot_be_read_or_is_no_key_is_refused_naming_the_option(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    store = new_store(tmp_path / "nodes.db")
    rsa = tmp_path / "rsa.pem"
    rsa.write_bytes(rsa_private_key())
    garbled = tmp_path / "garbled.pem"
    garbled.write_text("-----BEGIN PRIVATE KEY-----\nnot base64\n-----END PRIVATE KEY-----\n")
    for given, why in (
        (tmp_path / "missing.pem", "No such file or directory"),
        (garbled, "not a private key in PEM that this server can read (make one with `openssl genpkey"),
        (rsa, "the grant key must be an Ed25519 private key"),
    ):
        refused = invoke(*command, "--grant-key", str(given), "--db", store, env=env_with(KEY))
        assert refused.returncode == 4, refused.stderr
        [line] = refused.stderr.splitlines()
        assert line.startswith(f"error: --grant-key {given}: {why}"), line
    assert kept_grant_key(tmp_path / "nodes.db") == []  # nothing recorded, nothing served


def rsa_private_key() -> bytes:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
