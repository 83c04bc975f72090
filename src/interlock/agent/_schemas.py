"""Checking a tool's arguments against its JSON Schema."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # loaded by the first tool with a schema: jsonschema is a third of `import interlock`
    from jsonschema import Draft202012Validator


def make_validator(name: str, schema: Mapping[str, Any]) -> Draft202012Validator:
    """A validator for tool `name`'s `schema`; `ValueError` if the schema itself is invalid."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise ValueError(f"tool {name!r}: invalid JSON Schema: {exc.message}") from None
    return Draft202012Validator(schema)


def schema_problem(validator: Draft202012Validator, arguments: Any) -> str | None:
    """What is wrong with `arguments` (the first error, by path), or None when they fit."""
    if not isinstance(arguments, Mapping):
        return "the arguments must be an object"
    error = next(iter(sorted(validator.iter_errors(arguments), key=lambda e: list(e.path))), None)
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path)
    return f"{error.message} at {where!r}" if where else error.message
