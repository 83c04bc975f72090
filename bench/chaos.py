"""Chaos, the long run: worker processes create and answer requests while a repeatable schedule
SIGKILLs them, on one SQLite file and on three `interlock serve` nodes sharing one
PostgreSQL database (there the nodes are killed too); then every acknowledged write is
looked for, and every request checked to have settled at most once.

The harness is the one the CI test uses (`tests/security/chaos_harness.py`); this script
runs it longer and prints the figures recorded in docs/explanation/security.md:

    python bench/chaos.py [--store sqlite postgresql] [--seconds 300] [--workers 6] [--schedule 8]
                          [--kill-every 0.5 2.0] [--pg postgresql://postgres@127.0.0.1:5432] [--json FILE]

PostgreSQL gets a throwaway database on the server `--pg` names, dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "security"))

from chaos_harness import Outcome, check_postgres, check_sqlite, lines, run, serve_nodes, wait_healthy


def sqlite_run(args: argparse.Namespace, work: Path) -> Outcome:
    path = work / "chaos.db"
    outcome = run(
        f"sqlite:///{path}",
        work / "sqlite-logs",
        seconds=args.seconds,
        workers=args.workers,
        seed=args.schedule,
        kill_every=tuple(args.kill_every),
    )
    check_sqlite(outcome, work / "sqlite-logs", path)
    return outcome


async def _admin(server: str, sql: str) -> None:
    import asyncpg  # type: ignore[import-untyped]

    conn = await asyncpg.connect(f"{server}/postgres")
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


def postgres_run(args: argparse.Namespace, work: Path) -> Outcome:
    name = f"interlock_chaos_{secrets.token_hex(4)}"
    asyncio.run(_admin(args.pg, f"CREATE DATABASE {name}"))
    url = f"{args.pg}/{name}"
    try:
        nodes, urls = serve_nodes(url, 3)
        nodes[0].start()  # the first applies the migrations alone
        wait_healthy(urls[:1])
        nodes[0].stop()
        outcome = run(
            url,
            work / "pg-logs",
            seconds=args.seconds,
            workers=args.workers,
            seed=args.schedule,
            kill_every=tuple(args.kill_every),
            nodes=nodes,
            node_urls=urls,
        )
        check_postgres(outcome, work / "pg-logs", url)
        return outcome
    finally:
        asyncio.run(_admin(args.pg, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", nargs="+", choices=["sqlite", "postgresql"], default=["sqlite", "postgresql"])
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--workers", type=int, default=6)
    parser.add_argument("--schedule", type=int, default=8, help="which kill schedule (the same number, the same kills)")
    parser.add_argument("--kill-every", type=float, nargs=2, default=(0.5, 2.0), metavar=("MIN", "MAX"))
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    results = []
    with tempfile.TemporaryDirectory(prefix="interlock-chaos-") as tmp:
        for store in args.store:
            outcome = (sqlite_run if store == "sqlite" else postgres_run)(args, Path(tmp) / store)
            results.append(outcome.summary())
            print("\n".join(lines(outcome)), flush=True)
    print("\n| store | seconds | operations | created | answered | kills | restarts | losses | violations |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(
            f"| {r['store']} | {r['seconds']} | {r['operations']} | {r['created']} | {r['answered']} "
            f"| {r['kills']} | {r['restarts']} | {r['losses']} | {r['violations']} |"
        )
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    if any(r["losses"] or r["violations"] for r in results):
        sys.exit(1)


if __name__ == "__main__":
    main()
