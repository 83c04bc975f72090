"""What the parts of interlock's durable cycle cost, and the floor left without them.

The cycle is bench/durable.py's (`sqlite://`, create -> answer from another task -> the
waiter wakes), run as shipped and then with parts of the SQLite store turned off, one
more in each row, against raw sqlite3 doing its two commits in the same rounds:

* `catch-up`: the search index's catch-up with the event log (`_derive_soon`), which
  reads each new request's texts into the full-text index every 0.2 s;
* `checkpoints`: the store's checkpoints of the write-ahead log in a worker thread, and
  SQLite's own in the commit (`wal_autocheckpoint = 0`): the log then grows without end;
* `wake hint`: the datagram that tells other processes on the file that it changed.

The rows without parts are floors to read the budget off, not configurations anyone
could run: a store without them would not find new requests by their words, would fill
its disk, or would leave other processes' waiters asleep until their poll.

    python bench/durable_parts.py [--cycles 8000] [--reps 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import durable
from _common import environment, median, paired, rounds, table

from interlock.store import _wakeup, sqlite

STEPS = ["as shipped", "- catch-up", "- checkpoints", "- wake hint"]
"""Each row turns off what the rows before it did, and one more part."""


def _turn_off(parts: int) -> Callable[[], None]:
    """Turn off the first `parts` parts of the store (in STEPS' order); returns the undo."""
    store, wakeup = sqlite.SqliteStore, _wakeup.Wakeup
    saved = (store._derive_soon, store._committed, sqlite.AUTOCHECKPOINT_PAGES, wakeup.notify)
    if parts >= 1:
        store._derive_soon = lambda self: None  # type: ignore[method-assign]
    if parts >= 2:
        store._committed = lambda self: None  # type: ignore[method-assign]
        sqlite.AUTOCHECKPOINT_PAGES = 0
    if parts >= 3:
        wakeup.notify = lambda self: None  # type: ignore[method-assign]

    def undo() -> None:
        store._derive_soon, store._committed, sqlite.AUTOCHECKPOINT_PAGES, wakeup.notify = saved  # type: ignore[method-assign]

    return undo


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cycles", type=int, default=8000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    print(environment(["interlock"]))
    print()
    names = [*STEPS, "raw sqlite3"]
    us: dict[str, list[float]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory(prefix="interlock-parts-") as root:
        durable.interlock_pingpong(os.path.join(root, "warm.db"), 500)  # imports, first migrations
        for order in rounds(names, args.reps):
            for name in order:
                path = os.path.join(root, f"{len(os.listdir(root))}.db")
                if name == "raw sqlite3":
                    seconds = durable.raw_sqlite(path, args.cycles)
                else:
                    undo = _turn_off(STEPS.index(name))
                    try:
                        seconds = durable.interlock_pingpong(path, args.cycles)
                    finally:
                        undo()
                us[name].append(seconds / args.cycles * 1e6)
    rows = []
    shipped = median(us["as shipped"])
    for name in names:
        rows.append(
            [
                name,
                f"{median(us[name]):.1f}",
                f"{min(us[name]):.1f}",
                f"{max(us[name]):.1f}",
                f"{median(us[name]) - shipped:+.1f}" if name in STEPS else "",
                f"{paired(us['raw sqlite3'], us[name]):.2f}x",
            ]
        )
    print(
        f"## interlock sqlite:// cycle with parts turned off ({args.cycles:,} cycles x {args.reps} rounds; "
        "median us a cycle, ratio = median of per-round ratios)"
    )
    print(table(["cycle", "us/cycle", "min", "max", "vs shipped", "x raw sqlite3"], rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
