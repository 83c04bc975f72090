"""The package's public surface: which modules are API, and what each one exports."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

import pytest

import interlock


def _modules() -> list[str]:
    found = [interlock.__name__]
    for info in pkgutil.walk_packages(interlock.__path__, prefix="interlock."):
        found.append(info.name)
    return sorted(found)


def _public(name: str) -> bool:
    return not any(part.startswith("_") for part in name.split(".")[1:])


PUBLIC = [name for name in _modules() if _public(name)]


def test_modules_that_are_not_api_are_private_by_name() -> None:
    # The public modules are the ones a user imports; everything else is a `_name` module.
    assert "interlock.store._sql" not in PUBLIC
    assert {"interlock", "interlock.broker", "interlock.model", "interlock.agent", "interlock.store"} <= set(PUBLIC)


@pytest.mark.parametrize("name", PUBLIC)
def test_every_public_module_declares_what_it_exports(name: str) -> None:
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert isinstance(exported, list), f"{name} has no __all__"
    missing = [n for n in exported if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names what it does not define: {missing}"
    assert len(set(exported)) == len(exported), f"{name}.__all__ repeats a name"


def test_what_the_package_exports_is_exported_by_the_module_it_comes_from() -> None:
    modules = {name: importlib.import_module(name) for name in PUBLIC if name != "interlock"}
    for name in interlock.__all__:
        if name == "__version__":
            continue
        home = getattr(getattr(interlock, name), "__module__", None)
        if isinstance(home, str) and home in modules:
            assert name in modules[home].__all__, f"{home} defines {name} but does not export it"
        else:  # a type alias (Ask, InputHook): some public module exports it
            assert any(name in module.__all__ for module in modules.values()), f"no module exports {name}"


def test_importing_interlock_or_its_cli_leaves_the_form_checks_unloaded_until_a_form_needs_them() -> None:
    # jsonschema and its format checkers were a third of `import interlock`: every agent
    # program, CLI command and server start paid for them, forms or not.
    probe = (
        "import sys, interlock, interlock.cli\n"
        "assert 'jsonschema' not in sys.modules, 'loaded by import'\n"
        "interlock.Form('Ship to?', {'type': 'object', 'properties': {'city': {'type': 'string'}}})\n"
        "assert 'jsonschema' in sys.modules, 'not loaded by a form'\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
