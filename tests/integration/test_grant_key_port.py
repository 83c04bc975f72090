"""The grant key's public id (`SecretKeyStore.grant_key_id`), checked the same way on every
store: the first recorded stands, of any number of nodes recording at once; a rotation
replaces it. Then what a broker and a server on the store make of it: a node signing grant
tokens with another key, or with one it makes at start beside nodes with a stable one, is
refused (`interlock.secret_key`); a grant key derived from the secret key follows it."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

import interlock
import interlock.store.sqlite as sqlite_store
from interlock.broker import LocalBroker
from interlock.grant_tokens import GrantSigner
from interlock.secret_key import NO_KEY, OTHER_KEY, GrantKeyId, no_grant_key, other_grant_key
from interlock.server.app import StartupRefused, create_app
from interlock.store import Store
from interlock.store._sql import load_migrations
from key_support import now, opened_broker

pytestmark = pytest.mark.anyio

KEY, OTHER = "the-nodes-key-0123456789-0123456789", "another-key-0123456789-0123456789"
FILE, OTHER_FILE = GrantSigner.generate(), GrantSigner.generate()
DERIVED = GrantSigner.from_secret(KEY)


broker = pytest.fixture(opened_broker)


async def refusal(broker: LocalBroker, secret_key: str | None, grant_key: GrantSigner | None) -> str | None:
    """Why a server with these keys is refused at start on the broker's store; None if it starts."""
    app = create_app(broker=broker, secret_key=secret_key, grant_key=grant_key)
    with contextlib.suppress(StartupRefused):
        async with app.router.lifespan_context(app):
            assert app.state.interlock.refused is None
    refused: str | None = app.state.interlock.refused
    return refused


# -- the store port ----------------------------------------------------------------------


async def test_a_store_keeps_no_grant_key_until_one_is_recorded(store: Store) -> None:
    assert await store.grant_key_id() is None


async def test_the_first_grant_key_recorded_stands_with_whether_it_is_derived(store: Store) -> None:
    assert await store.keep_grant_key_id(GrantKeyId("kid-a", derived=True), now()) == GrantKeyId("kid-a", True)
    assert await store.keep_grant_key_id(GrantKeyId("kid-b"), now()) == GrantKeyId("kid-a", True)
    assert await store.grant_key_id() == GrantKeyId("kid-a", True)
    assert await store.key_fingerprint() is None  # apart from the secret key's fingerprint


async def test_of_nodes_recording_a_grant_key_at_once_one_records_and_all_get_it(store: Store) -> None:
    keys = [GrantKeyId(f"kid-{n}", derived=n % 2 == 0) for n in range(8)]
    kept = await asyncio.gather(*(store.keep_grant_key_id(key, now()) for key in keys))
    assert len(set(kept)) == 1 and kept[0] in keys
    assert await store.grant_key_id() == kept[0]


async def test_a_grant_key_replaced_or_forgotten_is_what_the_next_node_finds(store: Store) -> None:
    await store.keep_grant_key_id(GrantKeyId("kid-a"), now())
    await store.replace_grant_key_id(GrantKeyId("kid-b", derived=True), now())
    assert await store.keep_grant_key_id(GrantKeyId("kid-a"), now()) == GrantKeyId("kid-b", True)
    await store.replace_grant_key_id(GrantKeyId("kid-b"), now())  # the same key, now given in a file
    assert await store.grant_key_id() == GrantKeyId("kid-b", False)
    await store.replace_grant_key_id(None, now())
    assert await store.grant_key_id() is None
    assert await store.keep_grant_key_id(GrantKeyId("kid-c"), now()) == GrantKeyId("kid-c")
    await store.replace_grant_key_id(None, now())
    await store.replace_grant_key_id(None, now())  # forgetting none changes nothing
    await store.replace_grant_key_id(GrantKeyId("kid-d"), now())  # recorded where none is
    assert await store.grant_key_id() == GrantKeyId("kid-d")


# -- the broker ----------------------------------------------------------------------------


