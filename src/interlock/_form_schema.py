"""Checking forms against their JSON Schema (draft 2020-12), loaded only once a form is made or
read: jsonschema and its format checkers take about a third of `import interlock`.

Patterns run on RE2 (linear in the text), `uniqueItems` in linear time, and every keyword
keeps to the thread's time budget (`model.time_budget`)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import re2  # type: ignore[import-untyped]  # google-re2 ships no type information
from jsonschema import Draft202012Validator, FormatChecker, ValidationError, validators
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from .errors import InvalidAnswer, InvalidRequest
from .model import MAX_DEPTH, _BadPattern, _budget, _over_budget, _Overrun, _regex, _search


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for key, value in instance.items():
            if _search(pattern, key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, extra: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    extras = [k for k in instance if k not in properties and not any(_search(p, k) for p in patterns)]
    if validator.is_type(extra, "object"):
        for key in extras:
            yield from validator.descend(instance[key], extra, path=key)
    elif not extra and extras:
        listed = ", ".join(repr(k) for k in sorted(extras))
        if patterns:
            verb = "does" if len(extras) == 1 else "do"
            regexes = ", ".join(repr(p) for p in sorted(patterns))
            yield ValidationError(f"{listed} {verb} not match any of the regexes: {regexes}")
        else:
            verb = "was" if len(extras) == 1 else "were"
            yield ValidationError(f"Additional properties are not allowed ({listed} {verb} unexpected)")


def _unique_items(validator: Any, unique: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    """In linear time (jsonschema's own comparison is quadratic for objects and arrays)."""
    if not unique or not validator.is_type(instance, "array"):
        return
    seen: set[Any] = set()
    for item in instance:
        key = _comparable(item)
        if key in seen:
            yield ValidationError(f"{instance!r} has non-unique elements")
            return
        seen.add(key)


def _comparable(value: Any) -> Any:
    """A hashable stand-in, equal for JSON-equal values (1 and 1.0 alike, true and 1 not)."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return ("number", value)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, Mapping):
        return ("object", frozenset((k, _comparable(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return ("array", tuple(_comparable(v) for v in value))
    return ("null", None)


def _budgeted(keyword: Callable[..., Any]) -> Callable[..., Any]:
    def check(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        if _over_budget():
            raise _Overrun
        return keyword(validator, value, instance, schema)

    return check


_KEYWORDS = dict(
    Draft202012Validator.VALIDATORS,
    pattern=_pattern,
    patternProperties=_pattern_properties,
    additionalProperties=_additional_properties,
    uniqueItems=_unique_items,
)
_FormValidator: Any = validators.extend(  # type: ignore[no-untyped-call]  # the stubs leave extend untyped
    Draft202012Validator, {name: _budgeted(fn) for name, fn in _KEYWORDS.items()}
)
"""Draft 2020-12 with RE2 for `pattern` and `patternProperties`, linear `uniqueItems`, and
every keyword checking the thread's time budget."""


def _is_re2_regex(instance: object) -> bool:
    if isinstance(instance, str):
        _regex(instance)
    return True


_SCHEMA_FORMATS = FormatChecker()
_SCHEMA_FORMATS.checks("regex", raises=re2.error)(_is_re2_regex)
"""The meta-schema's formats, with "regex" meaning what RE2 can compile."""

_URI_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:\S*")


def _is_uri(instance: object) -> bool:
    return not isinstance(instance, str) or _URI_SCHEME.fullmatch(instance) is not None


_ANSWER_FORMATS = FormatChecker(formats=())
_ANSWER_FORMATS.checkers = dict(Draft202012Validator.FORMAT_CHECKER.checkers)  # each as draft 2020-12 means it
_ANSWER_FORMATS.checks("regex", raises=re2.error)(_is_re2_regex)
_ANSWER_FORMATS.checks("uri")(_is_uri)
"""The formats an answer is held to, from every surface (the web form's inputs hold email,
uri and date themselves): each as draft 2020-12 means it (`time` as RFC 3339's, with its
offset), "regex" what RE2 compiles, "uri" an absolute URI (a scheme, then no white space)."""

_NOT_SCHEMAS = frozenset({"const", "enum", "default", "examples"})
"""Keywords whose values are data, not subschemas: not searched for `$ref`s."""


def _check_schema_structure(ask_id: str, schema: Mapping[str, Any]) -> None:
    """Refuse what would make every answer fail or the checks run away: `$ref`s that are
    remote, lead nowhere or back to themselves, nesting past `MAX_DEPTH` (with `$ref`s
    followed), patterns RE2 cannot run, and `unevaluatedProperties` beside
    `patternProperties` (its check would run those patterns with a backtracking engine)."""
    resolver = Registry().resolver_with_root(DRAFT202012.create_resource(schema))
    depth_below: dict[int, int] = {}
    keywords: set[str] = set()

    def refused(message: str) -> InvalidRequest:
        return InvalidRequest(f"ask {ask_id!r}: invalid form schema: {message}")

    def visit(node: Any, where: str, on_path: set[int]) -> int:
        if not isinstance(node, Mapping | list):
            return 0
        known = depth_below.get(id(node))
        if known is not None:
            return known
        on_path.add(id(node))
        deepest = 0
        items = node.items() if isinstance(node, Mapping) else enumerate(node)
        for key, value in items:
            at = f"{where}/{key}"
            if isinstance(node, Mapping):
                if key in _NOT_SCHEMAS:
                    continue
                keywords.add(str(key))
                if key in ("$dynamicRef", "$recursiveRef"):
                    raise refused(f"{key} at {at!r} is not supported in forms")
                if key == "$id" and where:
                    raise refused(f"$id is allowed only at the root of a form schema, not at {at!r}")
                if key == "pattern" and isinstance(value, str):
                    _check_pattern(value, at)
                if key == "patternProperties" and isinstance(value, Mapping):
                    for pattern in value:
                        _check_pattern(str(pattern), at)
                if key == "$ref" and isinstance(value, str):
                    target = _target(value, at)
                    if id(target) in on_path:
                        raise refused(f"the $ref {value!r} at {at!r} leads back to itself (recursion is not supported)")
                    deepest = max(deepest, 1 + visit(target, value[1:], on_path))
                    continue
            deepest = max(deepest, 1 + visit(value, at, on_path))
        on_path.discard(id(node))
        depth_below[id(node)] = deepest
        if deepest >= MAX_DEPTH:
            raise refused(f"nested more than {MAX_DEPTH} levels deep (with its $refs followed)")
        return deepest

    def _check_pattern(pattern: str, at: str) -> None:
        try:
            _regex(pattern)
        except re2.error as exc:
            reason = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) else str(exc)
            raise refused(f"the pattern {pattern!r} at {at!r} is not supported ({reason})") from None

    def _target(ref: str, at: str) -> Any:
        if not ref.startswith("#"):
            raise refused(f"the $ref {ref!r} at {at!r} is not local: only references inside the schema (#...) are")
        try:
            return resolver.lookup(ref).contents
        except Unresolvable:
            raise refused(f"the $ref {ref!r} at {at!r} points to nothing in the schema") from None

    visit(schema, "", set())
    if "unevaluatedProperties" in keywords and "patternProperties" in keywords:
        raise refused("unevaluatedProperties cannot be combined with patternProperties in a form")


