"""Fuzzing the running server from its own /openapi.json, as a person and as an agent:
no server error, and every response as the document says (status code, content type,
headers and body).

Schemathesis generates the requests (valid ones and, as negative examples, invalid ones)
from the published schema; the examples are derandomized and bounded, so a run is the
same every time and stays short.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import anyio
import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from limits_support import issue_tokens
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from interlock.server.app import create_app

EXAMPLES = 25  # a bound per operation and caller, so the whole run takes seconds

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
]


# The document is the app's own (built here, at collection, to make one test per
# operation); the test checks that the running server publishes the same one.
DOCUMENT = create_app("memory://", auth=True).openapi()
# The live stream never ends, so it cannot be fuzzed call by call; its refusals are
# covered by the quota and contract tests. The same goes for a run's stream, and for the
# workers' claim, a long poll that holds the call for its `wait` (tests/integration/test_runs.py
# and test_server_runs.py cover their refusals).
LONG_CALLS = [
    "/api/v1/events/stream",
    "/api/v1/runs/{run_id}/events/stream",
    "/api/v1/runs/claim",
    "/api/v1/interactions/stream",
]
schema = schemathesis.openapi.from_dict(DOCUMENT).exclude(path=LONG_CALLS)


@pytest.fixture(params=["person", "agent"])
def caller(
    request: pytest.FixtureRequest, tmp_path: Path, serve: Callable[..., AbstractContextManager[str]]
) -> Iterator[tuple[str, dict[str, str]]]:
    """A real server with auth on, and the headers of a person or an agent on it."""
    db = f"sqlite:///{tmp_path / 'fuzz.db'}"
    tokens = anyio.run(issue_tokens, db)
    name = "alice" if request.param == "person" else "alice-bot"
    with serve(db, auth=True) as base:
        assert httpx.get(f"{base}/openapi.json", timeout=10).json() == DOCUMENT
        yield base, {"Authorization": f"Bearer {tokens[name]}"}


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
def test_the_server_answers_every_generated_call_as_its_openapi_document_says(
    case: schemathesis.Case, caller: tuple[str, dict[str, str]]
) -> None:
    base, headers = caller
    case.call_and_validate(base_url=base, headers=headers, checks=CHECKS, timeout=10)
