"""Shared helpers for the interlock benchmarks (timing, tables, environment)."""

from __future__ import annotations

import contextlib
import gc
import importlib.metadata
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

perf = time.perf_counter


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs)


def version_of(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def environment(dists: Sequence[str]) -> str:
    """One block describing the machine and the package versions."""
    lines = [
        f"python   {sys.version.split()[0]} ({platform.python_implementation()}) {sys.executable}",
        f"machine  {platform.machine()} {platform.system()} {platform.release()}, "
        f"{os.cpu_count()} cpu(s), cpu: {_cpu_model()}",
    ]
    try:
        import sqlite3

        lines.append(f"sqlite   {sqlite3.sqlite_version}")
    except ImportError:  # pragma: no cover
        pass
    lines.append("packages " + ", ".join(f"{d} {version_of(d)}" for d in dists))
    lines.append(f"checkout {_revision()}")
    return "\n".join(lines)


def _revision() -> str:
    """The interlock commit measured (and whether the work tree had changes)."""
    import subprocess

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        rev = subprocess.run(
            ["git", "-C", repo, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", repo, "status", "--porcelain", "--", "src"], capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{rev or 'unknown'}{' + uncommitted changes in src/' if dirty else ''}"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain Markdown table (pipes), so it can be pasted into docs as is."""
    cells = [[str(h) for h in headers]] + [[_fmt(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(r: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |"

    out = [line(cells[0]), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(r) for r in cells[1:]]
    return "\n".join(out)


def _fmt(c: Any) -> str:
    if isinstance(c, float):
        if c >= 1000:
            return f"{c:,.0f}"
        if c >= 100:
            return f"{c:.1f}"
        return f"{c:.2f}"
    if isinstance(c, int):
        return f"{c:,}"
    return str(c)


def rounds(names: Sequence[str], reps: int) -> list[list[str]]:
    """Rotate the order of contenders between repetitions, so slow drift
    (thermal, page cache, a noisy neighbour) does not favour one of them."""
    n = len(names)
    return [[names[(i + r) % n] for i in range(n)] for r in range(reps)]


def paired(a: Sequence[float], b: Sequence[float]) -> float:
    """Median of the per-round ratios a[i] / b[i]: samples taken in the same round
    are close in time, so this ratio shrugs off load that comes and goes (other
    processes on a 2-core box) better than a ratio of two medians."""
    return median([x / y for x, y in zip(a, b, strict=True)])


def collect() -> None:
    gc.collect()
    gc.collect()


@contextlib.contextmanager
def full_collections() -> Iterator[list[int]]:
    """Count the garbage collector's full collections (of its oldest generation) in the
    block: `with full_collections() as counted: ...`, then `counted[0]`. Each one walks
    every object the process tracks, tens of milliseconds in a process of this size."""
    counted = [0]

    def note(phase: str, info: dict[str, Any]) -> None:
        if phase == "stop" and info["generation"] == 2:
            counted[0] += 1

    gc.callbacks.append(note)
    try:
        yield counted
    finally:
        gc.callbacks.remove(note)


def rss_kb() -> int:
    """Resident set size of this process in KiB (Linux)."""
    with open("/proc/self/statm", encoding="ascii") as fh:
        pages = int(fh.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") // 1024


def verdict(ok: bool) -> str:
    return "MET" if ok else "MISSED"


def timed(fn: Callable[[], Any]) -> float:
    t0 = perf()
    fn()
    return perf() - t0
