"""What interlock's SQLite schema costs: the durable benchmark's two transactions
(insert request + event; settle request WHERE status='pending' + event) run
bare, on interlock's own schema, then with one thing changed at a time.

    python bench/sqlite_schema.py [--cycles 2000] [--reps 5]

Prints each variant's cycle rate relative to the schema as shipped (median of
--reps rounds, variants rotated within each round, fresh database each time).
No interlock code runs here, only its migration files are read.
"""

from __future__ import annotations

import argparse
import os
import re
import sqlite3
import sys
import tempfile
import time
from uuid import uuid4

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import environment, median, paired, perf, table
from durable import _DOC_ANSWERED, _DOC_CREATED, _interlock_migrations

INSERT = "INSERT INTO requests (id, kind, status, created_at, doc) VALUES (?, 'question', 'pending', ?, ?)"
EVENT = "INSERT INTO events (type, request_id, at, data) VALUES (?, ?, ?, ?)"
SETTLE = "UPDATE requests SET status = 'answered', settled_at = ?, doc = ? WHERE id = ? AND status = 'pending'"


def cycle_rate(
    path: str, statements: list[str], n: int, *, doc_c: str = _DOC_CREATED, doc_a: str = _DOC_ANSWERED, begin: str
) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    for statement in statements:
        conn.execute(statement)
    ex = conn.execute
    t0 = perf()
    for _ in range(n):
        rid = uuid4().hex
        now = int(time.time() * 1_000_000)
        ex(begin)
        ex(INSERT, (rid, now, doc_c))
        ex(EVENT, ("created", rid, now, doc_c))
        ex("COMMIT")
        ex(begin)
        ex(SETTLE, (now, doc_a, rid))
        ex(EVENT, ("answered", rid, now, doc_a))
        ex("COMMIT")
    rate = n / (perf() - t0)
    conn.close()
    return rate


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cycles", type=int, default=2000)
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args()

    shipped = _interlock_migrations()
    if not shipped:
        print("interlock's migration files not found: install interlock first")
        return 1
    indexes = [s for s in shipped if re.match(r"\s*CREATE\s+(UNIQUE\s+)?INDEX", s, re.I)]
    immediate = {"begin": "BEGIN IMMEDIATE"}
    variants: dict[str, tuple[list[str], dict[str, str]]] = {
        "as shipped": (shipped, immediate),
        "no secondary indexes": ([s for s in shipped if s not in indexes], immediate),
        "rowid tables (no WITHOUT ROWID)": ([s.replace(") WITHOUT ROWID", ")") for s in shipped], immediate),
        "40-byte documents": (shipped, {**immediate, "doc_c": _DOC_CREATED[:40], "doc_a": _DOC_ANSWERED[:40]}),
        "BEGIN (deferred)": (shipped, {"begin": "BEGIN"}),
    }
    for index in indexes:
        found = re.search(r"INDEX\s+(\w+)", index)
        label = f"without {found.group(1) if found else index[:40]}"
        variants[label] = ([s for s in shipped if s is not index], immediate)

    print(environment(["interlock"]))
    samples: dict[str, list[float]] = {k: [] for k in variants}
    with tempfile.TemporaryDirectory(prefix="interlock-schema-") as root:
        cycle_rate(os.path.join(root, "warm.db"), shipped, max(50, args.cycles // 10), begin="BEGIN IMMEDIATE")
        names = list(variants)
        for r in range(args.reps):
            for i in range(len(names)):
                name = names[(i + r) % len(names)]
                statements, kw = variants[name]
                samples[name].append(cycle_rate(os.path.join(root, f"{r}-{i}.db"), statements, args.cycles, **kw))
    base = samples["as shipped"]
    print(f"\n## interlock's schema, one change at a time ({args.cycles:,} cycles x {args.reps} reps; median)")
    rows = [[name, median(v), f"{paired(v, base):.2f}x"] for name, v in samples.items()]
    print(table(["variant", "cycles/s", "x as shipped"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
