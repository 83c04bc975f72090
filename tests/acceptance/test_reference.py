"""The reference in docs/reference/ is what docs/gen_reference.py writes from the code now:
every CLI command and option, every name the package and its public modules export, and
every route of the HTTP API. A stale page fails with the command that writes it again."""

from __future__ import annotations

import difflib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import typer.main

import interlock
from interlock.cli import app

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "docs" / "gen_reference.py"


@pytest.fixture(scope="module")
def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reference", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_reference"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def pages(generator: ModuleType) -> dict[Path, str]:
    rendered: dict[Path, str] = generator.render()
    return rendered


def test_the_reference_pages_are_what_the_code_says_now(generator: ModuleType, pages: dict[Path, str]) -> None:
    stale = generator.stale(pages)
    diffs = []
    for path in stale:
        old = path.read_text().splitlines() if path.exists() else []
        diff = difflib.unified_diff(old, pages[path].splitlines(), str(path), "from the code", lineterm="", n=1)
        diffs.append("\n".join(list(diff)[:40]))
    assert not stale, "the reference is stale: run `.venv/bin/python docs/gen_reference.py`\n" + "\n".join(diffs)


def test_the_cli_reference_has_every_command_and_option(pages: dict[Path, str]) -> None:
    page = pages[ROOT / "docs" / "reference" / "cli.md"]
    root = typer.main.get_command(app)
    for name, command in root.commands.items():  # type: ignore[attr-defined]
        for sub, leaf in [(None, command), *getattr(command, "commands", {}).items()]:
            path = " ".join(filter(None, ["interlock", name, sub]))
            assert f"## `{path}`" in page
            section = page.split(f"## `{path}`", 1)[1].split("\n## ", 1)[0]
            for param in leaf.params:
                assert f"`{param.opts[0]}`" in section, f"{path}: {param.opts[0]}"


def test_the_python_reference_has_every_name_the_package_exports(pages: dict[Path, str]) -> None:
    page = pages[ROOT / "docs" / "reference" / "python.md"]
    for name in interlock.__all__:
        if name != "__version__":
            assert f"\n### `{name}`\n" in page, name
    assert "async create(asks: Ask | Sequence[Ask], **fields: Unpack[CreateFields]) -> Request" in page


def test_the_http_reference_lists_the_routes_the_server_serves(pages: dict[Path, str]) -> None:
    page = pages[ROOT / "docs" / "reference" / "http.md"]
    assert "| `POST` | `/api/v1/requests/{request_id}/answer` |" in page
    assert "/openapi.json" in page


def test_the_check_option_passes_on_a_current_reference(generator: ModuleType) -> None:
    assert generator.main(["--check"]) == 0
