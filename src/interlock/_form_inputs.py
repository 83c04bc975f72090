"""A form ask's inputs, generated from its JSON Schema, and reading an answer back from them.

Pure: it describes the inputs (a label, a hint, a kind, bounds) for any surface that shows
a form field by field (the web inbox's templates render them), and turns the posted
strings back into the JSON value the form's schema checks.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date
from typing import Any, Literal, Protocol

from .errors import InvalidAnswer

__all__ = [
    "Field",
    "FieldFault",
    "FieldValues",
    "FormLike",
    "form_fields",
    "form_unchanged",
    "form_untouched",
    "form_values",
    "input_type",
    "place_in",
    "read_form",
]


class FieldValues(Protocol):
    """The posted fields of a form: the last value of a name, all of them, and whether it was sent."""

    def get(self, name: str, default: str = "") -> str: ...

    def all(self, name: str) -> list[str]: ...

    def has(self, name: str) -> bool: ...


class FormLike(Protocol):
    """What reading a form needs of a form ask."""

    @property
    def id(self) -> str: ...

    @property
    def schema(self) -> Mapping[str, Any]: ...

    def errors(self, value: object) -> Iterable[Any]: ...


@dataclass(frozen=True, slots=True)
class Field:
    """One input of a form ask, generated from a property of its JSON Schema."""

    name: str
    key: str
    label: str
    hint: str
    kind: Literal["string", "number", "integer", "boolean", "enum", "json"]
    required: bool
    input_type: str = "text"
    attrs: Mapping[str, str] = field(default_factory=dict)
    enum: tuple[Any, ...] = ()
    default: str = ""

    @property
    def choices(self) -> list[tuple[str, str]]:
        return [(str(i), v if isinstance(v, str) else json.dumps(v)) for i, v in enumerate(self.enum)]


_FORMATS = {"email": "email", "uri": "url", "date": "date"}


def form_fields(ask: FormLike, name: str) -> tuple[Field, ...] | None:
    """The inputs for a form ask, or None to take the whole answer as JSON instead."""
    properties = ask.schema.get("properties")
    if not isinstance(properties, Mapping) or not properties:
        return None
    required = set(ask.schema.get("required") or ())
    return tuple(
        _field(f"{name}.p{j}", str(key), prop if isinstance(prop, Mapping) else {}, key in required)
        for j, (key, prop) in enumerate(properties.items())
    )


def _field(name: str, key: str, prop: Mapping[str, Any], required: bool) -> Field:
    label = str(prop.get("title") or key)
    hint = str(prop.get("description") or "")
    default = prop.get("default")
    enum = prop.get("enum")
    kind = prop.get("type")
    if isinstance(enum, list) and enum:
        chosen = next((str(i) for i, v in enumerate(enum) if v == default and type(v) is type(default)), "")
        return Field(name, key, label, hint, "enum", required, enum=tuple(enum), default=chosen)
    if kind == "boolean":
        return Field(name, key, label, hint, "boolean", False, input_type="checkbox", default="on" * (default is True))
    if kind in ("number", "integer"):
        bounds = (("minimum", "min"), ("maximum", "max"))
        attrs = {dst: _number(prop[src]) for src, dst in bounds if _is_number(prop.get(src))}
        step = prop.get("multipleOf")
        attrs["step"] = _number(step) if _is_number(step) else ("1" if kind == "integer" else "any")
        shown = _number(default) if _is_number(default) else ""
        return Field(name, key, label, hint, kind, required, input_type="number", attrs=attrs, default=shown)
    if kind == "string":
        lengths = (("minLength", "minlength"), ("maxLength", "maxlength"))
        attrs = {dst: str(prop[src]) for src, dst in lengths if isinstance(prop.get(src), int)}
        input_type = _FORMATS.get(str(prop.get("format")), "text")
        shown = default if isinstance(default, str) else ""
        return Field(name, key, label, hint, "string", required, input_type=input_type, attrs=attrs, default=shown)
    shown = json.dumps(default, indent=2) if "default" in prop else ""
    return Field(name, key, label, " ".join(filter(None, (hint, _json_hint(prop)))), "json", required, default=shown)


def _json_hint(prop: Mapping[str, Any]) -> str:
    """What an input taken as JSON wants, so that it can be typed without the schema: the
    keys of an object (its required ones said so), or what a list holds."""
    kind, properties, items = prop.get("type"), prop.get("properties"), prop.get("items")
    if kind == "object" and isinstance(properties, Mapping) and properties:
        required = set(prop.get("required") or ())
        keys = ", ".join(f'"{k}"' + (" (required)" if k in required else "") for k in properties)
        return f"As JSON: an object with {keys}."
    if kind == "array" and isinstance(items, Mapping) and isinstance(items.get("type"), str):
        return f"As JSON: a list of {items['type']}s."
    if kind == "array":
        return "As JSON: a list."
    return "As JSON."


def form_values(ask: FormLike, name: str, value: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The fields a browser posts for `value` in the inputs of a form ask: what prefills them."""
    fields = form_fields(ask, name)
    if fields is None:
        return [(f"{name}.json", json.dumps(dict(value), indent=2, ensure_ascii=False))]
    out: list[tuple[str, str]] = []
    for f in fields:
        if f.key not in value:
            continue
        given = value[f.key]
        if f.kind == "boolean":
            if given is True:
                out.append((f.name, "on"))
        elif f.kind == "enum":
            index = next((i for i, v in enumerate(f.enum) if v == given and type(v) is type(given)), None)
            if index is not None:
                out.append((f.name, str(index)))
        elif f.kind == "string" and isinstance(given, str):
            out.append((f.name, given))
        elif f.kind in ("number", "integer") and _is_number(given):
            out.append((f.name, _number(given)))
        else:
            out.append((f.name, json.dumps(given, indent=2, ensure_ascii=False)))
    return out


