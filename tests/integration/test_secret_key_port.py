"""The secret key's fingerprint (`SecretKeyStore`), checked the same way on every store: the
first recorded stands, of any number of nodes recording at once; a rotation replaces it.
Then what a broker and a server on the store make of it: a node signing with another key,
or with none beside nodes that have one, is refused (`interlock.secret_key`)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from interlock.broker import LocalBroker
from interlock.secret_key import NO_KEY, OTHER_KEY, fingerprint
from interlock.server.app import StartupRefused, create_app
from interlock.store import Store
from key_support import now, opened_broker

pytestmark = pytest.mark.anyio

KEY, OTHER = "the-nodes-key-0123456789-0123456789", "another-key-0123456789-0123456789"


broker = pytest.fixture(opened_broker)


async def test_a_store_keeps_no_fingerprint_until_one_is_recorded(store: Store) -> None:
    assert await store.key_fingerprint() is None


async def test_the_first_fingerprint_recorded_stands(store: Store) -> None:
    assert await store.keep_key_fingerprint("a" * 64, now()) == "a" * 64
    assert await store.keep_key_fingerprint("b" * 64, now()) == "a" * 64
    assert await store.key_fingerprint() == "a" * 64


async def test_of_nodes_recording_at_once_one_records_and_all_get_its_fingerprint(store: Store) -> None:
    kept = await asyncio.gather(*(store.keep_key_fingerprint(f"{n:064x}", now()) for n in range(8)))
    assert len(set(kept)) == 1 and kept[0] in {f"{n:064x}" for n in range(8)}
    assert await store.key_fingerprint() == kept[0]


async def test_a_fingerprint_replaced_or_forgotten_is_what_the_next_node_finds(store: Store) -> None:
    await store.keep_key_fingerprint("a" * 64, now())
    await store.replace_key_fingerprint("b" * 64, now())
    assert await store.keep_key_fingerprint("a" * 64, now()) == "b" * 64
    await store.replace_key_fingerprint(None, now())
    assert await store.key_fingerprint() is None
    assert await store.keep_key_fingerprint("c" * 64, now()) == "c" * 64
    await store.replace_key_fingerprint(None, now())
    await store.replace_key_fingerprint(None, now())  # forgetting none changes nothing
    await store.replace_key_fingerprint("d" * 64, now())  # recorded where none is
    assert await store.key_fingerprint() == "d" * 64


def test_a_fingerprint_tells_keys_apart_and_is_not_the_key() -> None:
    assert fingerprint(KEY) == fingerprint(KEY) != fingerprint(OTHER)
    assert KEY not in fingerprint(KEY) and len(fingerprint(KEY)) == 64
    assert fingerprint("\udcff-not-utf-8") != fingerprint("")  # any text an environment variable holds
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=b"interlock", info=b"interlock secret key fingerprint")
    assert fingerprint(KEY) == hkdf.derive(KEY.encode()).hex()  # HKDF-SHA256, as RFC 5869 has it


async def test_the_first_node_with_a_key_records_it_and_one_with_another_is_refused(broker: LocalBroker) -> None:
    store = broker.store
    assert await broker.check_secret_key(None) is None  # no node with a key yet: a key made at start will do
    assert await store.key_fingerprint() is None
    assert await broker.check_secret_key(KEY) is None
    assert await store.key_fingerprint() == fingerprint(KEY)
    assert await broker.check_secret_key(KEY) is None  # the same key: a node beside it
    assert await broker.check_secret_key(OTHER) == OTHER_KEY
    assert await broker.check_secret_key(None) == await broker.check_secret_key("") == NO_KEY
    assert await store.key_fingerprint() == fingerprint(KEY)  # a refused node changes nothing
    assert "sign with another INTERLOCK_SECRET_KEY" in OTHER_KEY and "interlock secret-key rotate" in OTHER_KEY


async def test_a_rotation_admits_the_new_key_alone_and_forgetting_admits_nodes_without_one(
    broker: LocalBroker,
) -> None:
    store = broker.store
    assert await broker.check_secret_key(KEY) is None
    assert await broker.rotate_secret_key(OTHER) is True
    assert await broker.rotate_secret_key(OTHER) is False  # already the key: nothing changed
    assert await broker.check_secret_key(KEY) == OTHER_KEY
    assert await broker.check_secret_key(OTHER) is None
    assert await broker.rotate_secret_key(None) is True
    assert await broker.check_secret_key(None) is None
    assert await broker.check_secret_key(KEY) is None  # the next node with a key records it again
    assert await store.key_fingerprint() == fingerprint(KEY)


async def test_a_server_with_another_key_on_the_store_refuses_to_start(broker: LocalBroker) -> None:
    first = create_app(broker=broker, secret_key=KEY)
    async with first.router.lifespan_context(first):
        for secret in (OTHER, None):
            refused = create_app(broker=broker, secret_key=secret)
            with pytest.raises(StartupRefused):
                async with refused.router.lifespan_context(refused):
                    pass
            assert refused.state.interlock.refused == (OTHER_KEY if secret else NO_KEY)
        beside = create_app(broker=broker, secret_key=KEY)
        async with beside.router.lifespan_context(beside):
            assert beside.state.interlock.refused is None


async def test_a_refused_server_closes_the_store_it_opened(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'nodes.db'}"
    first = create_app(url, secret_key=KEY)
    async with first.router.lifespan_context(first):
        pass
    refused = create_app(url, secret_key=OTHER)
    with pytest.raises(StartupRefused):
        async with refused.router.lifespan_context(refused):
            pass
    assert refused.state.interlock.broker._state != "open"


@pytest.mark.parametrize("secret", ["hunter2", "x" * 31])
def test_an_app_given_a_key_too_short_to_keep_its_links_safe_is_refused_before_it_opens_a_store(
    tmp_path: Path, secret: str
) -> None:
    """As `interlock serve` refuses such an `INTERLOCK_SECRET_KEY`: a program that makes the
    app itself is told the same, naming its argument, and no store is made."""
    db = tmp_path / "never.db"
    with pytest.raises(ValueError, match=rf"^secret_key is {len(secret)} characters long: .* at least 32 random"):
        create_app(f"sqlite:///{db}", secret_key=secret)
    assert not db.exists()
