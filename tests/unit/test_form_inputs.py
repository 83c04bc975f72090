"""Reading a form ask's posted fields (the web inbox's form without script): what cannot be
read is the person's fault, named beside its field, never a server error."""

from __future__ import annotations

import pytest

from interlock import Form
from interlock._form_inputs import FieldFault, form_fields, input_type, read_form
from interlock.errors import InvalidAnswer

SCHEMA = {"type": "object", "properties": {"steps": {"type": "array", "title": "Steps"}}}


class Posted:
    def __init__(self, **values: str) -> None:
        self.values = values

    def get(self, name: str, default: str = "") -> str:
        return self.values.get(name, default)

    def all(self, name: str) -> list[str]:
        return [self.values[name]] if name in self.values else []

    def has(self, name: str) -> bool:
        return name in self.values


@pytest.mark.parametrize(
    "text", ["[" * 100_000 + "]" * 100_000, "[" + "9" * 5000 + "]"], ids=["nested too deep", "a number too long"]
)
def test_json_that_cannot_be_read_is_the_field_s_fault(text: str) -> None:
    ask = Form("Which steps?", schema=SCHEMA, id="plan")
    with pytest.raises(FieldFault, match="cannot be read here"):
        read_form(ask, "a0", Posted(**{"a0.p0": text}))
    assert read_form(ask, "a0", Posted(**{"a0.p0": '["build", "ship"]'})) == {"steps": ["build", "ship"]}


def test_a_fault_within_a_field_of_json_says_where_in_it() -> None:
    # "'abc' does not match '^[0-9]{5}$'" named neither the address nor its zip.
    schema = {
        "type": "object",
        "properties": {
            "addr": {
                "type": "object",
                "title": "Address",
                "properties": {"zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
            }
        },
    }
    ask = Form("Where to?", schema=schema, id="ship")
    with pytest.raises(FieldFault) as refused:
        read_form(ask, "a0", Posted(**{"a0.p0": '{"zip": "abc"}'}))
    assert refused.value.fault == "zip: 'abc' does not match '^[0-9]{5}$'"
    assert refused.value.field == "a0.p0" and "Address: zip: " in str(refused.value)


def test_a_form_without_fields_takes_its_json_whole_and_says_what_cannot_be_read() -> None:
    ask = Form("Anything?", schema={"type": "object"}, id="free")
    with pytest.raises(InvalidAnswer, match="ask 'free': the answer is JSON that cannot be read here"):
        read_form(ask, "a0", Posted(**{"a0.json": "[" * 100_000}))


TYPED = {
    "type": "object",
    "properties": {
        "to": {"type": "string", "format": "email"},
        "site": {"type": "string", "format": "uri"},
        "on": {"type": "string", "format": "date"},
        "note": {"type": "string"},
        "count": {"type": "integer"},
    },
}


@pytest.mark.parametrize(
    ("key", "value", "shown_as"),
    [
        ("to", "a@example.com", "email"),
        ("to", " a@example.com", "text"),  # an email input drops the blank
        ("to", "not an address", "text"),  # and would hold the whole form back
        ("site", "https://example.com/x", "url"),
        ("site", "https://example.com/x ", "text"),
        ("on", "2024-02-29", "date"),
        ("on", "2023-02-29", "text"),  # a date input empties a date that is none
        ("on", "tomorrow", "text"),
        ("note", "one line", "text"),
        ("note", "two\nlines", "textarea"),  # an input drops line breaks
        ("to", "a@example.com\r", "textarea"),
        ("count", "3", "number"),
        ("on", "", "date"),
    ],
)
def test_an_input_shows_a_prefilled_value_in_a_type_that_posts_it_back_as_it_is(
    key: str, value: str, shown_as: str
) -> None:
    fields = form_fields(Form("Edit", schema=TYPED, id="arguments"), "a1") or ()
    (f,) = [f for f in fields if f.key == key]
    assert input_type(f, value) == shown_as
