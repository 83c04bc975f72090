"""A store's options, read from the query of its URL by the store module that knows them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl, urlsplit

__all__ = ["UnknownOption", "url_options"]


class UnknownOption(ValueError):
    """An option the store of the URL's scheme does not take (`connect` adds the broker's)."""


def url_options(
    url: str, types: Mapping[str, Callable[[str], Any]], given: Mapping[str, Any], *, rest: bool = False
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The options named in `types` from the query of `url`, each converted by its type,
    with `given` (keyword options, already typed) on top.

    A query option not in `types` is refused, unless `rest` keeps it (in order) for the
    driver; so is a keyword option not in `types`. A value that does not convert is
    refused with its name.
    """
    ours: dict[str, Any] = {}
    others: list[tuple[str, str]] = []
    for name, value in parse_qsl(urlsplit(url).query, keep_blank_values=True):
        convert = types.get(name)
        if convert is None:
            if not rest:
                raise UnknownOption(f"unknown store option {name!r}: use {', '.join(sorted(types)) or 'none'}")
            others.append((name, value))
            continue
        try:
            ours[name] = convert(value)
        except ValueError:
            kind = "a number" if convert in (int, float) else "valid"
            raise ValueError(f"the store option {name}={value!r} is not {kind}") from None
    unknown = sorted(set(given) - set(types))
    if unknown:
        raise UnknownOption(f"unknown store option(s) {', '.join(unknown)}: use {', '.join(sorted(types)) or 'none'}")
    ours.update({name: value for name, value in given.items() if value is not None})
    return ours, others