def form_unchanged(ask: FormLike, name: str, values: FieldValues, original: FieldValues) -> bool:
    """Whether the posted inputs of a form ask still hold what `original` prefilled them with.

    Line breaks compare alike whatever their form: a browser posts each one of a textarea
    as CR LF, so a value prefilled with LF comes back changed by the browser, not the person."""
    fields = form_fields(ask, name)
    if fields is None:
        return _lines(values.get(f"{name}.json")).strip() == _lines(original.get(f"{name}.json")).strip()
    return all(form_unchanged_field(f, values, original) for f in fields)


def form_untouched(fields: Iterable[Field], values: FieldValues, original: FieldValues) -> list[str]:
    """The keys of the inputs (a form ask's `inputs`) still holding what `original`
    prefilled them with (compared as `form_unchanged` does): an edit of the others keeps
    their values as they were, not as a browser posted them back."""
    return [f.key for f in fields if form_unchanged_field(f, values, original)]


def form_unchanged_field(f: Field, values: FieldValues, original: FieldValues) -> bool:
    """Whether one input still holds what `original` prefilled it with."""
    if f.kind == "boolean":
        return values.has(f.name) == original.has(f.name)
    if f.kind == "string":
        return _lines(values.get(f.name)) == _lines(original.get(f.name))
    return _lines(values.get(f.name)).strip() == _lines(original.get(f.name)).strip()


