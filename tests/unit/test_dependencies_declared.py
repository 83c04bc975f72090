"""Every third-party package the code imports is a declared dependency, and nothing unused is."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

import interlock

SRC = Path(interlock.__file__).parent


def _imported_top_levels() -> set[str]:
    names: set[str] = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text("utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"interlock"}


def _declared() -> set[str]:
    requires = importlib.metadata.requires("interlock") or []
    return {re.split(r"[\s;<>=!~\[]", req, maxsplit=1)[0].lower().replace("_", "-") for req in requires}


def test_every_third_party_import_is_a_declared_dependency() -> None:
    by_module = importlib.metadata.packages_distributions()
    declared = _declared()
    undeclared: dict[str, list[str]] = {}
    for module in _imported_top_levels():
        dists = by_module.get(module, [module])
        if not {d.lower().replace("_", "-") for d in dists} & declared:
            undeclared[module] = dists
    assert not undeclared, f"imported but not declared in pyproject.toml: {undeclared}"


def test_the_server_does_not_pull_in_what_it_does_not_use() -> None:
    requires = importlib.metadata.requires("interlock") or []
    assert not [req for req in requires if req.startswith("uvicorn[")], "uvicorn[standard] brings unused packages"
    assert not _declared() & {"watchfiles", "websockets", "python-dotenv"}
