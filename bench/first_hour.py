"""The first hour, timed: from a fresh clone to the first question answered in the browser.

Each run does what the README tells a newcomer, in a new temporary folder:

1. `git clone` this repository (its committed HEAD);
2. the README's main command: `python3 -m venv .venv && .venv/bin/pip install -e '.[server]'`,
   then `.venv/bin/interlock serve`, up to the sign-in link it prints;
3. a browser (headless Chromium, driven by Playwright) opens the link and presses Sign in;
4. a second process runs `.venv/bin/interlock ask "Ship it?" --confirm`;
5. the question appears in the browser (live), the browser answers Yes, and the ask exits 0.

It prints the time of each step and the total, per run, and the median over runs.
Run it from the test venv (it has Playwright), with Debian's chromium installed:

    .venv/bin/python bench/first_hour.py [--runs 3] [--keep]

pip installs from whatever index it is configured with; its time depends on that (a warm
cache or a local index is the "this machine kind" case).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
STEPS = ("clone", "install", "serve", "sign in", "ask shown", "answered")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def one_run(browser: object, keep: bool) -> dict[str, float]:
    folder = Path(tempfile.mkdtemp(prefix="interlock-first-hour-"))
    clone = folder / "interlock"
    env = {k: v for k, v in os.environ.items() if k not in ("INTERLOCK_URL", "INTERLOCK_TOKEN", "VIRTUAL_ENV")}
    times: dict[str, float] = {}
    serving: subprocess.Popen[str] | None = None
    mark = start = time.perf_counter()

    def step(name: str) -> None:
        nonlocal mark
        now = time.perf_counter()
        times[name] = now - mark
        mark = now

    try:
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True, env=env)
        step("clone")
        subprocess.run(
            "python3 -m venv .venv && .venv/bin/pip install --quiet -e '.[server]'",
            shell=True,
            check=True,
            cwd=clone,
            env=env,
        )
        step("install")
        port = free_port()
        # In a terminal, as a newcomer runs it (`script` gives it one): the sign-in link is
        # printed only there.
        serving = subprocess.Popen(
            ["script", "--quiet", "--return", "--command", f".venv/bin/interlock serve --port {port}", "/dev/null"],
            cwd=clone,
            env={**env, "NO_COLOR": "1"},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # script's own words as it is stopped; the server's come through stdout
            text=True,
        )
        assert serving.stdout is not None
        link = ""
        while not link:
            line = serving.stdout.readline()
            if not line:
                raise RuntimeError("interlock serve ended without printing a sign-in link")
            found = re.search(r"(http://\S+/signin/link\?code=\S+)", line)
            link = found.group(1) if found else ""
        step("serve")

        context = browser.new_context()  # type: ignore[attr-defined]
        page = context.new_page()
        page.goto(link)
        page.get_by_role("button", name="Sign in").click()
        expect(page.locator("body")).to_have_attribute("data-live", "open", timeout=30_000)
        step("sign in")

        asking = subprocess.Popen(
            [".venv/bin/interlock", "ask", "Ship it?", "--confirm"],
            cwd=clone,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        card = page.locator("#pending > li", has_text="Ship it?")
        expect(card).to_be_visible(timeout=30_000)
        step("ask shown")
        card.get_by_label("Yes").check()
        card.get_by_role("button", name="Send answer").click()
        out, err = asking.communicate(timeout=60)
        if asking.returncode != 0 or out.strip() != "true":
            raise RuntimeError(f"interlock ask ended with {asking.returncode}: {out!r} {err!r}")
        step("answered")
        context.close()
        times["total"] = time.perf_counter() - start
        return times
    finally:
        if serving is not None:
            serving.terminate()
            serving.communicate(timeout=20)
        if keep:
            print(f"  kept {folder}", file=sys.stderr)
        else:
            shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="keep each run's folder")
    args = parser.parse_args()
    results = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"])
        try:
            for n in range(1, args.runs + 1):
                times = one_run(browser, args.keep)
                results.append(times)
                parts = "  ".join(f"{name} {times[name]:.2f}s" for name in STEPS)
                print(f"run {n}: {parts}  total {times['total']:.2f}s", flush=True)
        finally:
            browser.close()
    print(
        "median: "
        + "  ".join(f"{name} {statistics.median(r[name] for r in results):.2f}s" for name in (*STEPS, "total"))
    )


if __name__ == "__main__":
    main()
