"""Each shape is defined once and the others are derived from it."""

from __future__ import annotations

import dataclasses

import pytest

import interlock
from interlock import Confirm, Origin
from interlock.model import ask_from_dict
from interlock.server.schemas import OriginModel

pytestmark = pytest.mark.anyio


def test_the_api_origin_takes_exactly_the_fields_of_origin() -> None:
    assert list(OriginModel.model_fields) == [f.name for f in dataclasses.fields(Origin)]
    body = {f.name: None for f in dataclasses.fields(Origin)}
    assert OriginModel.model_validate(body).model_dump() == body


async def test_create_takes_every_origin_field_one_by_one() -> None:
    given = {
        f.name: (["root", "child"] if f.name == "delegation" else {"a": 1} if f.name == "arguments" else f.name)
        for f in dataclasses.fields(Origin)
    }
    async with interlock.connect("memory://") as broker:
        request = await broker.create_detached(Confirm("Deploy?"), **given)  # type: ignore[arg-type]
    assert request.origin == Origin(**{**given, "delegation": ("root", "child")})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "data",
    [
        {"type": "text", "id": "t", "prompt": "Why?", "required": True, "multiline": True, "max_length": 9},
        {"type": "confirm", "id": "c", "prompt": "Go?", "required": False},
        {
            "type": "choice",
            "id": "ch",
            "prompt": "Which?",
            "required": True,
            "options": [{"id": "a", "label": "A", "description": "first"}],
            "allow_other": True,
        },
        {
            "type": "multi_choice",
            "id": "m",
            "prompt": "Which?",
            "required": True,
            "options": [{"id": "a", "label": "a", "description": ""}],
            "min": 1,
            "max": None,
        },
        {"type": "form", "id": "f", "prompt": "Fill", "required": True, "schema": {"type": "object"}},
    ],
)
def test_each_ask_kind_reads_back_its_own_json_shape(data: dict[str, object]) -> None:
    assert ask_from_dict(data).to_dict() == data