def form_validator(schema: Mapping[str, Any]) -> Any:
    """The validator of a form's `schema`, as stored (checked when it was made)."""
    # An empty registry: nothing outside the schema is ever looked up (or fetched).
    return _FormValidator(schema, registry=Registry(), format_checker=_ANSWER_FORMATS)


def checked_validator(ask_id: str, schema: Mapping[str, Any]) -> Any:
    """The validator of a new form's `schema`, once the schema is checked (`InvalidRequest`
    says what is wrong with it)."""
    _check_schema_structure(ask_id, schema)
    meta = _FormValidator(Draft202012Validator.META_SCHEMA, format_checker=_SCHEMA_FORMATS)
    try:
        error = next(meta.iter_errors(schema), None)
    except _Overrun:
        raise InvalidRequest(
            f"ask {ask_id!r}: checking the form schema took longer than {_budget.seconds:g} s; make it simpler"
        ) from None
    if error is not None:
        raise InvalidRequest(f"ask {ask_id!r}: invalid form schema: {error.message}")
    return form_validator(schema)


def errors(ask_id: str, validator: Any, value: object) -> list[ValidationError]:
    """What is wrong with `value`, shallowest first (`InvalidAnswer` when it cannot be told)."""
    try:
        return sorted(validator.iter_errors(value), key=lambda e: list(e.path))
    except _Overrun:
        raise InvalidAnswer(
            f"ask {ask_id!r}: checking the answer took longer than {_budget.seconds:g} s", ask_id=ask_id
        ) from None
    except _BadPattern as exc:
        raise InvalidAnswer(
            f"ask {ask_id!r}: the form's pattern {exc.args[0]!r} cannot be checked", ask_id=ask_id
        ) from None
    except Unresolvable as exc:
        raise InvalidAnswer(f"ask {ask_id!r}: the form schema cannot be used: {exc}", ask_id=ask_id) from None
