"""Load the SQL of a dialect: named queries and versioned migrations, kept in .sql files."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from importlib import resources

from ..model import Request, Status, request_from_dict, response_from_dict

__all__ = ["FILTERS", "Migration", "encode_json", "load_migrations", "load_queries", "request_from_row"]

FILTERS = ("recipient", "requester", "status", "kind", "session", "channel", "agent", "run")
"""The `Query` filters that are columns of the requests table, in every dialect."""

encode_json = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)
_MIGRATION = re.compile(r"^(\d{4})_(\w+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def load_queries(dialect: str) -> dict[str, str]:
    """The `-- name: x` sections of `sql/<dialect>/queries.sql`, by name."""
    text = resources.files(__package__).joinpath("sql", dialect, "queries.sql").read_text("utf-8")
    parts = _NAME.split(text)
    return {name: body.strip().rstrip(";") for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def load_migrations(dialect: str) -> list[Migration]:
    """The files `sql/<dialect>/migrations/NNNN_name.sql`, in version order."""
    folder = resources.files(__package__).joinpath("sql", dialect, "migrations")
    found = []
    for entry in folder.iterdir():
        match = _MIGRATION.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise RuntimeError(f"{dialect} migrations are not numbered 1..n: {[m.version for m in found]}")
    return found


def request_from_row(status: str, doc: str, response: str | None) -> Request:
    """A request from its row: the document as created, then how it settled."""
    request = request_from_dict(json.loads(doc))
    if status == Status.PENDING:
        return request
    return request.settle(Status(status), response_from_dict(json.loads(response)) if response else None)