def _lines(text: str) -> str:
    """`text` with each line break (CR LF, CR) as LF."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


_EMAIL = re.compile(
    r"[a-zA-Z0-9.!#$%&'*+/=?^_`{|}~-]+@[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?"
    r"(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*"
)
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:\S*")


def input_type(f: Field, value: str) -> str:
    """How a string input shows `value`: `textarea` for one holding a line break, else its
    own type if a browser keeps `value` in it as it is, else `text`.

    A browser strips the line breaks out of an input's value, the blanks around an email
    or URL input's, and empties a date input whose value is not a date: what it would post
    back then differs from what was prefilled (an approval's arguments under review) by
    what the person never saw nor changed."""
    if "\n" in value or "\r" in value:
        return "textarea"
    kept = {"email": _EMAIL, "date": _DATE, "url": _URL}.get(f.input_type)
    if not value or kept is None or (kept.fullmatch(value) and (f.input_type != "date" or _is_date(value))):
        return f.input_type
    return "text"


def _is_date(value: str) -> bool:
    try:
        date.fromisoformat(value)
    except ValueError:
        return False
    return True


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _number(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


class FieldFault(InvalidAnswer):
    """A form answer refused because of one of its inputs: `field` is the input's name."""

    def __init__(self, ask: FormLike, f: Field, fault: str) -> None:
        super().__init__(f"ask {ask.id!r}: {f.label}: {fault}", ask_id=ask.id)
        self.field = f.name
        self.fault = fault


def read_form(ask: FormLike, name: str, values: FieldValues) -> dict[str, Any] | None:
    fields = form_fields(ask, name)
    if fields is None:
        text = values.get(f"{name}.json").strip()
        return None if not text else _json(ask, None, text)
    out: dict[str, Any] = {}
    for f in fields:
        raw = values.get(f.name)
        if f.kind == "boolean":
            out[f.key] = values.has(f.name)
        elif (raw if f.kind == "string" else raw.strip()) == "":
            if f.required:
                raise FieldFault(ask, f, "an answer is required")
        else:
            out[f.key] = _coerce(ask, f, raw)
    # The broker checks the whole answer again; this finds the input a fault belongs to.
    by_key = {f.key: f for f in fields}
    for error in ask.errors(out):
        key = error.path[0] if error.path else None
        if error.validator == "required" and not error.path:
            required = error.validator_value if isinstance(error.validator_value, list) else []
            key = next((k for k in required if k not in out), None)
        if key in by_key:
            # Within a field of JSON (an object, a list), say where: "zip: 'abc' does not match".
            inner = ".".join(str(step) for step in list(error.path)[1:])
            raise FieldFault(ask, by_key[str(key)], f"{inner}: {error.message}" if inner else error.message)
        break
    return out


def place_in(text: str, count: int) -> int | None:
    """The place among `count` items (from 0) that a posted `text` names, as a form's
    select or checkbox posts it: ASCII digits below `count`; None for any other text
    (`str.isdigit` takes `²`, and digits past the length `int` reads, which `int` refuses)."""
    digits = text.lstrip("0") or "0"  # leading zeros change nothing, nor count towards int()'s digit limit
    if not (text.isascii() and text.isdigit()) or len(digits) > len(str(count)):
        return None
    place = int(digits)
    return place if place < count else None


def _coerce(ask: FormLike, f: Field, raw: str) -> Any:
    text = raw.strip()
    fault = FieldFault(ask, f, f"{raw!r} is not a valid {f.kind}")
    if f.kind == "string":
        return _lines(raw)  # a textarea posts its line breaks as CR LF
    if f.kind == "json":
        return _json(ask, f, text)
    if f.kind == "enum":
        place = place_in(text, len(f.enum))
        if place is None:
            raise fault
        return f.enum[place]
    try:
        return int(text)
    except ValueError:
        if f.kind == "integer":
            raise FieldFault(ask, f, f"{raw!r} is not a whole number") from None
    try:
        number = float(text)
    except ValueError:
        raise fault from None
    if not math.isfinite(number):
        raise fault
    return number


def _json(ask: FormLike, f: Field | None, text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        fault = f"not valid JSON ({exc.msg}, line {exc.lineno} column {exc.colno})"
    except (ValueError, RecursionError):  # a number of too many digits; arrays nested too deep
        fault = "JSON that cannot be read here (nested too deep, or a number too long)"
    if f is not None:
        raise FieldFault(ask, f, fault) from None
    raise InvalidAnswer(f"ask {ask.id!r}: the answer is {fault}", ask_id=ask.id) from None
