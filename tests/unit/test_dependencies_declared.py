"""Each extra declares exactly what its modules import, and the core what the rest imports.

A module of the package belongs to the core (`pip install interlock`) unless `EXTRA_OF`
places it in an extra: every third-party package it imports is then declared in the core
dependencies or in that extra, so installing the extra is enough to import it. The other
way round, every package an extra (or the core) declares is imported by one of its modules,
unless `NOT_IMPORTED` says why that extra declares it anyway. The test extra is held to the same
rules over what the suite runs (the tests, the docs' code blocks and the examples); the
bench extra only to the second (its contenders live in bench/run.sh's own venv).

The declarations are read from pyproject.toml, not from the installed metadata, so an edit
is checked before it is installed; the packages an import comes from are the installed ones.
"""

from __future__ import annotations

import ast
import functools
import importlib.metadata
import importlib.util
import re
import sys
import tomllib
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "interlock"
sys.path.insert(0, str(ROOT / "tests" / "acceptance"))
from doc_blocks import blocks  # noqa: E402  (the docs' code blocks, as test_docs.py runs them)

EXTRA_OF: dict[str, tuple[str, ...]] = {
    "interlock.server": ("server",),
    "interlock.mcp": ("mcp",),
    "interlock.grant_tokens": ("grants",),
    "interlock.store.postgres": ("postgres",),
    "interlock.channels.email": ("email",),
    "interlock.integrations.pydantic_ai": ("pydantic-ai",),
    "interlock.integrations.openai_agents": ("openai-agents",),
    "interlock.integrations.langgraph": ("langgraph",),
    # What the three framework adapters share: each of their extras must make it importable.
    "interlock.integrations._pauses": ("pydantic-ai", "openai-agents", "langgraph"),
}
"""Where a module (or a package, with everything in it) belongs, when not in the core."""

IN_A_COMMAND: dict[tuple[str, str], str] = {
    # `interlock serve` imports the server and uvicorn when it runs, with the server extra.
    ("interlock.cli", "uvicorn"): "server",
}
"""Imports inside a function of a core module that only run with an extra installed."""

NOT_IMPORTED: dict[str, dict[str, str]] = {
    "core": {
        "sniffio": "httpcore imports it on every request when present, else scans sys.path each time",
        "rfc3339-validator": "jsonschema checks a form's date-time and time formats only when it is installed",
    },
    "server": {
        "uvloop": "uvicorn's event loop under `interlock serve`, taken when installed",
        "httptools": "uvicorn's HTTP parser under `interlock serve`, taken when installed",
        "jinja2": "fastapi.templating, which the web inbox's pages use, needs it and FastAPI does not bring it",
        "python-multipart": "FastAPI reads the web inbox's form posts with it and does not bring it",
        "tzdata": "zoneinfo's time zones (the history's days) where the system has none",
    },
    "test": {
        "pytest-cov": "coverage in CI (.ci/run)",
        "pytest-xdist": "the suite in several processes (.ci/run)",
        "ruff": "lint and format (.ci/run)",
        "mypy": "types (.ci/run)",
        "types-jsonschema": "jsonschema's types, for mypy",
        "import-linter": "the layer contracts (.ci/run)",
        # Imported by the agent script tests/acceptance/test_langgraph_processes.py writes
        # out and runs in several processes: code in a string, which this test does not read.
        "langgraph-checkpoint-postgres": "the PostgreSQL checkpoints of the LangGraph processes' agent script",
        "psycopg": "the PostgreSQL checkpoints of the LangGraph processes' agent script",
    },
}
"""Packages declared on purpose though no file this test reads imports them, and why."""


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements(specs: Iterable[str]) -> dict[str, set[str]]:
    """Each requirement's project name, with the extras it asks for."""
    out: dict[str, set[str]] = {}
    for spec in specs:
        found = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?", spec)
        assert found, spec
        out[_normal(found[1])] = {e.strip() for e in (found[2] or "").split(",") if e.strip()}
    return out


PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
CORE = _requirements(PROJECT["dependencies"])
EXTRAS = {name: _requirements(specs) for name, specs in PROJECT["optional-dependencies"].items()}


def _with_included(extra: str) -> set[str]:
    """What installing `extra` declares: its own requirements and those of the extras it includes."""
    declared = set(CORE)
    for name, extras in EXTRAS[extra].items():
        if name == "interlock":
            for included in extras:
                declared |= _with_included(included)
        else:
            declared.add(name)
    return declared


