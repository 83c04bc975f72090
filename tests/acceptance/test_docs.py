"""Every code block in README.md and docs/**/*.md runs, as a reader would paste it; every link lands.

- Python blocks run in a subprocess per page, in a throwaway working directory, in order
  and in one namespace (doc_blocks.py): a block may use what the blocks before it on the
  same page defined, and top-level `await` works as in `python -m asyncio`. While a page
  runs, an answerer here plays the person: it answers every pending request in the page's
  SQLite file, through its own broker, so asks that wait for a person finish for real.
  A page about the server (`SERVED`) runs against a real server with auth on that file,
  its agent's URL and token in INTERLOCK_URL and INTERLOCK_TOKEN, as a reader sets them.
- Shell blocks: every `interlock ...` command names a real subcommand and only options
  that subcommand's `--help` lists.
- The tutorial's commands (in blocks and in its text) name its store, tutorial.db.
- JSON blocks are parsed. Blocks without a language are diagrams or output and are not run.
- A block preceded by `<!-- not run: reason -->` is skipped by all of the above; keep
  those few, each with its reason.
- Every relative link of the docs, the README, the changelog and bench/README.md names a
  file that exists and, for a `#fragment` into a page, a heading of that page; docs/index.md
  links every page of docs/.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from doc_blocks import blocks
from typer.testing import CliRunner

import interlock
from interlock import Choice, Confirm, Form, Request, Text
from interlock.broker import LocalBroker
from interlock.cli import app
from interlock.principals import Principal, issue_token

ROOT = Path(__file__).parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
RUNNER = Path(__file__).with_name("doc_blocks.py")

#: the SQLite file each page's Python blocks use, so the answerer can play the person there
DATABASES = {
    "README.md": "interlock.db",
    "agents.md": "agents.db",
    "frameworks.md": "frameworks.db",
    "mcp.md": "mcp.db",
    "tutorial.md": "tutorial.db",
}


#: the pages whose blocks talk to a running server (on the page's SQLite file), as an
#: agent that belongs to alice: `interlock token create deployer --agent --owner alice`
SERVED = {"server.md"}


def page_id(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def runnable(page: Path, *languages: str) -> list[tuple[str, int]]:
    return [(code, line) for lang, code, line, reason in blocks(page.read_text()) if lang in languages and not reason]


def answer_for(request: Request) -> Any:
    """What a person says yes to: approve, confirm, the first option, some text."""
    if any(ask.id == "approve" for ask in request.asks):  # a gate's approval (its arguments left as they are)
        return {"approve": True}
    values: dict[str, Any] = {}
    for ask in request.asks:
        if isinstance(ask, Confirm):
            values[ask.id] = True
        elif isinstance(ask, Choice):
            first = ask.options[0]
            values[ask.id] = getattr(first, "id", first)
        elif isinstance(ask, Text):
            values[ask.id] = "the nearest one"
        elif isinstance(ask, Form):  # yes to each boolean, "yes" in each text field
            fields = ask.schema.get("properties", {})
            values[ask.id] = {k: True if v.get("type") == "boolean" else "yes" for k, v in fields.items()}
        else:  # pragma: no cover - a page that asks something new needs an answer here
            raise AssertionError(f"no answer for {ask!r}")
    return values if len(values) > 1 else next(iter(values.values()))


class Person:
    """Answers every request created in a SQLite file while a page runs, from its own broker.

    It follows the store's event stream (a request made by another process wakes it), so
    it needs no polling; it opens the file before the page does, and stops when told.
    """

    def __init__(self, database: Path) -> None:
        self.url = f"sqlite:///{database}"
        self.answered: list[str] = []
        self.ready = threading.Event()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=anyio.run, args=(self.follow,), daemon=True)

    async def follow(self) -> None:
        async with interlock.connect(self.url) as broker, anyio.create_task_group() as group:
            after = await broker.last_event_id()

            async def answer_each() -> None:
                async for event in broker.events(after=after, follow=True):
                    request = event.request
                    if event.type != "created" or request is None:
                        continue
                    if await broker.resolve(request.id, answer_for(request), by=request.to):
                        self.answered.append(request.asks[0].prompt if request.asks else request.title)

            group.start_soon(answer_each)
            self.ready.set()
            await anyio.to_thread.run_sync(self.stop.wait)
            group.cancel_scope.cancel()

    def __enter__(self) -> Person:
        self.thread.start()
        assert self.ready.wait(timeout=30), "the answerer did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=30)
        assert not self.thread.is_alive()


def run_page(
    page: Path, tmp_path: Path, env: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run the page's Python blocks with a person answering; the result and what was answered."""
    with Person(tmp_path / DATABASES.get(page.name, "interlock.db")) as person:
        result = subprocess.run(
            [sys.executable, str(RUNNER), str(page)],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, **(env or {})},
        )
    return result, person.answered


