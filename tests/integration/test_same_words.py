"""A bad answer, a bad ask or a bad argument is refused in the same words, with the same
exception, by a local broker and by the remote broker over a server: one source of
wording (the model's and the broker's checks), whichever side of the wire says it."""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

import interlock
from interlock import Broker, Choice, Confirm, Form, MultiChoice, Request, Text
from interlock.model import Answers

pytestmark = pytest.mark.anyio

FORM = {
    "type": "object",
    "properties": {"n": {"type": "integer", "maximum": 5}, "s": {"type": "string", "maxLength": 3}},
    "required": ["n"],
    "additionalProperties": False,
}
ASKS: dict[str, Callable[[], Any]] = {
    "text": lambda: Text("Name?", id="a", max_length=5),
    "confirm": lambda: Confirm("Ok?", id="a"),
    "choice": lambda: Choice("Pick", ["x", "y"], id="a"),
    "choice_or_other": lambda: Choice("Pick", ["x", "y"], id="a", allow_other=True),
    "multi_choice": lambda: MultiChoice("Pick", ["x", "y", "z"], id="a", min=1, max=2),
    "form": lambda: Form("F", schema=FORM, id="a"),
}
BAD_ANSWERS: dict[str, list[Any]] = {
    "text": [1, None, True, ["a"], {"a": 1}, "toolong", "", Answers(b="x"), Answers(), "a\x00", float("nan")],
    "confirm": ["yes?", 2, None, [True], {"x": 1}],
    "choice": ["z", 1, None, ["x"], {"other": 1}, ""],
    "choice_or_other": [1, None, ["x"], {"other": 1}, {"other": ""}, "q" * 300_000],
    "multi_choice": ["x", [], ["x", "y", "z"], ["q"], [1], ["x", "x"], None],
    "form": [{}, {"n": "1"}, {"n": 9}, {"n": 1, "extra": 1}, {"n": 1, "s": "long"}, "x", None, [1], 3],
}
ANSWER_CASES = [(kind, bad) for kind, bads in BAD_ANSWERS.items() for bad in bads]

