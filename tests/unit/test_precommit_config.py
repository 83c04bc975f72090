"""The pre-commit hooks run exactly the checks CI runs, with the same arguments."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

REFERENCE_CHECK = ".venv/bin/python docs/gen_reference.py --check"
"""A hook of its own, so a commit that changes the CLI or the API is stopped before CI; CI
runs the same check inside the suite (tests/acceptance/test_reference.py)."""


def _ci_checks() -> list[str]:
    """The commands of .ci/run that check the code (not those that install it or run the suite)."""
    checks = []
    for line in (ROOT / ".ci" / "run").read_text("utf-8").splitlines():
        words = shlex.split(line, comments=True)
        if not words or not words[0].startswith(".venv/bin/"):
            continue
        if words[0] in (".venv/bin/python", ".venv/bin/pytest"):  # pip install, and the suite
            continue
        # A check run beside the suite (mypy) has its output kept for later: its arguments
        # end where its redirections and the `&` begin.
        cut = next((i for i, word in enumerate(words) if re.match(r"\d*>|&$", word)), len(words))
        checks.append(shlex.join(words[:cut]))
    return checks


def _hook_entries() -> list[str]:
    """The `entry:` of each hook in .pre-commit-config.yaml (one line each)."""
    text = (ROOT / ".pre-commit-config.yaml").read_text("utf-8")
    return [shlex.join(shlex.split(m)) for m in re.findall(r"^\s+entry:\s*(.+?)\s*$", text, re.MULTILINE)]


def test_the_files_are_read() -> None:
    assert len(_ci_checks()) >= 4
    assert len(_hook_entries()) >= 5


def test_every_check_ci_runs_is_a_hook_with_the_same_arguments_and_no_hook_runs_anything_else() -> None:
    hooks = _hook_entries()
    assert REFERENCE_CHECK in hooks
    assert (ROOT / "tests" / "acceptance" / "test_reference.py").exists()
    assert sorted(h for h in hooks if h != REFERENCE_CHECK) == sorted(_ci_checks())


def test_every_hook_runs_from_the_projects_venv_on_the_whole_tree() -> None:
    text = (ROOT / ".pre-commit-config.yaml").read_text("utf-8")
    hooks = text.split("- id: ")[1:]
    assert hooks
    for hook in hooks:
        assert "language: system" in hook, hook
        assert "pass_filenames: false" in hook, hook