def _imports(tree: ast.AST, package: str) -> Iterator[str]:
    """The absolute names of the modules a parsed file imports (`package` resolves relative imports)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            yield module
            yield from (f"{module}.{alias.name}" for alias in node.names)


@functools.cache
def _distributions() -> dict[str, list[str]]:
    return dict(importlib.metadata.packages_distributions())


@functools.cache
def _distribution_of(module: str) -> str | None:
    """The installed project a module comes from (None for the standard library, interlock
    and modules that are not installed: names imported from a module, local test helpers)."""
    top = module.split(".")[0]
    if top in sys.stdlib_module_names or top == "interlock":
        return None
    owners = sorted({_normal(d) for d in _distributions().get(top, [])})
    if len(owners) <= 1:
        return owners[0] if owners else None
    # A namespace shared by several projects (langgraph.*): the one holding the module's file.
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.has_location:
        return None
    origin = Path(spec.origin).resolve()
    for owner in owners:
        files = importlib.metadata.distribution(owner).files or []
        if any(Path(str(f.locate())).resolve() == origin for f in files if f.name == origin.name):
            return owner
    return None


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package_of(path: Path, name: str) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _extras_of(module: str) -> tuple[str, ...]:
    """The extras a module of the package belongs to: () for the core."""
    for prefix, extras in sorted(EXTRA_OF.items(), key=lambda item: -len(item[0])):
        if module == prefix or module.startswith(prefix + "."):
            return extras
    return ()


@functools.cache
def _package_imports() -> tuple[tuple[str, str, str | None], ...]:
    """(module, project it imports, the extra a function-level import of it needs or None);
    the package is parsed once, and each test filters what it read."""
    return tuple(_scan_package())


def _scan_package() -> Iterator[tuple[str, str, str | None]]:
    for path in sorted(SRC.rglob("*.py")):
        name = _module_name(path)
        for imported in set(_imports(ast.parse(path.read_text("utf-8")), _package_of(path, name))):
            project = _distribution_of(imported)
            if project is not None:
                yield name, project, IN_A_COMMAND.get((name, imported.split(".")[0]))


@functools.cache
def _suite_imports() -> tuple[tuple[str, str], ...]:
    """(file, project it imports) for what the suite runs: the tests, the docs' Python blocks,
    the examples; parsed once, as the package is."""
    return tuple(_scan_suite())


def _scan_suite() -> Iterator[tuple[str, str]]:
    for path in sorted([*(ROOT / "tests").rglob("*.py"), *(ROOT / "examples").rglob("*.py")]):
        for imported in set(_imports(ast.parse(path.read_text("utf-8")), "")):
            if (project := _distribution_of(imported)) is not None:
                yield str(path.relative_to(ROOT)), project
    for page in sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")]):
        for language, code, line, not_run in blocks(page.read_text("utf-8")):
            if language == "python" and not_run is None:
                for imported in set(_imports(ast.parse(code), "")):
                    if (project := _distribution_of(imported)) is not None:
                        yield f"{page.relative_to(ROOT)}:{line}", project


def test_the_placed_modules_exist_and_their_extras_are_declared() -> None:
    for prefix, extras in EXTRA_OF.items():
        assert importlib.util.find_spec(prefix) is not None, prefix
        assert set(extras) <= set(EXTRAS), extras
    assert set(IN_A_COMMAND.values()) <= set(EXTRAS)
    for extra, reasons in NOT_IMPORTED.items():
        assert set(reasons) <= set(CORE if extra == "core" else EXTRAS[extra]), extra


def test_every_third_party_import_of_a_module_is_declared_in_the_core_or_in_its_extras() -> None:
    undeclared: set[str] = set()
    for module, project, command_extra in _package_imports():
        extras = (command_extra,) if command_extra else _extras_of(module)
        missing = [e for e in extras if project not in _with_included(e)] if extras else []
        if not extras and project not in CORE:
            missing = ["the core"]
        undeclared |= {f"{module} imports {project}, which {where} does not declare" for where in missing}
    assert not undeclared, "\n".join(sorted(undeclared))


@pytest.mark.parametrize("extra", sorted({e for extras in EXTRA_OF.values() for e in extras} | {"core"}))
def test_nothing_the_core_or_an_extra_declares_goes_unimported(extra: str) -> None:
    declared = CORE if extra == "core" else EXTRAS[extra]
    imported = set()
    for module, project, command_extra in _package_imports():
        belongs = (command_extra,) if command_extra else _extras_of(module)
        if extra == "core" or extra in belongs:
            imported.add(project)
    unused = sorted(set(declared) - imported - set(NOT_IMPORTED.get(extra, {})) - {"interlock"})
    assert not unused, f"{extra} declares what none of its modules imports: {unused}"


def test_every_third_party_import_of_the_suite_is_declared_in_the_test_extra() -> None:
    declared = _with_included("test")
    undeclared = sorted(
        {f"{where} imports {project}" for where, project in _suite_imports() if project not in declared}
    )
    assert not undeclared, "not declared in the test extra:\n" + "\n".join(undeclared)


def test_nothing_the_test_extra_declares_goes_unused() -> None:
    imported = {project for _, project in _suite_imports()}
    unused = sorted(set(EXTRAS["test"]) - imported - set(NOT_IMPORTED["test"]) - {"interlock"})
    assert not unused, f"the test extra declares what the suite does not import: {unused}"


def test_nothing_the_bench_extra_declares_goes_unimported() -> None:
    imported = set()
    for path in (ROOT / "bench").rglob("*.py"):
        for module in _imports(ast.parse(path.read_text("utf-8")), ""):
            # A contender not installed here (bench/run.sh's venv has it) is named by its import.
            installed = module.split(".")[0] in _distributions()
            imported.add(_distribution_of(module) if installed else _normal(module.split(".")[0]))
    unused = sorted(set(EXTRAS["bench"]) - imported - {"interlock"})
    assert not unused, f"the bench extra declares what no benchmark imports: {unused}"


def test_the_server_does_not_pull_in_what_it_does_not_use() -> None:
    assert not [spec for spec in PROJECT["optional-dependencies"]["server"] if spec.startswith("uvicorn[")]
    assert not _with_included("server") & {"watchfiles", "websockets", "python-dotenv"}
