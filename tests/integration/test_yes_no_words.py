"""One vocabulary of yes and no words, the same on every surface that takes a word for a confirm."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import replace
from pathlib import Path
from typing import Literal

import httpx
import pytest
from typer.testing import CliRunner

import interlock
from interlock import Choice, Confirm, Form
from interlock.agent import AutoResolveContract
from interlock.cli import app
from interlock.model import NO_WORDS, YES_WORDS, yes_no

YES = ["allow", "ok", "approve", "yes", "y", "true", "1", "Approved", " ACCEPT "]
NO = ["deny", "no", "n", "false", "reject", "0", "Denied", " Refuse "]
NEITHER = ["maybe", "", "yess", "on"]


def test_the_words_are_one_set_compared_ignoring_case_and_spaces() -> None:
    assert {w.strip().lower() for w in YES} <= YES_WORDS
    assert {w.strip().lower() for w in NO} <= NO_WORDS
    assert not YES_WORDS & NO_WORDS
    assert [yes_no(w) for w in YES] == [True] * len(YES)
    assert [yes_no(w) for w in NO] == [False] * len(NO)
    assert [yes_no(w) for w in NEITHER] == [None] * len(NEITHER)


async def _confirms(url: str, n: int, *, kind: Literal["question", "approval"] = "question") -> list[str]:
    async with interlock.connect(url) as broker:
        return [(await broker.create_detached(Confirm("Deploy?"), kind=kind)).id for _ in range(n)]


async def _answers(url: str, ids: list[str]) -> list[object]:
    """What each request's yes/no ask was answered: an approval's no is recorded as a
    denial (rejected), with the answer kept on its response."""
    async with interlock.connect(url) as broker:
        settled = [await broker.get(i) for i in ids]
        return [r.response.answers.get(r.asks[0].id) if r.response else None for r in settled]


def test_every_yes_and_no_word_answers_a_confirm_through_the_cli(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    words = YES + NO
    ids = asyncio.run(_confirms(url, len(words) + 1))
    runner = CliRunner()
    for request_id, word in zip(ids, words, strict=False):
        result = runner.invoke(app, ["answer", request_id, word, "--db", url])
        assert result.exit_code == 0, (word, result.output)
    assert asyncio.run(_answers(url, ids[: len(words)])) == [True] * len(YES) + [False] * len(NO)
    refused = runner.invoke(app, ["answer", ids[-1], "maybe", "--db", url])
    assert refused.exit_code != 0
    assert asyncio.run(_answers(url, ids[-1:])) == [None]


def test_every_yes_and_no_word_answers_a_confirm_and_an_approval_over_http(
    tmp_path: Path, serve: Callable[..., AbstractContextManager[str]]
) -> None:
    url = f"sqlite:///{tmp_path / 'api.db'}"
    words = YES + NO
    expected = [True] * len(YES) + [False] * len(NO)
    questions = asyncio.run(_confirms(url, len(words) + 1))
    approvals = asyncio.run(_confirms(url, len(words) + 1, kind="approval"))
    with serve(url, auth=False) as base, httpx.Client(base_url=f"{base}/api/v1", timeout=10) as api:
        for request_id, word in zip(questions, words, strict=False):
            body = {"inputResponses": [{"requestId": "confirm", "optionId": word}]}
            response = api.post(f"/requests/{request_id}/answer", json=body)
            assert response.status_code == 200, (word, response.text)
        for request_id, word in zip(approvals, words, strict=False):
            body = {"inputResponses": [{"requestId": request_id, "optionId": word}]}
            response = api.post(f"/requests/{request_id}/answer", json=body)
            assert response.status_code == 200, (word, response.text)
        for request_id, target in ((questions[-1], "confirm"), (approvals[-1], approvals[-1])):
            body = {"inputResponses": [{"requestId": target, "optionId": "maybe"}]}
            assert api.post(f"/requests/{request_id}/answer", json=body).status_code == 400
    assert asyncio.run(_answers(url, questions[: len(words)])) == expected
    assert asyncio.run(_answers(url, approvals[: len(words)])) == expected


@pytest.mark.anyio
async def test_the_python_api_takes_the_same_words_as_a_confirms_answer(broker: interlock.Broker) -> None:
    # On every store, and through a server: the words are the answer's, not one surface's.
    made = [await broker.create(Confirm("Deploy?", id="go")) for _ in range(len(YES) + len(NO) + 1)]
    for request, word in zip(made, YES + NO, strict=False):
        assert await broker.resolve(request.id, word), word
    assert [(await broker.get(r.id)).response.answers for r in made[:-1]] == [  # type: ignore[union-attr]
        {"go": True}
    ] * len(YES) + [{"go": False}] * len(NO)
    with pytest.raises(interlock.InvalidAnswer, match="answer yes or no"):
        await broker.resolve(made[-1].id, "maybe")
    assert (await broker.get(made[-1].id)).status is interlock.Status.PENDING


@pytest.mark.anyio
async def test_an_approval_with_optional_edits_is_decided_by_a_yes_or_no_alone(broker: interlock.Broker) -> None:
    """The gate's approval of a tool with an argument schema: the verdict and an optional
    form to edit the arguments. Its yes or no is given as for any approval, on every store
    and through a server; the edits may be left out."""
    edits = Form("Edit the arguments", schema={"type": "object", "properties": {"env": {"type": "string"}}})
    asks = [Confirm("Run deploy?", id="approve"), replace(edits, id="arguments", required=False)]
    yes, no, edited = [await broker.create(asks, kind="approval", to="alice") for _ in range(3)]
    assert await broker.resolve(yes.id, "ok", by="alice")
    assert await broker.resolve(no.id, False, by="alice")
    assert await broker.resolve(edited.id, {"approve": True, "arguments": {"env": "staging"}}, by="alice")
    settled = [await broker.get(r.id) for r in (yes, no, edited)]
    assert [r.status for r in settled] == [
        interlock.Status.ANSWERED,
        interlock.Status.REJECTED,
        interlock.Status.ANSWERED,
    ]
    assert [r.response.answers for r in settled if r.response] == [
        {"approve": True},
        {"approve": False},
        {"approve": True, "arguments": {"env": "staging"}},
    ]
    question = await broker.create(asks)  # not an approval: its asks are answered by id
    with pytest.raises(interlock.InvalidAnswer, match="expected an object of answers by ask id"):
        await broker.resolve(question.id, True)


def test_the_apis_own_answer_takes_the_same_words(
    tmp_path: Path, serve: Callable[..., AbstractContextManager[str]]
) -> None:
    url = f"sqlite:///{tmp_path / 'native.db'}"
    ids = asyncio.run(_confirms(url, 4))
    bodies = [{"answer": "ok"}, {"answers": {"confirm": " Allow "}}, {"answer": "deny"}, {"answer": "perhaps"}]
    with serve(url, auth=False) as base, httpx.Client(base_url=f"{base}/api/v1", timeout=10) as api:
        codes = [api.post(f"/requests/{i}/answer", json=body).status_code for i, body in zip(ids, bodies, strict=True)]
    assert codes == [200, 200, 200, 422]
    assert asyncio.run(_answers(url, ids)) == [True, True, False, None]


@pytest.mark.parametrize(("word", "verdict"), [("ok", True), ("allow", True), ("reject", False), ("0", False)])
def test_an_auto_resolve_decision_takes_the_same_words(word: str, verdict: bool) -> None:
    assert AutoResolveContract(decision=word).answer_for(_one_confirm()) == {"confirm": verdict}


def _one_confirm() -> interlock.Request:
    from interlock.model import build_request

    return build_request(Confirm("Deploy?"))


def test_show_says_how_to_answer_each_ask_of_a_pending_request(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'show.db'}"

    async def create() -> str:
        async with interlock.connect(url) as broker:
            asks = [Confirm("Deploy?", id="go"), Choice("Where?", ["eu", "us"], id="region", allow_other=True)]
            return (await broker.create_detached(asks)).id

    request_id = asyncio.run(create())
    result = CliRunner().invoke(app, ["show", request_id, "--db", url])
    assert result.exit_code == 0, result.output
    assert "go: yes or no" in result.stderr
    assert "region: one of eu, us, or your own text" in result.stderr


def test_following_shows_advice_answers_asks_whose_ids_hold_an_equals_sign(tmp_path: Path) -> None:
    from interlock import Text

    url = f"sqlite:///{tmp_path / 'advice.db'}"

    async def create() -> str:
        async with interlock.connect(url) as broker:
            asks = [Text("Key?", id="k=v"), Text("Also?", id="k"), Text("Note?", id="note", required=False)]
            return (await broker.create_detached(asks)).id

    request_id = asyncio.run(create())
    shown = CliRunner().invoke(app, ["show", request_id, "--db", url])
    assert "k=v=VALUE k=VALUE note=VALUE" in shown.stderr
    assert "note: text (optional)" in shown.stderr
    done = CliRunner().invoke(app, ["answer", request_id, "k=v=a=b", "k=c", "--db", url])
    assert done.exit_code == 0, done.output

    async def answers() -> dict[str, object]:
        async with interlock.connect(url) as broker:
            answered = await broker.get(request_id)
            assert answered.response is not None
            return dict(answered.response.answers)

    assert asyncio.run(answers()) == {"k=v": "a=b", "k": "c"}


def test_following_shows_advice_picks_options_whose_ids_hold_a_comma(tmp_path: Path) -> None:
    from interlock import MultiChoice

    url = f"sqlite:///{tmp_path / 'commas.db'}"

    async def create() -> list[str]:
        async with interlock.connect(url) as broker:
            made = [await broker.create_detached(MultiChoice("Which?", ["a,b", "c"]))]
            made.append(await broker.create_detached(MultiChoice("Which?", ["a", "b", "c"])))
            return [r.id for r in made]

    with_comma, plain = asyncio.run(create())
    shown = CliRunner().invoke(app, ["show", with_comma, "--db", url])
    assert "some of a,b, c, as separate words" in " ".join(shown.stderr.split())
    for request_id, words in ((with_comma, ["a,b", "c"]), (plain, ["a,c"])):
        done = CliRunner().invoke(app, ["answer", request_id, *words, "--db", url])
        assert done.exit_code == 0, done.output

    async def answers() -> list[object]:
        async with interlock.connect(url) as broker:
            return [(await broker.get(i)).answer for i in (with_comma, plain)]

    assert asyncio.run(answers()) == [["a,b", "c"], ["a", "c"]]


def test_a_single_ask_takes_its_answer_as_asks_do_when_several_asks_are_named(tmp_path: Path) -> None:
    """`interlock answer ID ok=yes`, as the grants guide writes answers, on a one-ask
    confirm; a text answer that happens to start with its id stays the text it is."""
    from interlock import Text

    url = f"sqlite:///{tmp_path / 'named.db'}"

    async def create() -> list[str]:
        async with interlock.connect(url) as broker:
            return [
                (await broker.create_detached(Confirm("Deploy?", id="ok"))).id,
                (await broker.create_detached(Text("Key?", id="key"))).id,
            ]

    confirm, text = asyncio.run(create())
    for request_id, words in ((confirm, ["ok=yes"]), (text, ["key=value"])):
        done = CliRunner().invoke(app, ["answer", request_id, *words, "--db", url])
        assert done.exit_code == 0, done.output
    assert asyncio.run(_answers(url, [confirm, text])) == [True, "key=value"]


def test_an_ask_answered_twice_on_one_command_line_is_refused_not_the_last_taken(tmp_path: Path) -> None:
    """`approve=no approve=yes` had approved: the last pair won, silently."""
    url = f"sqlite:///{tmp_path / 'twice.db'}"

    async def create() -> str:
        async with interlock.connect(url) as broker:
            asks = [Confirm("Deploy?", id="approve"), Choice("Where?", ["eu", "us"], id="region")]
            return (await broker.create_detached(asks)).id

    request_id = asyncio.run(create())
    twice = CliRunner().invoke(app, ["answer", request_id, "approve=no", "region=eu", "approve=yes", "--db", url])
    assert twice.exit_code == 4 and "approve is answered twice" in twice.stderr, twice.output
    assert asyncio.run(_answers(url, [request_id])) == [None]  # nothing stored
