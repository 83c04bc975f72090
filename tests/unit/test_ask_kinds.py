"""Each ask kind carries its own behaviour: no surface branches on an ask's class or on its
type name, and a surface's table from ask kind to its renderer holds every kind."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import interlock
from interlock import Choice, Confirm, Form, MultiChoice, Option, Text
from interlock.channels import slack
from interlock.model import ASK_TYPES, Ask, build_request, by_ask_kind

SRC = Path(interlock.__file__).parent
CLASS_NAMES = frozenset(cls.__name__ for cls in ASK_TYPES.values())
TYPE_NAMES = frozenset(ASK_TYPES)

ALLOWED = {
    "model.py": "the ask kinds themselves",
    "mcp/jobs.py": "the MCP surface's one table, from the type names its clients use to the ask kinds",
}
"""The modules that may branch on an ask's kind: the model, and a surface's one table."""

EVERY_KIND: list[Ask] = [
    Text("Why?", id="t"),
    Confirm("Go?", id="c"),
    Choice("Which?", options=["a", "b"], id="ch", allow_other=True),
    MultiChoice("Which ones?", options=["a", "b"], id="m"),
    Form("Details", schema={"type": "object", "properties": {"n": {"type": "integer"}}}, id="f"),
]


def _module_of(path: Path) -> list[str]:
    return ["interlock", *path.relative_to(SRC).with_suffix("").parts]


def _ask_class_names(tree: ast.AST, path: Path) -> set[str]:
    """The names a module binds to the ask classes (`from ..model import Form as F`)."""
    package = _module_of(path)[:-1]  # what a relative import starts from (for __init__, its package)
    names: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = package[: len(package) - node.level + 1] if node.level else []
        module = ".".join(base + (node.module.split(".") if node.module else []))
        if module in ("interlock", "interlock.model"):
            names |= {alias.asname or alias.name for alias in node.names if alias.name in CLASS_NAMES}
    return names


def _is_class(node: ast.expr, names: set[str]) -> bool:
    """Whether `node` names an ask class (or a tuple or union of expressions that do)."""
    if isinstance(node, ast.Name):
        return node.id in names
    if isinstance(node, ast.Attribute):
        return node.attr in CLASS_NAMES
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return any(_is_class(item, names) for item in node.elts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _is_class(node.left, names) or _is_class(node.right, names)
    return False


def _is_type_name(node: ast.expr) -> bool:
    """Whether `node` is an ask type name ("form") or a collection of them only (a key
    list that happens to hold "confirm" among other names is not about an ask's kind)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and node.value in TYPE_NAMES
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return bool(node.elts) and all(_is_type_name(item) for item in node.elts)
    return False


def _is_type_of(node: ast.expr) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "type"


def branches_on_kind(source: str, path: Path) -> Iterator[tuple[int, str]]:
    """Each place in `source` that branches on an ask's kind: (line, what it does)."""
    tree = ast.parse(source)
    names = _ask_class_names(tree, path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and len(node.args) == 2:
            if node.func.id in ("isinstance", "issubclass") and _is_class(node.args[1], names):
                yield node.lineno, f"{node.func.id}(..., {ast.unparse(node.args[1])})"
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_is_type_name(operand) for operand in operands):
                yield node.lineno, f"compares with an ask type name: {ast.unparse(node)}"
            elif any(_is_type_of(operand) for operand in operands) and any(_is_class(o, names) for o in operands):
                yield node.lineno, f"compares the type of an ask: {ast.unparse(node)}"
        elif isinstance(node, ast.MatchClass) and _is_class(node.cls, names):
            yield node.lineno, f"matches an ask class: case {ast.unparse(node.cls)}()"
        elif isinstance(node, ast.MatchValue) and _is_type_name(node.value):
            yield node.lineno, f"matches an ask type name: case {ast.unparse(node.value)}"


def test_no_module_but_the_model_and_a_surfaces_one_table_branches_on_an_ask_kind() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        where = path.relative_to(SRC).as_posix()
        if where in ALLOWED:
            continue
        found += [f"{where}:{line}: {what}" for line, what in branches_on_kind(path.read_text("utf-8"), path)]
    assert not found, "give the ask kinds a hook (or a surface a table by kind) instead of:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "code",
    [
        "from ..model import Form\nif isinstance(ask, Form): pass",
        "from interlock.model import Choice as C\nok = isinstance(ask, (Text, C))",
        "from .. import MultiChoice\nok = isinstance(ask, Confirm | MultiChoice)",
        "from ..model import Text\nok = type(ask) is Text",
        "from .. import model\nok = isinstance(ask, model.Confirm)",
        "ok = ask.type == 'multi_choice'",
        "ok = data['type'] in ('text', 'form')",
        "ok = 'confirm' != kind",
        "from ..model import Form\nmatch ask:\n    case Form(): pass",
        "match ask.type:\n    case 'choice': pass",
    ],
)
def test_the_scan_finds_each_way_of_branching_on_an_ask_kind(code: str) -> None:
    assert list(branches_on_kind(code, SRC / "channels" / "example.py"))


