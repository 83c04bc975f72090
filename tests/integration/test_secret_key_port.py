"""The secret key's fingerprint (`SecretKeyStore`), checked the same way on every store: the
first recorded stands, of any number of nodes recording at once; a rotation replaces it."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest

from interlock.store import Store

pytestmark = pytest.mark.anyio


def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


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
