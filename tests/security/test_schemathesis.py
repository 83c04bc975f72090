"""Fuzzing the running server from its own /openapi.json, as a person and as an agent:
no server error, and every response as the document says (status code, content type,
headers and body).

Schemathesis generates the requests (valid ones and, as negative examples, invalid ones)
from the published schema; the examples are derandomized and bounded, so a run is the
same every time and stays short.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager

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
# As a person, each operation gets the coverage phase too (boundary values and invalid
# ones, systematically), except its calls with methods the path does not have: the app
# answers every such call alike (a 405 problem: tests/security/test_openapi_contract.py).
# As an agent, the generated calls only: most of a person's operations are refused to an
# agent before their body is read, so the boundaries would test one refusal many times.
# Each call sends a token of its own (a person's or an agent's), so the document is fuzzed
# without its security requirements: otherwise a call generated without Authorization, as
# a negative example, would go out with the token all the same and be answered 200 (the
# refusals of calls without a token are covered by the contract tests).
FUZZED = copy.deepcopy(DOCUMENT)
FUZZED["components"].pop("securitySchemes")
for _operations in FUZZED["paths"].values():
    for _operation in _operations.values():
        _operation.pop("security")
schema = schemathesis.openapi.from_dict(FUZZED).exclude(path=LONG_CALLS)
schema.config.phases.coverage.unexpected_methods = set()
agent_schema = schemathesis.openapi.from_dict(FUZZED).exclude(path=LONG_CALLS)
agent_schema.config.phases.coverage.enabled = False


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, serve: Callable[..., AbstractContextManager[str]]
) -> Iterator[tuple[str, dict[str, str]]]:
    """One real server with auth on for the whole run (starting one per generated call
    cost more than the calls), without the per-principal rate limit (its own tests cover
    it; here it would turn the later calls into 429s), and the tokens of a person and an agent."""
    db = f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'fuzz.db'}"
    tokens = anyio.run(issue_tokens, db)
    with serve(db, auth=True, rate_limit=None) as base:
        assert httpx.get(f"{base}/openapi.json", timeout=60).json() == DOCUMENT
        yield base, tokens


def headers(tokens: dict[str, str], name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {tokens[name]}"}


LONG_POLL_PARAMETERS = ("wait", "timeout")


def bounded(case: schemathesis.Case) -> schemathesis.Case:
    """The case with a long poll it asks for held at most 0.2 s (the server holds a valid
    one for as long as asked, up to 300 s; an invalid value is left as generated)."""
    for name in LONG_POLL_PARAMETERS:
        value = (case.query or {}).get(name)
        if isinstance(value, int | float) and not isinstance(value, bool) and 0.2 < value <= 300:
            case.query[name] = 0.2
    return case


SETTINGS = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)


@schema.parametrize()
@SETTINGS
def test_the_server_answers_a_person_s_every_generated_call_as_its_openapi_document_says(
    case: schemathesis.Case, server: tuple[str, dict[str, str]]
) -> None:
    base, tokens = server
    bounded(case).call_and_validate(base_url=base, headers=headers(tokens, "alice"), checks=CHECKS, timeout=10)


@agent_schema.parametrize()
@SETTINGS
def test_the_server_answers_an_agent_s_every_generated_call_as_its_openapi_document_says(
    case: schemathesis.Case, server: tuple[str, dict[str, str]]
) -> None:
    base, tokens = server
    bounded(case).call_and_validate(base_url=base, headers=headers(tokens, "alice-bot"), checks=CHECKS, timeout=10)
