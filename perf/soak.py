"""Soak: what open tabs cost the dashboard, against a trivial live Streamlit page, side by side.

    python perf/soak.py [--minutes 10] [--interval 5] [--pages servers,regeneration,gpus] [--against DIR]

Starts the demo dashboard (``streamlit run app.py`` with no workspace chosen, as ``scripts/dashboard``
does, with the environment it sets, on 127.0.0.1 with the loopback token) and a trivial live page (a 1 s fragment that draws a metric and
a 300-point plotly chart), opens three tabs on each in Debian's Chromium (the dashboard's Servers,
Regeneration and GPUs pages; the trivial page three times) and leaves them open for ``--minutes``
(before, ``--idle`` seconds with no tab open measure each server's own background work).  Every
``--interval`` seconds it samples each server's CPU (cores, over the interval) and resident memory: the
Streamlit process itself, and its whole process tree (for the dashboard that includes the demo's managed
processes: its simulated servers and jobs, which run whether a tab is open or not).  It prints, per
server: the mean CPU, the resident memory at the start and the end and its slope (MB/min, least squares
over the samples after the first minute), the script runs per minute the tabs caused (full runs and live
fragments, with their median time) and the ratios to the trivial page.

``--against DIR``: a checkout of another version (``git archive REV | tar -x -C DIR``) runs beside this
one with its own demo workspace and its own three tabs, sampled the same way: before and after in one run;
``--against-arg`` gives it streamlit options of its own (``--against . --against-arg=--runner.postScriptGC=false``:
this version with another setting); ``--against-freeze``: it calls ``gc.freeze()`` after its first script
run (how much of the tabs' cost is Streamlit's full garbage collection after every run, over the objects
the dashboard's start-up allocated).
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

TRIVIAL_LIVE = '''
import time

import numpy as np
import plotly.graph_objects as go
import streamlit as st

st.title("Trivial live page")


@st.fragment(run_every=1)
def live():
    t = time.time()
    st.metric("value", f"{np.sin(t / 10):.3f}")
    x = np.arange(300)
    st.plotly_chart(go.Figure(go.Scatter(x=x, y=np.sin((x + t) / 20.0))), key="chart")


live()
'''
# the demo dashboard's environment as the browser tests start it: its simulated servers reach RUNNING at
# once (only the start-up sequence's pauses are scaled; their decode speed and logs are as they are)
DEMO_ENV = {"SPECDECK_SIM_SPEED": "50"}


def sample(pid: int) -> tuple[float, float, float, float]:
    """(CPU seconds of the process, of its tree; RSS MB of the process, of its tree)."""
    import psutil

    try:
        root = psutil.Process(pid)
        kids = root.children(recursive=True)
    except psutil.NoSuchProcess:
        return 0.0, 0.0, 0.0, 0.0
    own_cpu = own_rss = tree_cpu = tree_rss = 0.0
    for p in [root, *kids]:
        try:
            with p.oneshot():
                t = p.cpu_times()
                cpu = t.user + t.system
                rss = p.memory_info().rss / 1e6
        except psutil.NoSuchProcess:
            continue
        tree_cpu += cpu
        tree_rss += rss
        if p.pid == pid:
            own_cpu, own_rss = cpu, rss
    return own_cpu, tree_cpu, own_rss, tree_rss


def slope(ts: list[float], ys: list[float]) -> float:
    """Least-squares slope of ``ys`` against ``ts`` (per second); 0 for fewer than two points."""
    if len(ts) < 2:
        return 0.0
    mt, my = statistics.fmean(ts), statistics.fmean(ys)
    den = sum((t - mt) ** 2 for t in ts)
    return sum((t - mt) * (y - my) for t, y in zip(ts, ys)) / den if den else 0.0


def _script_env(tree: Path) -> dict[str, str]:
    """What the tree's scripts/dashboard sets in the environment of the process it starts (a malloc arena
    limit, read by glibc at the start; see ui.context.limit_malloc_arenas), so each version is started as
    its own script starts it."""
    import os

    script = tree / "scripts" / "dashboard"
    if os.environ.get("MALLOC_ARENA_MAX") or not script.is_file():
        return {}
    if "SPECDECK_MALLOC_ARENA_MAX_SET" not in script.read_text(encoding="utf-8"):
        return {}
    return {"MALLOC_ARENA_MAX": "2", "SPECDECK_MALLOC_ARENA_MAX_SET": "1"}


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(REPO))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=10.0, help="how long the tabs stay open")
    ap.add_argument("--interval", type=float, default=5.0, help="seconds between samples")
    ap.add_argument("--pages", default="servers,regeneration,gpus", help="the dashboard's pages to keep open")
    ap.add_argument("--against", type=Path, help="a checkout of another version, soaked beside this one")
    ap.add_argument("--against-arg", action="append", default=[], metavar="ARG",
                    help="a streamlit option for the --against server only (--against . "
                         "--against-arg=--runner.postScriptGC=false: this version with another setting)")
    ap.add_argument("--against-freeze", action="store_true",
                    help="the --against server calls gc.freeze() after its first script run (a fix measured "
                         "beside the release: Streamlit's full collection after every run then skips start-up's "
                         "objects)")
    ap.add_argument("--settle", type=float, default=60.0, help="seconds after the tabs open before sampling")
    ap.add_argument("--idle", type=float, default=60.0,
                    help="seconds sampled before any tab opens: what each server costs with no tab")
    args = ap.parse_args(argv)
    if args.minutes <= 0 or args.interval <= 0:
        ap.error("--minutes and --interval must be positive")
    if args.against is not None and not (args.against / "app.py").exists():
        ap.error(f"--against {args.against}: no app.py there")
    pages = [p for p in args.pages.split(",") if p]
    # a SIGTERM (timeout, kill) ends the soak as Ctrl-C does: the servers and their demo processes are stopped
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    from perf.bench_pages_browser import FREEZE_ENV, start
    from tests.e2e._dashboard import _first_run

    trees = {"this": REPO} | ({"against": args.against.resolve()} if args.against else {})
    with tempfile.TemporaryDirectory(prefix="soak-") as tmp, ExitStack() as stack:
        import os

        for k, v in DEMO_ENV.items():
            os.environ.setdefault(k, v)
        (Path(tmp) / "trivial.py").write_text(TRIVIAL_LIVE)
        servers = {"trivial": stack.enter_context(start("trivial", Path(tmp), "trivial.py", Path(tmp) / "trivial",
                                                        None))}
        for name, tree in trees.items():
            home = Path(tmp) / name
            # no workspace: the demo one, created under SPECDECK_HOME as scripts/dashboard does it
            env = _script_env(tree) | ({FREEZE_ENV: "1"} if name == "against" and args.against_freeze else {})
            s = stack.enter_context(start(name, tree, "app.py", home, None, token=True,
                                          args=tuple(args.against_arg) if name == "against" else (), env=env))
            _first_run(int(s.url.rsplit(":", 1)[1]), s.token, timeout_s=300.0)
            servers[name] = s
        # with no tab open: the servers' own background work (the dashboard's sampler, monitors, supervisor)
        time.sleep(min(args.idle, 15.0))
        i0 = {n: sample(s.proc.pid) for n, s in servers.items()}
        ti = time.time()
        time.sleep(args.idle)
        idle = {n: (sample(s.proc.pid)[0] - i0[n][0]) / (time.time() - ti) for n, s in servers.items()}
        print("no tab open, " + f"{args.idle:.0f} s: " + ", ".join(f"{n} {c:.2f} core" for n, c in idle.items()),
              flush=True)
        from playwright.sync_api import sync_playwright

        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                         args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                                               "--disable-component-update", "--no-first-run",
                                               "--disable-background-timer-throttling",
                                               "--disable-renderer-backgrounding",
                                               "--disable-backgrounding-occluded-windows"])
            try:
                tabs = []
                for name, s in servers.items():
                    ctx = browser.new_context(viewport={"width": 1440, "height": 900})
                    for page in (["trivial"] * 3 if name == "trivial" else pages):
                        tab = ctx.new_page()
                        tab.goto(s.page_url(page), wait_until="domcontentloaded")
                        tabs.append(tab)
                print(f"{len(tabs)} tabs open: {', '.join(pages)} on "
                      f"{' and '.join(n for n in servers if n != 'trivial')}, the trivial live page x3; "
                      f"settling {args.settle:.0f} s, then sampling every {args.interval:.0f} s for "
                      f"{args.minutes:g} min", flush=True)
                tabs[0].wait_for_timeout(args.settle * 1000)
                t0 = time.time()
                first = {n: sample(s.proc.pid) for n, s in servers.items()}
                rows: dict[str, list[tuple[float, float, float, float, float]]] = {n: [] for n in servers}
                prev = dict(first)
                prev_t = t0
                next_print = t0 + 60
                while time.time() - t0 < args.minutes * 60:
                    tabs[0].wait_for_timeout(args.interval * 1000)  # lets playwright take the tabs' events
                    now = time.time()
                    for n, s in servers.items():
                        cur = sample(s.proc.pid)
                        dt = now - prev_t
                        rows[n].append((now - t0, (cur[0] - prev[n][0]) / dt, (cur[1] - prev[n][1]) / dt,
                                        cur[2], cur[3]))
                        prev[n] = cur
                    prev_t = now
                    if now >= next_print:
                        next_print += 60
                        print(f"{(now - t0) / 60:5.1f} min  " + "  ".join(
                            f"{n}: {rows[n][-1][1]:.2f} core, {rows[n][-1][3]:.0f} MB" for n in servers), flush=True)
                t1 = time.time()
                last = {n: sample(s.proc.pid) for n, s in servers.items()}
            finally:
                browser.close()

        minutes = (t1 - t0) / 60
        print(f"\n{minutes:.1f} min with the tabs open, sampled every {args.interval:g} s "
              f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs at the end)")
        print(f"{'server':<9}{'what':<9}{'CPU mean':>9}{'p90':>6}{'RSS start':>10}{'end':>7}{'slope':>12}"
              f"{'runs/min':>9}{'frag/min':>9}{'frag ms':>8}")
        summary = {}
        for n, s in servers.items():
            got = rows[n]
            runs = [r for r in s.runs(t0) if r["t"] <= t1]
            full = [r for r in runs if not r["fragment"]]
            frag = [r for r in runs if r["fragment"]]
            for what, ci, ri, cpu_total in (("process", 1, 3, last[n][0] - first[n][0]),
                                            ("tree", 2, 4, last[n][1] - first[n][1])):
                if what == "tree" and n == "trivial":
                    continue
                cpus = sorted(r[ci] for r in got)
                late = [(r[0], r[ri]) for r in got if r[0] >= 60] or [(r[0], r[ri]) for r in got]
                mb_min = slope([t for t, _ in late], [m for _, m in late]) * 60
                mean = cpu_total / (t1 - t0)
                summary[(n, what)] = (mean, mb_min)
                print(f"{n:<9}{what:<9}{mean:>9.2f}{cpus[int(0.9 * (len(cpus) - 1))]:>6.2f}"
                      f"{got[0][ri]:>10.0f}{got[-1][ri]:>7.0f}{mb_min:>+9.2f} MB/min"
                      f"{len(full) / minutes:>9.1f}{len(frag) / minutes:>9.1f}"
                      f"{(statistics.median(r['wall'] for r in frag) * 1000 if frag else 0):>8.0f}")
        print("script runs by page (full runs and live fragments): runs/min, median wall ms, script CPU "
              "(cores) they took")
        for n, s in servers.items():
            runs = [r for r in s.runs(t0) if r["t"] <= t1]
            for page in sorted({r["page"] for r in runs}):
                mine = [r for r in runs if r["page"] == page]
                cpu = sum(r["cpu"] for r in mine) / (t1 - t0)
                print(f"  {n:<9}{page or '(main)':<14}{len(mine) / minutes:>7.1f}/min"
                      f"{statistics.median(r['wall'] for r in mine) * 1000:>8.0f} ms{cpu:>7.3f} core")
        base_cpu, base_slope = summary[("trivial", "process")]
        for n in trees:
            cpu, mb = summary[(n, "process")]
            print(f"{n}: dashboard process CPU {cpu:.2f} core = {cpu / base_cpu:.2f}x the trivial live page's "
                  f"{base_cpu:.2f} (goal: at most 1.3x); memory {mb:+.2f} MB/min against {base_slope:+.2f}")
            added, base_added = cpu - idle[n], base_cpu - idle["trivial"]
            print(f"{n}: what the tabs added over no tab: {added:.2f} core against the trivial page's {base_added:.2f}"
                  + (f" ({added / base_added:.2f}x)" if base_added > 0 else "")
                  + f"; with no tab the dashboard used {idle[n]:.2f} core")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