def agent_token(database: Path) -> str:
    """Make alice (a person) and deployer (her agent) in the store; the agent's token."""

    async def make() -> str:
        async with interlock.connect(f"sqlite:///{database}") as broker:
            assert isinstance(broker, LocalBroker)
            await broker.save_principal(Principal("alice", "human"))
            await broker.save_principal(Principal("deployer", "agent", owner="alice"))
            token = issue_token("deployer", datetime.now(UTC))
            await broker.save_token(token)
            return token.secret

    return anyio.run(make)


PYTHON_PAGES = [page for page in PAGES if runnable(page, "python")]


@pytest.mark.slow
@pytest.mark.parametrize("page", PYTHON_PAGES, ids=page_id)
def test_the_python_blocks_of_the_page_run_as_pasted(
    page: Path, tmp_path: Path, serve: Callable[..., AbstractContextManager[str]]
) -> None:
    if page.name in SERVED:
        database = tmp_path / DATABASES.get(page.name, "interlock.db")
        token = agent_token(database)
        with serve(f"sqlite:///{database}") as url:
            result, answered = run_page(page, tmp_path, {"INTERLOCK_URL": url, "INTERLOCK_TOKEN": token})
    else:
        result, answered = run_page(page, tmp_path)
    assert result.returncode == 0, result.stderr
    ran = [line for line in result.stdout.splitlines() if line.startswith("-- ran ")]
    assert len(ran) == len(runnable(page, "python")), result.stdout
    if page.name in DATABASES or page.name in SERVED:  # the page asks a person, and was answered
        assert answered, result.stdout


@pytest.mark.slow
def test_the_readme_example_gets_the_person_s_answers(tmp_path: Path) -> None:
    """The README's example prints what the person answered (the answerer picks "eu")."""
    result, answered = run_page(ROOT / "README.md", tmp_path)
    assert result.returncode == 0, result.stderr
    assert "deploying" in result.stdout
    assert "eu the nearest one" in result.stdout
    assert answered == ["Deploy v2.3 to prod?", "Which region first?"]


def tutorial_program(marker: str) -> str:
    """The tutorial's one Python block that contains `marker`, as a reader saves it."""
    (code,) = [code for code, _ in runnable(ROOT / "docs" / "tutorial.md", "python") if marker in code]
    return code


