"""Benchmark: the CPU a page load of the dashboard costs Chromium, Debian's headless shell against the full
Chromium in its headless mode, as the browser tests drive them.

    python perf/bench_chromium.py [--rounds 3] [--loads 2] [--exe PATH --exe PATH]

Starts the demo dashboard the browser tests start (``tests/e2e/_dashboard.serve``, warmed), then, for each
round and each executable (their order alternating between rounds, so neither always goes first), launches
that Chromium through playwright with the tests' switches and opens each page ``--loads`` times, each load
in a fresh browser context as ``tests/e2e/_dashboard.browser`` does, waiting until the app is connected and
its script run is over.  The CPU of the browser's processes (playwright's driver and Chromium's, their ended
children included) is taken from the start of the launch to the browser's close; the dashboard's own CPU is
not counted.  Printed per round: each executable's CPU seconds and wall seconds, and the ratio of the two
executables' CPU; at the end, the median ratio.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.e2e import chromium  # noqa: E402
from tests.e2e._dashboard import DEMO_ENV, serve, settle  # noqa: E402

PAGES = ("", "servers", "regeneration", "training", "benchmarks", "processes", "gpus")
BROWSER_NAMES = ("chrom", "node", "headless")  # Chromium's processes and playwright's driver


def browser_cpu(root) -> float:
    """CPU seconds of ``root``'s browser processes (by name), their reaped children included."""
    import psutil

    total = 0.0
    for proc in root.children(recursive=True):
        try:
            if not any(k in proc.name() for k in BROWSER_NAMES):
                continue
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:  # ended between the listing and the reading
            continue
    return total


def loads(pw, exe: str, url, n: int) -> tuple[float, float]:
    """(CPU s, wall s) of launching ``exe``, ``n`` loads of every page, and closing it."""
    import psutil

    me = psutil.Process()
    cpu0, t0 = browser_cpu(me), time.monotonic()  # playwright's driver so far (it serves every launch)
    browser = pw.chromium.launch(executable_path=exe, headless=True, args=chromium.ARGS)
    try:
        for _ in range(n):
            for name in PAGES:
                context = browser.new_context(viewport={"width": 1600, "height": 1200})
                try:
                    page = context.new_page()
                    page.goto(url.page("/" + name))
                    page.wait_for_selector("[data-testid='stApp'][data-test-connection-state='CONNECTED']",
                                           timeout=60_000)
                    settle(page)
                finally:
                    context.close()
    finally:
        browser.close()
    # the driver has reaped the ended Chromium: its children's times hold all of Chromium's processes
    return browser_cpu(me) - cpu0, time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--loads", type=int, default=2, help="loads of every page per round and executable")
    ap.add_argument("--exe", action="append", help="a Chromium executable (give two; default: the headless "
                    "shell and the full Chromium)")
    args = ap.parse_args(argv)
    exes = args.exe or [str(chromium.HEADLESS_SHELL), str(chromium.FULL)]
    if len(exes) != 2 or not all(Path(e).exists() for e in exes):
        ap.error(f"two installed executables are needed, got {exes}")
    from playwright.sync_api import sync_playwright

    ratios = []
    with serve(Path(tempfile.mkdtemp(prefix="bench-chromium-")), DEMO_ENV) as url, sync_playwright() as pw:
        for r in range(args.rounds):
            order = exes if r % 2 == 0 else exes[::-1]
            got = {exe: loads(pw, exe, url, args.loads) for exe in order}
            (a_cpu, a_wall), (b_cpu, b_wall) = got[exes[0]], got[exes[1]]
            ratios.append(a_cpu / b_cpu)
            print(f"round {r + 1}: {exes[0]} {a_cpu:.1f} CPU-s in {a_wall:.1f} s; {exes[1]} {b_cpu:.1f} CPU-s in "
                  f"{b_wall:.1f} s; CPU ratio {ratios[-1]:.2f}", flush=True)
    print(f"{args.loads * len(PAGES)} page loads per executable and round; median CPU ratio "
          f"{exes[0]} / {exes[1]}: {statistics.median(ratios):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
