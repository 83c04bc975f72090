"""Asks, answers and requests: the pure model."""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interlock import (
    Choice,
    Confirm,
    Form,
    InvalidAnswer,
    InvalidRequest,
    MultiChoice,
    Option,
    Origin,
    Request,
    Run,
    Text,
)
from interlock.model import (
    MAX_DEPTH,
    Limits,
    ask_from_dict,
    ask_to_dict,
    build_request,
    check_answers,
    check_json,
    creation_time,
    derived_key,
    evolve,
    new_id,
    request_from_dict,
    request_to_dict,
)


@pytest.mark.parametrize(
    ("make", "fragment"),
    [
        (lambda: build_request([Text("a", id="x"), Confirm("b", id="x")]), "used twice"),
        (lambda: build_request([]), "at least one ask"),
        (lambda: Choice("Pick"), "at least one option"),
        (lambda: MultiChoice("Pick", []), "at least one option"),
        (lambda: Choice("Pick", ["a", "a"]), "given twice"),
        (lambda: Choice("Pick", [Option("a"), {"id": "a", "label": "A"}]), "given twice"),
        (lambda: Form("Fill", schema={"type": "string"}), "type"),
        (lambda: Form("Fill", schema={"type": "object", "properties": {"a": {"type": "nope"}}}), "invalid form schema"),
        (lambda: Text(""), "non-empty"),
        (lambda: Text("   "), "non-empty"),
        (lambda: build_request(Text("x" * 20_001)), "at most 20000"),
        (lambda: build_request(Text("x" * 11), max_prompt_length=10), "at most 10"),
        (lambda: build_request(Text("ok"), kind="poll"), "kind"),
        (lambda: MultiChoice("Pick", ["a"], min=2), "only 1 options"),
        (lambda: MultiChoice("Pick", ["a", "b"], min=2, max=1), "max"),
        (lambda: Text("Say", max_length=0), "max_length"),
        (lambda: ask_from_dict({"type": "text", "prompt": "Hi", "options": ["a"]}), "only allowed on choice"),
        (lambda: ask_from_dict({"type": "confirm", "prompt": "Hi", "colour": "red"}), "unknown field"),
        (lambda: ask_from_dict({"type": "slider", "prompt": "Hi"}), "unknown ask type"),
        (lambda: build_request(Text("ok"), idempotency_key=""), "idempotency_key"),
        # A prompt's text was taken letter by letter ("not an ask: 'S'").
        (lambda: build_request("Ship it?"), "'Ship it?' is text, not an ask: ask with one, such as Text('Ship it?')"),
        (lambda: build_request({"type": "confirm", "prompt": "x"}), "build one from its JSON shape with ask_from_dict"),
        (lambda: build_request(None), "NoneType is not an ask"),
    ],
)
def test_a_malformed_request_is_refused_with_a_clear_reason(make: Any, fragment: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        make()
    assert isinstance(caught.value, ValueError)
    assert fragment in str(caught.value)


def test_the_default_prompt_limit_is_twenty_thousand_characters() -> None:
    assert build_request(Text("x" * 20_000)).asks[0].prompt == "x" * 20_000


def test_options_may_be_strings_mappings_or_options() -> None:
    ask = Choice("Pick", ["a", {"id": "b", "label": "Bee", "description": "buzz"}, Option("c", "Sea")])
    assert [(o.id, o.label) for o in ask.options] == [("a", "a"), ("b", "Bee"), ("c", "Sea")]  # type: ignore[union-attr]


def one(ask: Any) -> Any:
    return build_request(ask)


@pytest.mark.parametrize(
    ("ask", "answer", "expected"),
    [
        (Text("Name?"), "Ada", {"text": "Ada"}),
        (Confirm("Ok?"), False, {"confirm": False}),
        # the yes and no words every surface takes, as text
        (Confirm("Ok?"), " Allow ", {"confirm": True}),
        (Confirm("Ok?"), "ok", {"confirm": True}),
        (Confirm("Ok?"), "deny", {"confirm": False}),
        (Choice("One", ["a", "b"]), "b", {"choice": "b"}),
        (Choice("One", ["a", "b"], allow_other=True), "neither", {"choice": "neither"}),
        (MultiChoice("Some", ["a", "b"]), [], {"multi_choice": []}),
        (MultiChoice("Some", ["a", "b"]), ["b", "a"], {"multi_choice": ["b", "a"]}),
        (Form("F", schema={"type": "object"}), {"x": 1}, {"form": {"x": 1}}),
        # a single ask may also be answered keyed by its id
        (Text("Name?"), {"text": "Ada"}, {"text": "Ada"}),
        # ... except a form whose own property has the ask's name: that is the bare value
        (
            Form("F", id="a", schema={"type": "object", "properties": {"a": {"type": "integer"}}}),
            {"a": 1},
            {"a": {"a": 1}},
        ),
    ],
)
def test_a_good_answer_is_normalised_by_ask_id(ask: Any, answer: Any, expected: dict[str, Any]) -> None:
    assert check_answers(one(ask), answer) == expected


@pytest.mark.parametrize(
    ("ask", "answer", "fragment"),
    [
        (Text("Name?"), 3, "expected text, got a number"),
        (Text("Name?"), "  ", "required"),
        (Text("Name?", max_length=3), "Adam", "at most 3"),
        (Confirm("Ok?"), "maybe", "answer yes or no (or approve or deny), not 'maybe'"),
        (Confirm("Ok?"), 1, "expected true or false"),
        (Choice("One", ["a", "b"]), "c", "not one of the options (a, b)"),
        (Choice("One", ["a", "b"]), ["a"], "expected one option id"),
        (MultiChoice("Some", ["a", "b"]), "a", "expected a list"),
        (MultiChoice("Some", ["a", "b"]), ["a", "a"], "twice"),
        (MultiChoice("Some", ["a", "b", "c"], min=2), ["a"], "at least 2"),
        (MultiChoice("Some", ["a", "b", "c"], max=1), ["a", "b"], "at most 1"),
        (Form("F", schema={"type": "object", "required": ["n"]}), {}, "'n' is a required property"),
        (
            Form("F", schema={"type": "object", "properties": {"n": {"type": "integer"}}}),
            {"n": "x"},
            "at 'n'",
        ),
        (Form("F", schema={"type": "object"}), [1], "expected an object"),
    ],
)
def test_a_bad_answer_names_the_ask_and_the_fault(ask: Any, answer: Any, fragment: str) -> None:
    with pytest.raises(InvalidAnswer) as caught:
        check_answers(one(ask), answer)
    assert f"ask {ask.id!r}" in str(caught.value)
    assert fragment in str(caught.value)
    assert caught.value.ask_id == ask.id


def test_several_asks_need_every_required_one_and_no_strangers() -> None:
    request = build_request([Text("Name?", id="name"), Text("Nick?", id="nick", required=False)])
    assert check_answers(request, {"name": "Ada"}) == {"name": "Ada"}
    with pytest.raises(InvalidAnswer, match="'name': an answer is required"):
        check_answers(request, {"nick": "A"})
    with pytest.raises(InvalidAnswer, match="unknown ask id 'age'"):
        check_answers(request, {"name": "Ada", "age": 3})
    with pytest.raises(InvalidAnswer, match="answers by ask id"):
        check_answers(request, "Ada")


def test_an_approval_without_an_edit_refuses_edited_arguments_naming_them() -> None:
    # The gate's approval of a call whose arguments may not be edited asks only `approve`:
    # `{"approve": true, "arguments": ...}` is answers by ask id with one it does not ask,
    # not an object given as the confirm's value ("expected true or false").
    approval = build_request(Confirm("Allow ship?", id="approve"), kind="approval")
    with pytest.raises(InvalidAnswer, match=r"this approval offers no edit of the arguments .* answer 'approve' alone"):
        check_answers(approval, {"approve": True, "arguments": {"version": "9"}})
    assert check_answers(approval, {"approve": True}) == {"approve": True}
    assert check_answers(approval, "yes") == {"approve": True}
    form = build_request(Form("F", id="a", schema={"type": "object", "properties": {"b": {"type": "integer"}}}))
    assert check_answers(form, {"a": 1, "b": 2}) == {"a": {"a": 1, "b": 2}}  # a form's value is a mapping


def test_ids_are_unique_and_sort_in_creation_order() -> None:
    ids = [new_id() for _ in range(10_000)]
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    assert all(len(i) == 32 for i in ids)


def test_derived_keys_tell_apart_parts_that_only_spell_alike_and_always_fit_a_name() -> None:
    keys = {
        derived_key("approval", "run", "R1", "call_1"),
        derived_key("approval", "session", "run=R1", "call_1"),
        derived_key("approval", "session", "a:b", "c"),
        derived_key("approval", "session", "a", "b:c"),
        derived_key("approval", "session", None, "c"),
        derived_key("approval", "session", "None", "c"),
        derived_key("question", "run", "R1", "call_1"),
    }
    assert len(keys) == 7
    assert derived_key("approval", "run", "R1", "call_1") == derived_key("approval", "run", "R1", "call_1")
    long = derived_key("question", "r" * 256, "c" * 256)
    assert long.startswith("question:") and len(long) <= Limits().max_name_length


def test_a_derived_key_keeps_its_earlier_spelling_where_it_fits() -> None:
    assert derived_key("question", "R1", "call_1", spelled="question:run=R1:call_1") == "question:run=R1:call_1"
    too_long = "question:run=" + "r" * 250 + ":call_1"
    assert derived_key("question", "r" * 250, "call_1", spelled=too_long) == derived_key(
        "question", "r" * 250, "call_1"
    )


def test_creation_times_always_move_on_even_when_the_clock_stands_still_or_goes_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = time.time_ns()
    readings = iter([now, now, now, now - 5_000_000, now + 10_000])
    monkeypatch.setattr(time, "time_ns", lambda: next(readings))
    times = [creation_time() for _ in range(5)]
    assert [t - times[0] for t in times] == [timedelta(microseconds=us) for us in (0, 1, 2, 3, 10)]
    assert times[0].tzinfo is UTC


def test_a_request_survives_its_json_shape_unchanged() -> None:
    request = build_request(
        [
            Text("Name?", id="name", multiline=True, max_length=40),
            Confirm("Sure?", id="ok", required=False),
            Choice("One", ["a", {"id": "b", "label": "Bee", "description": "d"}], id="one", allow_other=True),
            MultiChoice("Some", ["a", "b"], id="some", min=1, max=2),
            Form("F", id="form", schema={"type": "object", "properties": {"n": {"type": "integer"}}}),
        ],
        kind="approval",
        title="T",
        details="**d**",
        context={"k": [1, 2]},
        to="alice",
        requester="agent",
        origin=Origin(
            session="s", channel="c", tool_name="deploy", arguments={"env": "prod"}, run="r", delegation=("root", "a")
        ),
        expires_at=datetime.now(UTC) + timedelta(minutes=5),
        idempotency_key="key",
    )
    assert request_from_dict(request_to_dict(request)) == request
    for ask in request.asks:
        assert ask_from_dict(ask_to_dict(ask)) == ask


def test_answers_said_explicitly_are_never_read_as_a_bare_value() -> None:
    from interlock.model import Answers

    form = build_request(Form("F", id="a", schema={"type": "object", "properties": {"a": {"type": "integer"}}}))
    assert check_answers(form, Answers(a={"a": 1})) == {"a": {"a": 1}}
    with pytest.raises(InvalidAnswer, match="unknown ask id 'b'"):
        check_answers(build_request(Text("Name?")), Answers(b="x"))


_JSONISH = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()  # NaN and the infinities included
    | st.text(alphabet=st.characters() | st.sampled_from("\x00\ud800\udfff"), max_size=6),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=3) | st.integers() | st.just("\x00") | st.just("\udfff"), inner, max_size=4)
    ),
    max_leaves=30,
)


