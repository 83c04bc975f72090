"""Run the Python code blocks of one Markdown page, in order, in one namespace.

Used by test_docs.py as a script: `python doc_blocks.py PAGE.md`, in a throwaway working
directory. Blocks run as a reader pastes them into `python -m asyncio`: top-level `await`
works, and every block runs on one event loop kept open for the whole page, so a broker
opened in one block is used by the next. A block that calls `asyncio.run` itself (a whole
program) runs outside that loop.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import re
import sys
from pathlib import Path

FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
NOT_RUN = re.compile(r"<!--\s*not run:\s*(.+?)\s*-->\s*$")


def blocks(text: str) -> list[tuple[str, str, int, str | None]]:
    """(language, code, line, reason not run or None) for each fenced block of a page."""
    found = []
    for match in FENCE.finditer(text):
        before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = NOT_RUN.search(before)
        line = text.count("\n", 0, match.start()) + 1
        found.append((match.group(1), match.group(2), line, marker.group(1) if marker else None))
    return found


def main(page: str) -> None:
    namespace: dict[str, object] = {"__name__": "__main__"}
    with asyncio.Runner() as runner:
        for language, code, line, reason in blocks(Path(page).read_text()):
            if language != "python" or reason is not None:
                continue
            compiled = compile(code, f"{page}:{line}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            if compiled.co_flags & inspect.CO_COROUTINE:
                runner.run(eval(compiled, namespace))
            else:
                exec(compiled, namespace)
            print(f"-- ran {page}:{line}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
