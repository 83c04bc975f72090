"""The approval policy port (`PolicyStore`), checked the same way on every store: policies
stored per agent and tool server, versioned, listed, deleted, each change with its event."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from interlock.approval_policies import ApprovalPolicy, PolicyHook
from interlock.store import Store

pytestmark = pytest.mark.anyio


def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


HOOK = PolicyHook("https://hooks.example.com/approve", "s3cret-s3cret-s3cret", "pause", 5.0)


async def test_a_policy_is_stored_with_its_rules_and_hook_and_read_back(store: Store) -> None:
    policy = ApprovalPolicy("bot", "github", "once", ("push", "merge_*"), ("read_file",), HOOK)
    at = now()
    stored = await store.put_policy(policy, at, "alice")
    assert (stored.version, stored.updated_by, stored.updated_at) == (1, "alice", at)
    read = await store.get_policy("bot", "github")
    assert read == stored
    assert read is not None and read.hook == HOOK and read.gated_tools == ("push", "merge_*")
    assert await store.get_policy("bot", "") is None
    assert await store.get_policy("other", "github") is None


async def test_replacing_a_policy_counts_its_version_up_and_keeps_one_per_agent_and_server(store: Store) -> None:
    await store.put_policy(ApprovalPolicy("bot", approval="always"), now(), "alice")
    second = await store.put_policy(ApprovalPolicy("bot", approval="never", auto_allow=("ls",)), now(), "root")
    assert second.version == 2
    read = await store.get_policy("bot", "")
    assert read is not None and (read.approval, read.auto_allow, read.version, read.updated_by) == (
        "never",
        ("ls",),
        2,
        "root",
    )
    assert read.gated_tools is None and read.hook is None


async def test_policies_are_listed_by_agent_then_server(store: Store) -> None:
    for agent, server in (("zed", ""), ("bot", "slack"), ("bot", ""), ("bot", "github")):
        await store.put_policy(ApprovalPolicy(agent, server, "always"), now(), None)
    assert [(p.agent, p.server) for p in await store.list_policies()] == [
        ("bot", ""),
        ("bot", "github"),
        ("bot", "slack"),
        ("zed", ""),
    ]
    assert [p.server for p in await store.list_policies("bot")] == ["", "github", "slack"]
    assert await store.list_policies("nobody") == []


async def test_deleting_a_policy_returns_it_once(store: Store) -> None:
    await store.put_policy(ApprovalPolicy("bot", "github", "always"), now(), "alice")
    gone = await store.delete_policy("bot", "github", "alice", now())
    assert gone is not None and gone.approval == "always"
    assert await store.get_policy("bot", "github") is None
    assert await store.delete_policy("bot", "github", "alice", now()) is None
    again = await store.put_policy(ApprovalPolicy("bot", "github", "once"), now(), "alice")
    assert again.version == 1


async def test_each_change_appends_its_event_without_the_hooks_secret(store: Store) -> None:
    await store.put_policy(ApprovalPolicy("bot", "github", "always", hook=HOOK), now(), "alice")
    await store.put_policy(ApprovalPolicy("bot", "github", "once"), now(), "alice")
    await store.delete_policy("bot", "github", "root", now())
    events = [e for e in await store.events() if e.type.startswith("approval_policy_")]
    assert [(e.type, e.data["version"], e.data["by"]) for e in events] == [
        ("approval_policy_set", 1, "alice"),
        ("approval_policy_set", 2, "alice"),
        ("approval_policy_deleted", 2, "root"),
    ]
    assert all(e.data["agent"] == "bot" and e.data["server"] == "github" for e in events)
    assert all(HOOK.secret not in str(e.data) for e in events)