def _storable(value: Any, depth: int = 1) -> bool:
    """What a store keeps as given, said plainly (the rule `check_json` enforces)."""
    if isinstance(value, str):
        return "\x00" not in value and not any("\ud800" <= c <= "\udfff" for c in value)
    if isinstance(value, float):
        return math.isfinite(value)
    if value is None or isinstance(value, bool | int):
        return True
    if depth > MAX_DEPTH:
        return False
    if isinstance(value, dict):
        return all(isinstance(k, str) and _storable(k) and _storable(v, depth + 1) for k, v in value.items())
    return all(_storable(item, depth + 1) for item in value)


@settings(max_examples=400, deadline=None)
@given(_JSONISH)
def test_check_json_refuses_exactly_what_a_store_cannot_keep_and_counts_the_bytes(value: Any) -> None:
    if _storable(value):
        expected = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())
        assert check_json(value, "state", 10**9) == expected
        if expected > 1:
            with pytest.raises(InvalidRequest, match="bytes of JSON"):
                check_json(value, "state", expected - 1)
    else:
        with pytest.raises(InvalidRequest, match=r"^state: "):
            check_json(value, "state", 10**9)


def test_check_json_refuses_nesting_deeper_than_the_limit() -> None:
    deep: Any = "leaf"
    for _ in range(MAX_DEPTH):
        deep = [deep]
    assert check_json(deep, "state", 10**6) == len(json.dumps(deep))
    with pytest.raises(InvalidRequest, match="nested more than"):
        check_json([deep], "state", 10**6)
    looped: list[Any] = []
    looped.append(looped)
    with pytest.raises(InvalidRequest, match="nested more than"):
        check_json(looped, "state", 10**6)


def test_evolve_copies_a_record_with_changes_as_replace_does_and_leaves_the_original() -> None:
    now = datetime.now(UTC)
    run = Run(id="r1", agent="mailer", created_at=now, updated_at=now, waiting_on=("q1",), state={"step": 1})
    ready = evolve(run, ready=True, worker="w1", attempts=2)
    assert ready == replace(run, ready=True, worker="w1", attempts=2)
    assert type(ready) is Run and (run.ready, run.worker, run.attempts) == (False, None, 0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ready.ready = False  # type: ignore[misc]  # as frozen as one built by its class
    with pytest.raises(AttributeError):
        evolve(run, colour="blue")
    request = Request(id="q1", kind="question", asks=(Text("Why?"),), created_at=now)
    assert evolve(request, to="alice") == replace(request, to="alice")
