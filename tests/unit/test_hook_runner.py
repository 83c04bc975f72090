"""The one hook runner every hook mechanism uses: order, bounds, logging, outcomes."""

from __future__ import annotations

import asyncio
import logging

import anyio
import pytest

from interlock.hooks import Hooks

pytestmark = pytest.mark.anyio

BOUND = 10


def about(subject: str) -> str:
    return f"subject {subject}"


async def test_hooks_run_by_priority_and_equal_priorities_in_the_order_added() -> None:
    hooks: Hooks[str, str] = Hooks("test hook", about)
    for name, priority in (("c", 5), ("a1", -1), ("b1", 0), ("a2", -1), ("b2", 0)):
        hooks.add(lambda subject, name=name: f"{name}:{subject}", priority=priority, timeout=BOUND)
    with anyio.fail_after(BOUND):
        outcomes = await hooks.run("x")
    assert [o.verdict for o in outcomes] == ["a1:x", "a2:x", "b1:x", "b2:x", "c:x"]


async def test_a_sync_hook_and_an_async_hook_both_give_their_verdict() -> None:
    hooks: Hooks[int, int] = Hooks("test hook", str)

    async def doubled(n: int) -> int:
        return n * 2

    hooks.add(lambda n: n + 1, timeout=BOUND)
    hooks.add(doubled, timeout=BOUND)
    with anyio.fail_after(BOUND):
        outcomes = await hooks.run(3)
    assert [(o.verdict, o.failed) for o in outcomes] == [(4, False), (6, False)]


async def test_a_hook_that_raises_or_overruns_is_logged_by_name_and_the_next_still_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hooks: Hooks[str, str] = Hooks("test hook", about)

    async def broken(subject: str) -> str:
        raise RuntimeError("boom")

    async def hangs(subject: str) -> str:
        await asyncio.Event().wait()
        return "never"

    async def fine(subject: str) -> str:
        return "ok"

    hooks.add(broken, timeout=BOUND)
    hooks.add(hangs, timeout=0.01)
    hooks.add(fine, timeout=BOUND)
    with caplog.at_level(logging.WARNING, logger="interlock"), anyio.fail_after(BOUND):
        failed, overran, ran = await hooks.run("s1")
    assert isinstance(failed.error, RuntimeError) and not failed.timed_out and failed.verdict is None
    assert overran.timed_out and overran.error is None and overran.failed
    assert ran.verdict == "ok" and not ran.failed
    messages = [r.getMessage() for r in caplog.records]
    assert any("broken" in m and "failed on subject s1" in m for m in messages)
    assert any("hangs" in m and "timed out after 0.01s on subject s1" in m for m in messages)


async def test_a_timeout_error_raised_by_the_hook_itself_is_a_failure_not_an_overrun() -> None:
    hooks: Hooks[str, str] = Hooks("test hook", about)

    async def gives_up(subject: str) -> str:
        raise TimeoutError("the upstream timed out")

    hooks.add(gives_up, timeout=BOUND)
    with anyio.fail_after(BOUND):
        (outcome,) = await hooks.run("s")
    assert not outcome.timed_out and isinstance(outcome.error, TimeoutError)


async def test_until_stops_after_the_first_verdict_it_accepts_and_a_failure_never_stops_the_run() -> None:
    hooks: Hooks[str, str | None] = Hooks("test hook", about)
    ran: list[str] = []

    def hook(name: str, verdict: str | None, fail: bool = False) -> None:
        def run(subject: str) -> str | None:
            ran.append(name)
            if fail:
                raise RuntimeError(name)
            return verdict

        hooks.add(run, timeout=BOUND)

    hook("fails", "stop", fail=True)
    hook("passes", None)
    hook("stops", "stop")
    hook("never runs", None)
    with anyio.fail_after(BOUND):
        outcomes = await hooks.run("s", until=lambda verdict: verdict == "stop")
    assert ran == ["fails", "passes", "stops"]
    assert outcomes[-1].verdict == "stop"


async def test_an_empty_runner_is_false_and_a_bound_must_be_positive() -> None:
    hooks: Hooks[str, None] = Hooks("test hook", about)
    assert not hooks
    for bad in (0, -1, float("nan")):
        with pytest.raises(ValueError, match="positive number of seconds"):
            hooks.add(lambda subject: None, timeout=bad)
    assert not hooks
    hooks.add(lambda subject: None, timeout=1)
    assert hooks and len(hooks) == 1
