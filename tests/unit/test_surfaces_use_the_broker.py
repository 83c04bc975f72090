"""Every surface goes through the broker: the server, the CLI, the MCP tools and the
channels never reach a broker's store (`.store`, `.principals`) nor import a store. What
only a process on the store can do is a `LocalBroker` method of its own; the delivery loop
works on the port `LocalBroker.outbox` hands it."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).parents[2] / "src" / "interlock"
SURFACES = [SRC / "cli.py", *sorted((SRC / "server").rglob("*.py"))]
SURFACES += [*sorted((SRC / "mcp").rglob("*.py")), *sorted((SRC / "channels").rglob("*.py"))]

REACHED = {"store", "principals"}
"""Attributes that are a store (a `LocalBroker`'s, or anything else's)."""

FROM_STORE = {
    "Query": "the shape of a list's filters (the API's parameters are made from it)",
    "DeliveryPort": "the type of the port the delivery loop works on (`LocalBroker.outbox`)",
    "PeopleDirectory": "the type of what judges whom a channel's message is to (a store's or a broker's)",
}
"""What a surface may import from `interlock.store`: shapes and a port's type, never a store."""


def _faults(source: str, module_path: Path) -> Iterator[str]:
    """Where the source of the module at `module_path` (under src/) reaches a store."""
    name = module_path.relative_to(SRC.parent)
    package = ".".join(name.with_suffix("").parts[:-1])
    for node in ast.walk(ast.parse(source, str(name))):
        where = f"{name}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.Attribute) and node.attr in REACHED:
            yield f"{where}: reaches `.{node.attr}` of {ast.unparse(node.value)}"
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:  # relative: resolve it against the module's package
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, *([module] if module else [])])
            if module == "interlock.store":
                for alias in node.names:
                    if alias.name not in FROM_STORE:
                        yield f"{where}: imports {alias.name} from interlock.store"
            elif module.startswith("interlock.store."):
                yield f"{where}: imports the store module {module}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "interlock.store" or alias.name.startswith("interlock.store."):
                    yield f"{where}: imports {alias.name}"


@pytest.mark.parametrize("path", SURFACES, ids=lambda p: str(p.relative_to(SRC)))
def test_a_surface_reaches_no_store_of_a_broker_and_imports_no_store(path: Path) -> None:
    assert not list(_faults(path.read_text("utf-8"), path))


def test_the_check_finds_a_store_reached_round_the_broker() -> None:
    source = (
        "from ..store import Store, Query\n"
        "from ..store.sqlite import SqliteStore\n"
        "import interlock.store.memory\n"
        "async def f(state):\n"
        "    await state.broker.store.list_deliveries()\n"
        "    return state.broker.principals\n"
    )
    faults = sorted(_faults(source, SRC / "server" / "probe.py"), key=lambda f: int(f.split(":")[1]))
    assert [fault.split(": ", 1)[1] for fault in faults] == [
        "imports Store from interlock.store",
        "imports the store module interlock.store.sqlite",
        "imports interlock.store.memory",
        "reaches `.store` of state.broker",
        "reaches `.principals` of state.broker",
    ]
