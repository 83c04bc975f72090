"""What interlock's SQLite schema costs: the two statements of interlock's durable cycle
(the create, whose trigger writes the row and its `created` event; the settlement, whose
trigger appends its event), each its own transaction, on a database interlock made, with
the documents it writes, then with one thing changed at a time.

    python bench/sqlite_schema.py [--cycles 4000] [--reps 5]

Prints each variant's cycle rate relative to the schema as shipped (median of the
per-round ratios, variants rotated within each round, a fresh copy of the database each
time). Only SQLite runs in the timed loop: interlock makes the database and says what
its statements and documents are (`durable.interlock_database`).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import environment, median, paired, table
from durable import interlock_database, interlock_statements


def cycle_rate(path: str, n: int, *, drops: tuple[str, ...] = (), doc: str, response: str) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    for index in drops:
        conn.execute(f"DROP INDEX {index}")
    try:
        return n / interlock_statements(conn, n, doc, response)
    finally:
        conn.close()


def main() -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--cycles", type=int, default=4000)
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args()

    print(environment(["interlock"]))
    with tempfile.TemporaryDirectory(prefix="interlock-schema-") as root:
        made = os.path.join(root, "made.db")
        doc, response = interlock_database(made)
        conn = sqlite3.connect(made)
        indexes = [
            name
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name IN ('requests', 'events')"
                " AND sql IS NOT NULL ORDER BY tbl_name DESC, name"
            )
        ]
        conn.close()
        short = {"doc": doc[:40], "response": response[:40]}
        variants: dict[str, dict[str, object]] = {
            "as shipped": {},
            "no secondary index on requests or events": {"drops": tuple(indexes)},
            "40-byte documents": short,
        }
        for index in indexes:
            variants[f"without {index}"] = {"drops": (index,)}

        def rate(name: str, path: str) -> float:
            shutil.copy(made, path)
            options = {"doc": doc, "response": response, **variants[name]}
            return cycle_rate(path, args.cycles, **options)  # type: ignore[arg-type]

        rate("as shipped", os.path.join(root, "warm.db"))
        samples: dict[str, list[float]] = {name: [] for name in variants}
        names = list(variants)
        for r in range(args.reps):
            for i in range(len(names)):
                name = names[(i + r) % len(names)]
                samples[name].append(rate(name, os.path.join(root, f"{r}-{i}.db")))
    base = samples["as shipped"]
    print(
        f"\n## interlock's two statements a cycle on its schema, one change at a time "
        f"({args.cycles:,} cycles x {args.reps} reps; median)"
    )
    rows = [[name, median(v), f"{1e6 / median(v):.1f}", f"{paired(v, base):.2f}x"] for name, v in samples.items()]
    print(table(["variant", "cycles/s", "us/cycle", "x as shipped"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