async def test_the_first_node_with_a_grant_key_records_it_and_one_with_another_is_refused(broker: LocalBroker) -> None:
    store = broker.store
    assert await broker.check_grant_key(None) is None  # no node with a stable key yet: one made at start will do
    assert await store.grant_key_id() is None
    assert await broker.check_grant_key(FILE.kid) is None
    assert await store.grant_key_id() == GrantKeyId(FILE.kid, derived=False)
    assert await broker.check_grant_key(FILE.kid) is None  # the same key: a node beside it
    mine = GrantKeyId(DERIVED.kid, derived=True)
    assert await broker.check_grant_key(DERIVED.kid, derived=True) == other_grant_key(GrantKeyId(FILE.kid), mine)
    assert await broker.check_grant_key(None) == await broker.check_grant_key("") == no_grant_key(GrantKeyId(FILE.kid))
    assert await store.grant_key_id() == GrantKeyId(FILE.kid)  # a refused node changes nothing


def test_the_refusals_name_both_public_ids_and_what_to_do() -> None:
    file, derived = GrantKeyId(FILE.kid), GrantKeyId(DERIVED.kid, derived=True)
    beside_derived = other_grant_key(derived, file)
    assert beside_derived.startswith(
        f"the other nodes on this store sign grant tokens with the key derived from INTERLOCK_SECRET_KEY "
        f"(kid {DERIVED.kid}), this node with a --grant-key file (kid {FILE.kid})"
    ), beside_derived
    assert "start it without --grant-key (or INTERLOCK_GRANT_KEY) and with their INTERLOCK_SECRET_KEY" in beside_derived
    beside_file = other_grant_key(file, GrantKeyId(OTHER_FILE.kid))
    assert f"with another --grant-key file (kid {FILE.kid}), this node with a --grant-key file" in beside_file
    assert "start it with their grant key file (--grant-key FILE or INTERLOCK_GRANT_KEY)" in beside_file
    for line in (beside_derived, beside_file):
        assert line.endswith("change the grant key of every node on purpose with `interlock grant-key rotate`")
    alone = no_grant_key(file)
    assert f"with a --grant-key file (kid {FILE.kid}), and this node has none" in alone
    assert alone.endswith("let each node make its own again with `interlock grant-key forget`")
    assert all("\n" not in line for line in (beside_derived, beside_file, alone))


async def test_a_grant_key_rotation_admits_the_new_key_alone_and_forgetting_admits_keys_made_at_start(
    broker: LocalBroker,
) -> None:
    store = broker.store
    assert await broker.check_grant_key(FILE.kid) is None
    assert await broker.rotate_grant_key(OTHER_FILE.kid) is True
    assert await broker.rotate_grant_key(OTHER_FILE.kid) is False  # already the key: nothing changed
    assert await broker.check_grant_key(FILE.kid) is not None
    assert await broker.check_grant_key(OTHER_FILE.kid) is None
    assert await broker.rotate_grant_key(DERIVED.kid, derived=True) is True  # from a file to the derived key
    assert await store.grant_key_id() == GrantKeyId(DERIVED.kid, derived=True)
    assert await broker.rotate_grant_key(None) is True
    assert await broker.rotate_grant_key(None) is False
    assert await broker.check_grant_key(None) is None
    assert await broker.check_grant_key(FILE.kid) is None  # the next node with a stable key records it again
    assert await store.grant_key_id() == GrantKeyId(FILE.kid)


async def test_a_grant_key_derived_from_the_secret_key_follows_it_and_one_in_a_file_stays(
    broker: LocalBroker,
) -> None:
    store = broker.store
    assert await broker.check_secret_key(KEY) is None
    assert await broker.check_grant_key(DERIVED.kid, derived=True) is None
    assert await broker.rotate_secret_key(OTHER) is True
    assert await store.grant_key_id() is None  # forgotten with the key it was derived from
    new = GrantSigner.from_secret(OTHER)
    assert await broker.check_grant_key(new.kid, derived=True) is None  # the first node with the new key
    assert await store.grant_key_id() == GrantKeyId(new.kid, derived=True)
    assert await broker.rotate_secret_key(None) is True  # forgetting the secret key forgets it too
    assert await store.grant_key_id() is None
    assert await broker.check_grant_key(FILE.kid) is None
    assert await broker.rotate_secret_key(KEY) is True
    assert await broker.rotate_secret_key(None) is True
    assert await store.grant_key_id() == GrantKeyId(FILE.kid)  # a key in a file is not the secret key's


