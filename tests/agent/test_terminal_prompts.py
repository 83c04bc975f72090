"""What `interlock watch` (the terminal contract) shows and reads: several lines for a
multi-line text, a form field's allowed values."""

from __future__ import annotations

import io

import pytest

from interlock import Broker, Form, Text
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