@pytest.mark.slow
def test_the_tutorial_s_park_py_run_again_changes_nothing_even_once_its_run_completed(tmp_path: Path) -> None:
    """park.py run twice prints the same; approved and resumed, run again it prints the
    completed run, as the tutorial says, instead of a traceback, and asks nothing new."""
    (tmp_path / "park.py").write_text(tutorial_program("broker.park("))
    (tmp_path / "resume.py").write_text(tutorial_program("Worker(broker"))

    def run(program: str) -> str:
        done = subprocess.run(
            [sys.executable, program], cwd=tmp_path, capture_output=True, text=True, timeout=60, env=dict(os.environ)
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    async def approve() -> None:
        async with interlock.connect(f"sqlite:///{tmp_path / 'tutorial.db'}") as broker:
            (request,) = (await broker.pending(run="deploy-web-2.3")).values()
            assert await broker.resolve(request.id, True, by="alice")

    async def requests_of_the_run() -> list[str]:
        async with interlock.connect(f"sqlite:///{tmp_path / 'tutorial.db'}") as broker:
            return [r.id for r in (await broker.list(run="deploy-web-2.3")).items]

    text = (ROOT / "docs" / "tutorial.md").read_text()
    first = run("park.py")
    assert first == "deploy-web-2.3 waiting_for_approval\n" and f"`{first.strip()}`" in text
    assert run("park.py") == first
    asked = anyio.run(requests_of_the_run)
    anyio.run(approve)
    assert run("resume.py") == "completed {'deployed': 'web 2.3'}\n"
    again = run("park.py")
    assert again == "deploy-web-2.3 completed\n" and f"`{again.strip()}`" in text
    assert anyio.run(requests_of_the_run) == asked and len(asked) == 1


def interlock_commands(page: Path) -> list[list[str]]:
    """Each `interlock ...` command line in the page's shell blocks, split into words."""
    commands = []
    for code, _ in runnable(page, "sh", "bash", "shell", "console"):
        for raw in code.replace("\\\n", " ").splitlines():
            words = shlex.split(raw, comments=True)
            for i, word in enumerate(words):
                if word in {"interlock", ".venv/bin/interlock"} or word.endswith("/bin/interlock"):
                    end = next((j for j in range(i + 1, len(words)) if words[j] in {"&&", "||", ";", "|"}), len(words))
                    commands.append(words[i + 1 : end])
                    break
    return commands


SHELL_COMMANDS = [(page, words) for page in PAGES for words in interlock_commands(page)]


@pytest.mark.parametrize(
    ("page", "words"), SHELL_COMMANDS, ids=[f"{page_id(p)}: interlock {' '.join(w)}" for p, w in SHELL_COMMANDS]
)
def test_each_interlock_command_in_the_docs_is_one_the_cli_has(page: Path, words: list[str]) -> None:
    path = [w for w in words if not w.startswith("-")][:2]
    help_text = ""
    for depth in (2, 1):
        result = CliRunner().invoke(app, [*path[:depth], "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
        if result.exit_code == 0 and "No such command" not in result.output:
            help_text = result.output
            break
    assert help_text, f"interlock {' '.join(path)} --help failed"
    for option in (w.split("=", 1)[0] for w in words if w.startswith("--")):
        assert option in help_text, f"{option} is not an option of interlock {' '.join(path)}"


def test_each_command_of_the_tutorial_names_the_tutorial_s_store() -> None:
    """The tutorial's requests live in tutorial.db: a command it gives (in a block or in
    the text) without `--db sqlite:///tutorial.db` reads interlock.db, where none is.
    A command named alone (`interlock runs`) is a mention, not a command to run."""
    page = ROOT / "docs" / "tutorial.md"
    text = page.read_text()
    lines = [line for code, _ in runnable(page, "sh") for line in code.splitlines()]
    lines += re.findall(r"`([^`\n]+)`", prose(text))
    missing = []
    for line in lines:
        words = shlex.split(line, comments=True)
        at = next((i for i, w in enumerate(words) if w == "interlock" or w.endswith("/bin/interlock")), None)
        if at is None or len(words) - at < 3:
            continue
        if "--db sqlite:///tutorial.db" not in " ".join(words[at:]):
            missing.append(line)
    assert not missing, missing


BACKUP_COMMANDS = ("pg_dump", ".backup ", "VACUUM INTO")


def test_each_backup_the_docs_take_is_readable_by_its_owner_alone() -> None:
    """A backup holds what the store does, the channels' secrets with which an answer can be
    signed as anyone: each block that takes one first sets `umask 077`, so that the copy
    is not made readable by every user of the machine (as pg_dump and sqlite3 make it under
    the usual umask 022)."""
    open_copies = []
    for page in PAGES:
        for code, line in runnable(page, "sh", "bash", "shell", "console"):
            takes = [i for i, raw in enumerate(code.splitlines()) if any(c in raw for c in BACKUP_COMMANDS)]
            private = [i for i, raw in enumerate(code.splitlines()) if raw.strip().startswith("umask 077")]
            if takes and not (private and private[0] < takes[0]):
                open_copies.append(f"{page_id(page)}:{line}")
    assert not open_copies, f"a backup taken without `umask 077` before it: {open_copies}"


def test_each_json_block_parses() -> None:
    for page in PAGES:
        for code, line in runnable(page, "json"):
            try:
                json.loads(code)
            except ValueError as error:
                raise AssertionError(f"{page_id(page)}:{line}: {error}") from error


def test_every_block_has_a_language_the_docs_test_knows() -> None:
    known = {"", "python", "sh", "bash", "shell", "console", "json", "toml", "yaml", "text"}
    found = [(page_id(p), line, lang) for p in PAGES for lang, _, line, _ in blocks(p.read_text())]
    assert not [block for block in found if block[2] not in known]


LINKED_PAGES = [*PAGES, ROOT / "CHANGELOG.md", ROOT / "bench" / "README.md"]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def prose(text: str) -> str:
    """A page without its fenced code blocks (a `#` line in a code block is no heading)."""
    return re.sub(r"^```.*?^```[ \t]*$", "", text, flags=re.MULTILINE | re.DOTALL)


def anchors(page: Path) -> set[str]:
    """The fragments a page's headings answer to, slugged as GitHub does (duplicates get -1, -2...)."""
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", prose(page.read_text()), flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        candidate, n = slug, 0
        while candidate in found:
            n += 1
            candidate = f"{slug}-{n}"
        found.add(candidate)
    return found


def test_every_relative_link_names_a_file_and_heading_that_exist() -> None:
    broken = []
    for page in LINKED_PAGES:
        for target in LINK.findall(prose(page.read_text())):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, fragment = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page_id(page)}: {target} (no such file)")
            elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
                broken.append(f"{page_id(page)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_the_docs_index_links_every_page() -> None:
    index = ROOT / "docs" / "index.md"
    linked = {(index.parent / target.partition("#")[0]).resolve() for target in LINK.findall(index.read_text())}
    unlisted = [page_id(page) for page in PAGES if page.is_relative_to(index.parent) and page != index]
    assert not [page for page in unlisted if (ROOT / page).resolve() not in linked], "add them to docs/index.md"
