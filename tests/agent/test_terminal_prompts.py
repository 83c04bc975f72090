"""What `interlock watch` (the terminal contract) shows and reads: several lines for a
multi-line text, a form field's allowed values, own words only where a choice takes them."""

from __future__ import annotations

import io

import pytest

from interlock import Broker, Choice, Form, Text
from interlock.agent import TerminalContract

from .support import bounded

pytestmark = pytest.mark.anyio


async def test_a_multiline_text_is_read_up_to_an_empty_line(broker: Broker) -> None:
    out = io.StringIO()
    contract = TerminalContract(io.StringIO("First line\n  indented second\n\nnot part of it\n"), out, by="alice")
    request = await broker.create(Text("Release notes?", multiline=True), to="alice")
    response = await bounded(contract.settle(broker, request))
    assert response.answers == {request.asks[0].id: "First line\n  indented second"}
    assert "an empty line ends the answer" in out.getvalue()


async def test_a_form_field_shows_its_allowed_values(broker: Broker) -> None:
    schema = {
        "type": "object",
        "properties": {
            "env": {"type": "string", "enum": ["staging", "prod"]},
            "replicas": {"type": "integer", "minimum": 1, "maximum": 5, "default": 2},
            "checks": {"type": "array", "items": {"enum": ["lint", "tests"]}},
        },
        "required": ["env"],
    }
    out = io.StringIO()
    contract = TerminalContract(io.StringIO('{"env": "prod", "replicas": 3}\n'), out, by="alice")
    request = await broker.create(Form("Deploy how?", schema=schema), to="alice")
    response = await bounded(contract.settle(broker, request))
    assert response.answers == {request.asks[0].id: {"env": "prod", "replicas": 3}}
    shown = out.getvalue()
    assert 'env (required): string; one of "staging", "prod"' in shown
    assert "replicas: integer; at least 1, at most 5, default 2" in shown
    assert 'checks: array; one of "lint", "tests"' in shown


async def test_a_choice_invites_an_answer_of_ones_own_only_where_it_takes_one(broker: Broker) -> None:
    # A closed choice invited "your own answer", then refused it.
    out = io.StringIO()
    contract = TerminalContract(io.StringIO("something else\n2\n"), out, by="alice")
    closed = await broker.create(Choice("Which region?", ["eu", "us"]), to="alice")
    response = await bounded(contract.settle(broker, closed))
    assert response.answers == {closed.asks[0].id: "us"}
    shown = out.getvalue()
    assert "(a number or a name) > " in shown and "your own answer" not in shown
    assert "'something else' is not one of the options" in shown

    out = io.StringIO()
    contract = TerminalContract(io.StringIO("mars\n"), out, by="alice")
    open_ = await broker.create(Choice("Which region?", ["eu", "us"], allow_other=True), to="alice")
    response = await bounded(contract.settle(broker, open_))
    assert response.answers == {open_.asks[0].id: "mars"}
    assert "(a number or a name, or your own answer) > " in out.getvalue()
