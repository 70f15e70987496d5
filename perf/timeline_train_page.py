"""Timeline of a cold first visit to the Training page, in Chromium: where the seconds to the loss curve go.

    .venv/bin/python perf/timeline_train_page.py [--steps 10000] [--rounds 1] [--settle 15] [--tree DIR ...]

For each round and each ``--tree`` (a checkout of Specdeck; this one by default; several are run interleaved,
for an A/B), the run of ``perf/bench_train_vs_tensorboard.py`` (``--steps`` steps, built once under
/tmp/specdeck-train-vs-tb) is served cold by that checkout's dashboard (``python -m ui.launch``), and
``--settle`` seconds after it answers a new Chromium (a fresh profile: nothing cached) opens its Training page
at 1440 x 3000.  The page is polled every 30 ms; printed, in seconds from the navigation's start:

* each change of the app's script state (``running``, ``notRunning``: one pair per script run), the count of
  charts in the page (uPlot's, ui/linechart.py, or plotly's in an older checkout) and of those with a drawn
  line, and whether charts are still to come (a place that says "drawing…", in an older checkout);
* each websocket message of the server over 10 KB (a chart's data), and when Streamlit's plotly chunk and the
  other code chunks were fetched;
* then a summary: script runs before the charts, when the plotly chunk came (n/a: not asked for), when every
  chart had its line,
  the whole loss curve, and the server's CPU seconds from the navigation to the whole curve.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from perf import bench_train_vs_tensorboard as tb  # noqa: E402  (the run, its server, the loss curve's probe)

POLL_S = 0.03
STATE_JS = """() => {
  const g = [...document.querySelectorAll('.js-plotly-plot')];
  const u = [...document.querySelectorAll('.sd-chart')];  // uPlot (ui/linechart.js)
  const app = document.querySelector("[data-testid='stApp']");
  return [app ? app.getAttribute('data-test-script-state') : null, g.length + u.length,
          g.filter(x => x.querySelector('.scatterlayer .trace path.js-line')).length +
          u.filter(x => x.dataset.drawn).length,
          document.body.innerText.includes('drawing…')];
}"""


def visit(tree: Path, base: Path, steps: int, settle: float, pw) -> dict:
    run = tb.copy_run(base, Path(tempfile.mkdtemp(prefix="timeline-", dir=tb.ROOT)))
    events: list[tuple[float, str]] = []
    out: dict = {"tree": str(tree)}
    with tb.serve("specdeck", run, None, tree) as (proc, url):
        time.sleep(settle)
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                     args=["--no-sandbox", "--disable-dev-shm-usage"])
        try:
            page = browser.new_context(viewport={"width": 1440, "height": 3000}).new_page()
            t0 = time.monotonic()

            def at() -> float:
                return time.monotonic() - t0

            def socket(ws) -> None:
                ws.on("framereceived", lambda f: events.append((at(), f"server message {len(f) / 1024:.0f} KB"))
                      if len(f) > 10_240 else None)

            page.on("websocket", socket)
            page.on("response", lambda r: events.append((at(), "plotly chunk fetched")) if "/PlotlyChart." in r.url
                    else None)
            cpu0 = tb.tree_cpu(proc.pid)
            page.goto(url, wait_until="commit")
            seen, runs, whole, charts = None, 0, None, None
            deadline = t0 + tb.LOAD_TIMEOUT_S
            while time.monotonic() < deadline:
                state, plots, drawn, pending = page.evaluate(STATE_JS)
                now = (state, plots, drawn, pending)
                if now != seen:
                    events.append((at(), f"script {state}; {plots} charts, {drawn} with a line"
                                         + ("; more to come" if pending else "")))
                    runs += state == "running" and (seen is None or seen[0] != "running")
                    seen = now
                if charts is None and plots and drawn == plots and not pending:
                    charts = at()
                if whole is None:
                    last = page.evaluate(tb.SPECDECK_JS)
                    if last is not None and last >= steps:
                        whole = at()
                if whole is not None and charts is not None:
                    break
                time.sleep(POLL_S)
            cpu = tb.tree_cpu(proc.pid) - cpu0
        finally:
            browser.close()
    chunk = next((t for t, e in events if e == "plotly chunk fetched"), None)
    out.update(events=sorted(events), runs=runs, chunk_s=chunk, charts_s=charts, whole_s=whole, cpu_s=cpu)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--settle", type=float, default=15.0,
                    help="seconds between the dashboard's first answer and the visit (its start-up work done)")
    ap.add_argument("--tree", type=Path, action="append", help="a checkout of Specdeck (repeat for an A/B)")
    a = ap.parse_args()
    trees = [t.resolve() for t in (a.tree or [REPO])]
    from playwright.sync_api import sync_playwright

    base = tb.build(a.steps)
    results: dict[Path, list[dict]] = {t: [] for t in trees}
    with sync_playwright() as pw:
        for rnd in range(a.rounds):
            for tree in (trees if rnd % 2 == 0 else trees[::-1]):
                r = visit(tree, base, a.steps, a.settle, pw)
                results[tree].append(r)
                print(f"\n{tree} round {rnd + 1}: {a.steps:,} steps")
                for t, e in r["events"]:
                    print(f"  {t:6.2f} s  {e}")
                print(f"  script runs {r['runs']}, plotly chunk at {fmt(r['chunk_s'])} s, every chart drawn at "
                      f"{fmt(r['charts_s'])} s, whole loss curve at {fmt(r['whole_s'])} s, server CPU "
                      f"{r['cpu_s']:.2f} s", flush=True)
    if a.rounds > 1 or len(trees) > 1:
        print("\nmedians:")
        for tree, rs in results.items():
            med = {k: statistics.median([r[k] for r in rs if r[k] is not None] or [float("nan")])
                   for k in ("runs", "chunk_s", "charts_s", "whole_s", "cpu_s")}
            print(f"  {tree}: script runs {med['runs']:g}, plotly chunk {med['chunk_s']:.2f} s, every chart "
                  f"{med['charts_s']:.2f} s, whole loss curve {med['whole_s']:.2f} s, server CPU {med['cpu_s']:.2f} s")


def fmt(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.2f}"


if __name__ == "__main__":
    main()