def test_the_scan_leaves_alone_what_only_looks_like_an_ask_kind() -> None:
    code = (
        "from fastapi import Form\n"
        "ok = isinstance(value, Form) or block['type'] == 'input' or f.kind == 'json'\n"
        "ok = isinstance(ask, Ask) and type(ask) is dict\n"
        "rest = [k for k in payload if k not in (key, 'options', 'multiple', 'confirm')]\n"
    )
    assert list(branches_on_kind(code, SRC / "server" / "example.py")) == []


def test_a_table_by_ask_kind_that_lacks_a_kind_is_refused_where_it_is_made() -> None:
    with pytest.raises(TypeError, match="Slack's modal inputs: no entry for Form"):
        by_ask_kind({Text: 1, Confirm: 2, Choice: 3, MultiChoice: 4}, "Slack's modal inputs")
    stranger: dict[Any, int] = {**dict.fromkeys(ASK_TYPES.values(), 0), Option: 5}
    with pytest.raises(TypeError, match="is not an ask kind"):
        by_ask_kind(stranger, "a table")


def test_the_slack_modal_has_inputs_for_every_ask_kind() -> None:
    assert set(slack.MODAL_INPUTS) == set(ASK_TYPES.values())
    view = slack.modal_view(build_request(EVERY_KIND))
    assert view is not None
    ids = [block.get("block_id") for block in view["blocks"] if block["type"] == "input"]
    assert ids == ["t", "c", "ch", "ch#other", "m", "f#p0"]


@pytest.mark.parametrize("ask", EVERY_KIND, ids=lambda ask: ask.type)
def test_only_a_form_is_checked_off_the_event_loop(ask: Ask) -> None:
    assert ask.costly_to_check is (ask.type == "form")


@pytest.mark.parametrize(
    ("ask", "clicks"),
    [
        (EVERY_KIND[0], None),
        (EVERY_KIND[1], (("Yes", True), ("No", False))),
        (EVERY_KIND[2], (("a", "a"), ("b", "b"))),
        (EVERY_KIND[3], None),
        (EVERY_KIND[4], None),
    ],
    ids=[ask.type for ask in EVERY_KIND],
)
def test_a_confirm_and_a_choice_are_the_asks_one_click_answers(ask: Ask, clicks: Any) -> None:
    assert ask.one_click_answers() == clicks
    assert ask.allow_other is (ask.type == "choice")  # the choice above takes its own text too


@pytest.mark.parametrize("ask", EVERY_KIND, ids=lambda ask: ask.type)
def test_only_a_confirm_decides_an_approval(ask: Ask) -> None:
    assert (ask.as_verdict() is ask) is (ask.type == "confirm")
    assert (ask.as_verdict() is None) is (ask.type != "confirm")