async def test_a_look_without_recording_says_the_same_and_records_nothing(broker: LocalBroker) -> None:
    store = broker.store
    assert await broker.check_secret_key(KEY, record=False) is None
    assert await broker.check_grant_key(FILE.kid, record=False) is None
    assert await store.key_fingerprint() is None and await store.grant_key_id() is None
    assert await broker.check_secret_key(KEY) is None and await broker.check_grant_key(FILE.kid) is None
    assert await broker.check_secret_key(OTHER, record=False) == OTHER_KEY
    assert await broker.check_secret_key(None, record=False) == NO_KEY
    assert await broker.check_grant_key(FILE.kid, record=False) is None
    mine = GrantKeyId(DERIVED.kid, derived=True)
    assert await broker.check_grant_key(DERIVED.kid, derived=True, record=False) == other_grant_key(
        GrantKeyId(FILE.kid), mine
    )
    assert await broker.check_grant_key(None, record=False) == no_grant_key(GrantKeyId(FILE.kid))


# -- the server ----------------------------------------------------------------------------


async def test_a_server_with_another_grant_key_on_the_store_refuses_to_start(broker: LocalBroker) -> None:
    first = create_app(broker=broker, secret_key=KEY)  # signs grant tokens with the key derived from it
    async with first.router.lifespan_context(first):
        assert await broker.store.grant_key_id() == GrantKeyId(DERIVED.kid, derived=True)
        mine = GrantKeyId(FILE.kid)
        assert await refusal(broker, KEY, FILE) == other_grant_key(GrantKeyId(DERIVED.kid, True), mine)
        assert await refusal(broker, None, None) == NO_KEY  # the secret key's refusal comes first
        assert await refusal(broker, KEY, DERIVED) is None  # a signer given: its key is what counts
        assert await refusal(broker, KEY, None) is None  # beside it, alike


async def test_servers_that_share_a_grant_key_file_and_no_secret_key_refuse_one_that_makes_its_own(
    broker: LocalBroker,
) -> None:
    first = create_app(broker=broker, grant_key=FILE)
    async with first.router.lifespan_context(first):
        assert await broker.store.key_fingerprint() is None  # no secret key: its check lets anyone in
        assert await refusal(broker, None, None) == no_grant_key(GrantKeyId(FILE.kid))
        assert await refusal(broker, None, OTHER_FILE) == other_grant_key(
            GrantKeyId(FILE.kid), GrantKeyId(OTHER_FILE.kid)
        )
        assert await refusal(broker, None, FILE) is None
        derived = GrantKeyId(DERIVED.kid, derived=True)
        assert await refusal(broker, KEY, None) == other_grant_key(GrantKeyId(FILE.kid), derived)
        assert await broker.store.key_fingerprint() is None  # refused, it recorded neither key
        assert await refusal(broker, None, FILE) is None  # so a node like the first still starts
        assert await refusal(broker, KEY, FILE) is None  # a secret key besides: the grant key is the file's


async def test_servers_that_make_their_keys_at_start_record_nothing(broker: LocalBroker) -> None:
    for _ in range(2):
        assert await refusal(broker, None, None) is None
    assert await broker.store.grant_key_id() is None
    assert await broker.store.key_fingerprint() is None


async def test_a_database_from_before_records_the_grant_key_of_the_first_node_on_this_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'nodes.db'}"
    migrations = load_migrations("sqlite")
    earlier = migrations[: [m.name for m in migrations].index("grant_key_id")]  # the version before it
    with monkeypatch.context() as patch:  # nodes of the version before, on one secret key
        patch.setattr(sqlite_store, "load_migrations", lambda dialect: earlier)
        async with interlock.connect(url) as old:
            assert isinstance(old, LocalBroker)
            assert await old.check_secret_key(KEY) is None
    async with interlock.connect(url) as upgraded:
        assert isinstance(upgraded, LocalBroker)
        assert await upgraded.store.grant_key_id() is None
        assert await refusal(upgraded, KEY, None) is None  # the first node on this version records its key
        assert await upgraded.store.grant_key_id() == GrantKeyId(DERIVED.kid, derived=True)
        assert await refusal(upgraded, KEY, FILE) == other_grant_key(
            GrantKeyId(DERIVED.kid, True), GrantKeyId(FILE.kid)
        )