Call = Callable[[Broker, Request], Awaitable[Any]]
BAD_CALLS: dict[str, Call] = {
    "answer_by_not_a_string": lambda b, r: b.resolve(r.id, "x", by=3),  # type: ignore[arg-type]
    "answer_by_too_long": lambda b, r: b.resolve(r.id, "x", by="b" * 1000),
    "answer_via_too_long": lambda b, r: b.resolve(r.id, "x", via="v" * 1000),
    "answer_comment_too_long": lambda b, r: b.resolve(r.id, "x", comment="c" * 30_000),
    "answer_comment_not_a_string": lambda b, r: b.resolve(r.id, "x", comment=3),  # type: ignore[arg-type]
    "answer_too_large": lambda b, r: b.resolve(r.id, "x" * 2_000_000),
    "answer_not_json": lambda b, r: b.resolve(r.id, {"x"}),
    "grants_not_a_list": lambda b, r: b.resolve(r.id, "x", grants="x"),  # type: ignore[arg-type]
    "grants_not_objects": lambda b, r: b.resolve(r.id, "x", grants=[None]),  # type: ignore[list-item]
    "grants_unknown_field": lambda b, r: b.resolve(r.id, "x", grants=[{"nope": 1}]),
    "grants_with_not_a_string": lambda b, r: b.resolve(r.id, "x", grants=[{"with": 1, "can": "b"}]),
    "grants_bad_exp": lambda b, r: b.resolve(r.id, "x", grants=[{"with": "a", "can": "b", "exp": "x"}]),
    "grants_too_many": lambda b, r: b.resolve(r.id, "x", grants=[{"with": "a", "can": "b"}] * 100),
    "grants_not_offered": lambda b, r: b.resolve(r.id, "x", grants=[{"with": "a", "can": "b"}]),
    "reject_reason_too_long": lambda b, r: b.reject(r.id, "r" * 30_000),
    "reject_reason_not_a_string": lambda b, r: b.reject(r.id, 5),  # type: ignore[arg-type]
    "reject_by_not_a_string": lambda b, r: b.reject(r.id, "no", by=3),  # type: ignore[arg-type]
    "reject_via_not_a_string": lambda b, r: b.reject(r.id, "no", via=3),  # type: ignore[arg-type]
    "cancel_reason_too_long": lambda b, r: b.cancel(r.id, "r" * 30_000),
    "cancel_by_not_a_string": lambda b, r: b.cancel(r.id, "no", by=3),  # type: ignore[arg-type]
    "consume_by_not_a_string": lambda b, r: b.consume(r.id, by=3),  # type: ignore[arg-type]
    "close_channel_not_a_string": lambda b, r: b.close(3),  # type: ignore[arg-type]
    "close_channel_too_long": lambda b, r: b.close("c" * 1000),
    "reopen_channel_too_long": lambda b, r: b.reopen("c" * 1000),
    "inform_by_not_a_string": lambda b, r: b.inform("hi", by=3),  # type: ignore[arg-type]
    "inform_to_too_long": lambda b, r: b.inform("hi", to="t" * 1000),
    "inform_too_long": lambda b, r: b.inform("m" * 100_000),
    "run_agent_not_a_string": lambda b, r: b.start_run(3),  # type: ignore[arg-type]
    "run_agent_empty": lambda b, r: b.start_run(""),
    "run_session_not_a_string": lambda b, r: b.start_run("a", session=3),  # type: ignore[arg-type]
    "run_id_empty": lambda b, r: b.start_run("a", run_id=""),
    "run_bad_duration": lambda b, r: b.start_run("a", max_duration=-1),
    "ask_title_too_long": lambda b, r: b.create(Text("Q"), title="t" * 10_000),
    "ask_prompt_too_long": lambda b, r: b.create(Text("p" * 30_000)),
    "ask_context_not_json": lambda b, r: b.create(Text("Q"), context={"x": float("nan")}),
    "ask_to_not_a_string": lambda b, r: b.create(Text("Q"), to=5),  # type: ignore[arg-type]
    "ask_bad_timeout": lambda b, r: b.create(Text("Q"), timeout=-1),
    "ask_naive_expiry": lambda b, r: b.create(Text("Q"), expires_at=datetime.datetime(2100, 1, 1)),
    "ask_no_such_run": lambda b, r: b.create(Text("Q"), run="nope"),
    "ask_kind": lambda b, r: b.create(Text("Q"), kind="other"),  # type: ignore[arg-type]
    "ask_ids_twice": lambda b, r: b.create([Text("a", id="x"), Text("b", id="x")]),
    "ask_none": lambda b, r: b.create([]),
    "ask_too_many": lambda b, r: b.create([Text("a", id=f"x{i}") for i in range(100)]),
    "ask_reserved_context": lambda b, r: b.create(Text("Q"), context={"kind": "interlock.approval"}),
    "asks_of_unknown_type": lambda b, r: b.build_asks([{"type": "nope"}]),
    "asks_too_many": lambda b, r: b.build_asks([{"type": "text", "prompt": "x"}] * 100),
}


async def refusal(broker: Broker, ask: Any, call: Call) -> tuple[str, str]:
    """What `call` raises on a fresh request of `ask` (its id taken out of the words)."""
    request = await broker.create(ask, to="alice")
    try:
        await call(broker, request)
    except Exception as exc:
        return type(exc).__name__, str(exc).replace(request.id, "<id>")
    return "nothing raised", ""


async def same_refusal(broker: Broker, ask: Callable[[], Any], call: Call) -> None:
    async with interlock.connect("memory://") as local:
        expected = await refusal(local, ask(), call)
    assert expected[0] != "nothing raised"
    assert await refusal(broker, ask(), call) == expected


@pytest.mark.parametrize("backend", ["sqlite", "http"], indirect=True)
@pytest.mark.parametrize(("kind", "bad"), ANSWER_CASES, ids=[f"{k}-{i}" for i, (k, _) in enumerate(ANSWER_CASES)])
async def test_a_bad_answer_is_refused_in_the_same_words_by_a_local_and_a_remote_broker(
    broker: Broker, kind: str, bad: Any
) -> None:
    await same_refusal(broker, ASKS[kind], lambda b, r: b.resolve(r.id, bad, by="alice"))


@pytest.mark.parametrize("backend", ["sqlite", "http"], indirect=True)
@pytest.mark.parametrize("call", list(BAD_CALLS))
async def test_a_bad_argument_is_refused_in_the_same_words_by_a_local_and_a_remote_broker(
    broker: Broker, call: str
) -> None:
    await same_refusal(broker, ASKS["text"], BAD_CALLS[call])
