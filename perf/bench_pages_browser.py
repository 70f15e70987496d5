"""Benchmark: each page's time to its first chart in Chromium, against a trivial page, at full scale.

    python perf/bench_pages_browser.py [--rounds 3] [--pages servers,gpus] [--against DIR] [--shots DIR]
                                       [--profile DIR]

Builds the full-scale workspace of ``perf/bench_pages.py --full`` in a temporary folder (83,288
regeneration records, 24 h x 8 GPUs of 1 Hz telemetry in the state store, a 1 GB server log, 50 benchmark
results, 3 training runs), starts the dashboard on it (``streamlit run app.py`` on 127.0.0.1, as
scripts/dashboard does, with the loopback token) and a trivial page (a title, a metric and one 300-point
plotly chart), and waits until the dashboard's start-up work is over (its CPU under 0.3 of a core over 10 s, for at
most 10 minutes).
Then Debian's Chromium (through playwright) opens every page and the trivial page, interleaved, ``--rounds``
times each: cold (a new browser profile: nothing cached) and warm (the same profile again), and the time
from the navigation's start to the page's answer on screen is taken in the page (``performance.now()`` when
the first plotly chart, or for a page whose answer is a table, progress bar or metric, that element, has a
size).  Printed per page: the median cold and warm times, each against the trivial page's (the median of
the trivial page measured beside it), and the server's time per script run: every script run of both
servers is timed around Streamlit's own call of the script (wall and CPU of the thread that runs it, the
frame included), and the median and the slowest full run of the page (its live fragments' runs apart)
are printed against the 500 ms budget.

``--against DIR``: a checkout of another version of the dashboard (``git archive REV | tar -x -C DIR``)
runs beside this one on its own copy of the workspace, measured in the same rounds: before and after
side by side, their order alternating (this version first in odd rounds, the other first in even rounds, so
neither always comes first, after the other's visit); ``--against-arg`` gives that server streamlit options
of its own (``--against . --against-arg=--runner.postScriptGC=false``: this version with another setting).
``--shots DIR``: a screenshot of each page at its first cold answer.
``--profile DIR``: after the rounds, one more cold visit of each page and of the trivial page with the
JavaScript profiler on (not counted in the times): its CPU profile up to the answer (a ``.cpuprofile`` file
DevTools opens), its heaviest functions printed.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from contextlib import ExitStack, contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

PAGES = ("overview", "servers", "regeneration", "training", "benchmarks", "processes", "gpus")
PLOT = ".js-plotly-plot .main-svg"
UPLOT = ".sd-chart[data-drawn] canvas, " + PLOT  # uPlot's line charts (ui/linechart.py), or plotly's in an older version
# what each page's answer is on screen: its first chart, or the element that is its answer at first sight
ANSWER = {
    "trivial": PLOT,
    "overview": "[data-testid='stProgress'], [data-testid='stMetric']",  # the tiles: progress and figures
    "servers": UPLOT,
    "regeneration": UPLOT,
    "training": UPLOT,
    "benchmarks": "[data-testid='stDataFrame']",  # the Runs table; the charts are in a tab behind it
    "processes": "[data-testid='stTable']",  # the table of managed processes
    "gpus": UPLOT,
}
BUDGET_MS = 500.0
FREEZE_ENV = "SPECDECK_PERF_GC_FREEZE"  # "1": the timed server calls gc.freeze() after its first script run
FIRST_ANSWER_JS = """(sel) => {
  for (const e of document.querySelectorAll(sel)) {
    const r = e.getBoundingClientRect();
    if (r.width > 0 && r.height > 0) return performance.now();
  }
  return false;
}"""

TRIVIAL = '''
import numpy as np
import plotly.graph_objects as go
import streamlit as st

st.title("Trivial")
st.metric("value", 42)
x = np.arange(300)
st.plotly_chart(go.Figure(go.Scatter(x=x, y=np.sin(x / 20.0))), key="chart")
'''


# -- the timed server: streamlit with every script run timed ------------------------------------


def serve_timed(log_path: str, tree: str, streamlit_argv: list[str]) -> None:
    """Run ``streamlit`` with ``streamlit_argv`` from ``tree``, appending one JSON line per script run to
    ``log_path``: when it ended, its wall and thread CPU seconds, the page (URL path) and whether it was a
    fragment's run."""
    os.chdir(tree)
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != REPO]
    import streamlit.runtime.scriptrunner.script_runner as script_runner
    from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

    real = script_runner.exec_func_with_error_handling
    lock = threading.Lock()
    # the fix measured beside the release by perf/soak.py --against-freeze: gc.freeze() once the first script
    # run is over, so the full collection Streamlit makes after every run skips what start-up allocated
    freeze = os.environ.get(FREEZE_ENV) == "1"
    frozen = threading.Event()
    out = open(log_path, "a", encoding="utf-8")  # noqa: SIM115 - open for the server's life

    def timed(*a, **k):
        t, c = time.perf_counter(), time.thread_time()
        try:
            return real(*a, **k)
        finally:
            wall, cpu = time.perf_counter() - t, time.thread_time() - c
            ctx = get_script_run_ctx()
            page, fragment = "", False
            if ctx is not None:
                fragment = bool(getattr(ctx, "fragment_ids_this_run", None))
                try:
                    info = ctx.pages_manager.get_pages().get(ctx.pages_manager.current_page_script_hash, {})
                    page = info.get("url_pathname", "") or ""
                except Exception:  # noqa: BLE001 - a name for the figures only
                    page = ""
            with lock:
                out.write(json.dumps({"t": time.time(), "wall": wall, "cpu": cpu, "page": page,
                                      "fragment": fragment}) + "\n")
                out.flush()
                if freeze and not frozen.is_set():
                    import gc

                    gc.freeze()
                    frozen.set()

    script_runner.exec_func_with_error_handling = timed
    if streamlit_argv[:2] == ["run", "app.py"] and (Path(tree) / "ui" / "launch.py").exists():
        sys.path.insert(0, tree)  # the dashboard as scripts/dashboard starts it (a tree that has the launcher)
        from ui.launch import main as launch

        launch(streamlit_argv[2:])
        return
    from streamlit.web import cli

    sys.argv = ["streamlit", *streamlit_argv]
    cli.main()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, name: str, proc: subprocess.Popen, url: str, token: str, log: Path, workspace: Path | None):
        self.name, self.proc, self.url, self.token, self.log, self.workspace = name, proc, url, token, log, workspace

    def page_url(self, page: str) -> str:
        path = "" if page in ("overview", "trivial") else page
        return f"{self.url}/{path}" + (f"?token={self.token}" if self.token else "")

    def runs(self, since: float = 0.0) -> list[dict]:
        out = []
        with open(self.log, encoding="utf-8") as f:
            for line in f:
                r = json.loads(line)
                if r["t"] >= since:
                    out.append(r)
        return out


@contextmanager
def start(name: str, tree: Path, script: str, home: Path, workspace: Path | None, timeout_s: float = 120.0,
          *, token: bool | None = None, args: tuple[str, ...] = (), env: dict[str, str] | None = None):
    """The timed server of ``script`` in ``tree`` on a free 127.0.0.1 port (the dashboard on ``workspace``,
    or on the demo workspace under ``home`` when None; with a fresh loopback token when ``token``, by default
    when a workspace is given); stopped (SIGTERM to its group, then SIGKILL after 15 s) at the end, with the
    workspace's managed processes."""
    home.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    token = secrets.token_urlsafe(24) if (workspace is not None if token is None else token) else ""
    env_extra = env
    env = dict(os.environ, SPECDECK_HOME=str(home), PYTHONUNBUFFERED="1")
    env.pop("SPECDECK_WORKSPACE", None)
    env.update(env_extra or {})
    if workspace is not None:
        env["SPECDECK_WORKSPACE"] = str(workspace)
    if token:
        env["SPECDECK_ACCESS_TOKEN"] = token
    log = home / "script-runs.jsonl"
    log.touch()
    out = open(home / "streamlit.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--serve-timed", str(log), "--tree", str(tree), "--",
         "run", script, "--server.address", "127.0.0.1", "--server.port", str(port), "--server.headless", "true",
         "--global.developmentMode", "false", "--browser.gatherUsageStats", "false", *args],
        cwd=tree, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    server = Server(name, proc, f"http://127.0.0.1:{port}", token, log, workspace)
    try:
        deadline = time.time() + timeout_s
        while True:
            try:
                with urllib.request.urlopen(server.url + "/_stcore/health", timeout=2) as r:
                    if r.read().strip() == b"ok":
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"{name} did not start: "
                                   + (home / "streamlit.log").read_text(errors="replace")[-2000:])
            time.sleep(0.5)
        yield server
    finally:
        from tests.e2e._dashboard import stop_group

        stop_group(proc)
        out.close()
        ws = workspace if workspace is not None else home / "demo"
        if (ws / "specdeck.toml").exists():
            subprocess.run([sys.executable, "-m", "backend.cli", "--workspace", str(ws), "processes",
                            "stop-all"], cwd=REPO, env=env, timeout=60, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=False)


def tree_cpu(pid: int) -> float:
    """CPU seconds of ``pid`` and its children so far."""
    import psutil

    total = 0.0
    try:
        procs = [psutil.Process(pid)]
        procs += procs[0].children(recursive=True)
    except psutil.NoSuchProcess:
        return 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def wait_quiet(servers: list[Server], *, below: float = 0.3, window_s: float = 10.0, limit_s: float = 600.0) -> float:
    """Wait until every server's process tree uses under ``below`` of a core over ``window_s``; seconds waited."""
    t0 = time.time()
    while time.time() - t0 < limit_s:
        before = [tree_cpu(s.proc.pid) for s in servers]
        time.sleep(window_s)
        used = [(tree_cpu(s.proc.pid) - b) / window_s for s, b in zip(servers, before)]
        if max(used) < below:
            break
    return time.time() - t0


# -- the browser ----------------------------------------------------------------------------------


def first_answer(context, url: str, selector: str, timeout_ms: float, shot: Path | None = None,
                 profile: Path | None = None) -> float | None:
    """Milliseconds from the navigation's start to the first element of ``selector`` with a size; None
    when none came within ``timeout_ms``.  ``profile``: the page's JavaScript CPU profile up to its answer is
    written there (Chrome's ``.cpuprofile``, which DevTools opens) and its heaviest functions printed."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page = context.new_page()
    cdp = None
    try:
        if profile is not None:
            cdp = context.new_cdp_session(page)
            cdp.send("Profiler.enable")
            cdp.send("Profiler.setSamplingInterval", {"interval": 200})
            cdp.send("Profiler.start")
        page.goto(url, wait_until="commit")
        try:
            handle = page.wait_for_function(FIRST_ANSWER_JS, arg=selector, polling="raf", timeout=timeout_ms)
        except PlaywrightTimeout:
            return None
        ms = float(handle.json_value())
        if cdp is not None:
            prof = cdp.send("Profiler.stop")["profile"]
            profile.write_text(json.dumps(prof))
            print(profile_summary(prof, profile.stem), flush=True)
        if shot is not None:
            page.screenshot(path=str(shot))
        return ms
    finally:
        page.close()


def profile_summary(prof: dict, title: str, top: int = 15) -> str:
    """The ``top`` functions of a CDP CPU profile by self time (ms), with the time of each script file."""
    nodes = {n["id"]: n for n in prof["nodes"]}
    gaps = prof.get("timeDeltas") or []
    self_us: dict[int, float] = {}
    for node_id, dt in zip(prof.get("samples") or [], gaps[1:] + [0]):
        self_us[node_id] = self_us.get(node_id, 0.0) + dt
    by_fn: dict[tuple[str, str], float] = {}
    by_file: dict[str, float] = {}
    for node_id, us in self_us.items():
        frame = nodes[node_id]["callFrame"]
        where = (frame.get("url") or "").rsplit("/", 1)[-1] or "(native)"
        fn = frame.get("functionName") or "(anonymous)"
        by_fn[(fn, where)] = by_fn.get((fn, where), 0.0) + us
        by_file[where] = by_file.get(where, 0.0) + us
    total = sum(self_us.values()) / 1000
    lines = [f"profile {title}: {total:,.0f} ms sampled; by file: "
             + ", ".join(f"{f} {us / 1000:,.0f}" for f, us in sorted(by_file.items(), key=lambda kv: -kv[1])[:8])]
    for (fn, where), us in sorted(by_fn.items(), key=lambda kv: -kv[1])[:top]:
        lines.append(f"  {us / 1000:8,.1f} ms  {fn}  ({where})")
    return "\n".join(lines)


def new_context(browser):
    return browser.new_context(viewport={"width": 1440, "height": 900})


def report(args, pages, dash, trivial, times, pairs, t_start: float, rounds: int) -> None:
    """The table of the rounds so far."""
    def med(xs: list[float | None]) -> float | None:
        got = [x for x in xs if x is not None]
        return statistics.median(got) if got else None

    def show(x: float | None) -> str:
        return "none" if x is None else f"{x:,.0f}"

    print(f"\ntime to the page's answer in Chromium, ms from navigation start, median of {rounds} "
          "(cold: new profile; warm: cached), against the trivial page measured beside it; server: the "
          "page's full script runs (frame included), median and max, wall ms")
    print(f"{'version':<9}{'page':<14}{'cold':>7}{'triv':>6}{'ratio':>7}{'warm':>7}{'triv':>6}{'ratio':>7}"
          f"{'server med':>11}{'max':>7}{'cpu med':>8}  budget 500 ms   answer")
    for page in pages:
        for name, s in dash.items():
            row = f"{name:<9}{page:<14}"
            for mode in ("cold", "warm"):
                m, b = med(times[(name, page, mode)]), med(pairs[(name, page, mode)])
                ratio = f"{m / b:.2f}x" if m is not None and b else "n/a"
                row += f"{show(m):>7}{show(b):>6}{ratio:>7}"
            runs = [x for x in s.runs(t_start) if x["page"] in ({"overview", ""} if page == "overview" else {page})
                    and not x["fragment"]]
            walls = [x["wall"] * 1000 for x in runs]
            cpus = [x["cpu"] * 1000 for x in runs]
            if walls:
                verdict = "under" if max(walls) < BUDGET_MS else ("median under" if statistics.median(walls)
                                                                 < BUDGET_MS else "OVER")
                row += (f"{statistics.median(walls):>11,.0f}{max(walls):>7,.0f}{statistics.median(cpus):>8,.0f}"
                        f"  {verdict:<14}")
            else:
                row += f"{'no runs':>26}  {'':<14}"
            missing = sum(x is None for x in times[(name, page, 'cold')] + times[(name, page, 'warm')])
            row += f" {ANSWER[page]}" + (f" ({missing} visits saw none in {args.timeout:.0f} s)" if missing else "")
            print(row, flush=True)
    triv = [x for x in trivial.runs(t_start) if not x["fragment"]]
    if triv:
        print(f"trivial page's script runs: median {statistics.median(x['wall'] for x in triv) * 1000:,.0f} ms")
    frag = {name: [x for x in s.runs(t_start) if x["fragment"]] for name, s in dash.items()}
    for name, xs in frag.items():
        if xs:
            print(f"{name}: {len(xs)} live fragment runs, median {statistics.median(x['wall'] for x in xs) * 1000:,.0f}"
                  f" ms, max {max(x['wall'] for x in xs) * 1000:,.0f} ms")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--serve-timed"]:
        sep = argv.index("--")
        serve_timed(argv[1], argv[argv.index("--tree") + 1], argv[sep + 1:])
        return 0
    sys.path.insert(0, str(REPO))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3, help="cold and warm visits of each page (median shown)")
    ap.add_argument("--pages", default=",".join(PAGES), help="the pages, by name, comma-separated")
    ap.add_argument("--against", type=Path, help="a checkout of another version, measured beside this one")
    ap.add_argument("--against-arg", action="append", default=[], metavar="ARG",
                    help="a streamlit option for the --against server only (--against-arg=--runner.postScriptGC=false; "
                         "with --against . the same code with another setting)")
    ap.add_argument("--shots", type=Path, help="save a screenshot of each page at its first cold answer here")
    ap.add_argument("--profile", type=Path, help="after the rounds, profile one more cold visit of each page: its JavaScript CPU "
                    "profile up to the answer in DIR/VERSION-PAGE.cpuprofile, its heaviest functions printed")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for a page's answer")
    ap.add_argument("--log-bytes", type=int, default=10**9, help="the server log's size")
    args = ap.parse_args(argv)
    pages = [p for p in args.pages.split(",") if p]
    if any(p not in PAGES for p in pages) or args.rounds < 1:
        ap.error(f"--pages: choose among {', '.join(PAGES)}; --rounds at least 1")
    if args.against is not None and not (args.against / "app.py").exists():
        ap.error(f"--against {args.against}: no app.py there")
    for folder in (args.shots, args.profile):
        if folder:
            folder.mkdir(parents=True, exist_ok=True)
    from perf.bench_pages import build_full_workspace

    trees = {"this": REPO} | ({"against": args.against.resolve()} if args.against else {})
    with tempfile.TemporaryDirectory(prefix="bench-pages-browser-") as tmp, ExitStack() as stack:
        t = time.perf_counter()
        spaces = {name: build_full_workspace(Path(tmp) / name / "ws", log_bytes=args.log_bytes) for name in trees}
        print(f"full-scale workspace{'s' if len(spaces) > 1 else ''} built in {time.perf_counter() - t:.0f} s: "
              "50 benchmark results, 83,288 regeneration records, 24 h x 8 GPUs of 1 Hz telemetry, "
              f"a {args.log_bytes / 1e9:.2f} GB server log, 3 training runs", flush=True)
        (Path(tmp) / "trivial.py").write_text(TRIVIAL)
        trivial = stack.enter_context(start("trivial", Path(tmp), "trivial.py", Path(tmp) / "trivial-home", None))
        dash = {name: stack.enter_context(start(name, tree, "app.py", Path(tmp) / name / "home", spaces[name],
                                                args=tuple(args.against_arg) if name == "against" else ()))
                for name, tree in trees.items()}
        from tests.e2e._dashboard import _first_run

        t = time.perf_counter()
        for s in dash.values():
            _first_run(int(s.url.rsplit(":", 1)[1]), s.token, timeout_s=300.0)
        print(f"dashboards' first runs done in {time.perf_counter() - t:.0f} s", flush=True)
        cpu0 = {name: tree_cpu(s.proc.pid) for name, s in dash.items()}
        waited = wait_quiet(list(dash.values()))
        print("start-up work (the monitor reading the server log, the sampler, the followers) over after "
              f"{waited:.0f} s more: " + ", ".join(f"{name} {tree_cpu(s.proc.pid) - cpu0[name]:.0f} CPU s"
                                                  for name, s in dash.items()), flush=True)

        from playwright.sync_api import sync_playwright

        times: dict[tuple[str, str, str], list[float | None]] = {}  # (server, page, cold|warm) -> ms
        pairs: dict[tuple[str, str, str], list[float | None]] = {}  # the trivial page's time beside each
        t_start = time.time()
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                         args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                                               "--disable-component-update", "--no-first-run"])
            try:
                warm = new_context(browser)
                for s in [trivial, *dash.values()]:  # the warm profile has visited each server once
                    page = "trivial" if s is trivial else pages[0]
                    first_answer(warm, s.page_url(page), ANSWER[page], args.timeout * 1000)
                if len(dash) > 1:
                    print("the versions' order alternates: this first in odd rounds, against first in even "
                          "rounds", flush=True)
                for r in range(args.rounds):
                    order = list(dash.items()) if r % 2 == 0 else list(reversed(dash.items()))
                    for page in pages:
                        for mode in ("cold", "warm"):
                            for name, s in order:
                                ctx = new_context(browser) if mode == "cold" else warm
                                shot = (args.shots / f"{name}-{page}.png" if args.shots and r == 0
                                        and mode == "cold" else None)
                                ms = first_answer(ctx, s.page_url(page), ANSWER[page], args.timeout * 1000, shot)
                                if mode == "cold":
                                    ctx.close()
                                ctx = new_context(browser) if mode == "cold" else warm
                                base = first_answer(ctx, trivial.page_url("trivial"), ANSWER["trivial"],
                                                    args.timeout * 1000)
                                if mode == "cold":
                                    ctx.close()
                                times.setdefault((name, page, mode), []).append(ms)
                                pairs.setdefault((name, page, mode), []).append(base)
                                print(f"  round {r + 1} {name} {page} {mode}: {'none' if ms is None else f'{ms:,.0f}'}"
                                      f" ms, trivial {'none' if base is None else f'{base:,.0f}'} ms", flush=True)
                    print(f"round {r + 1} of {args.rounds} done", flush=True)
                    report(args, pages, dash, trivial, times, pairs, t_start, r + 1)
                if args.profile:  # a visit of its own, after the rounds: the profiler slows the page it watches
                    for page in ["trivial", *pages]:
                        for name, s in ({"trivial": trivial}.items() if page == "trivial" else dash.items()):
                            ctx = new_context(browser)
                            first_answer(ctx, s.page_url(page), ANSWER[page], args.timeout * 1000,
                                         profile=args.profile / f"{name}-{page}.cpuprofile")
                            ctx.close()
            finally:
                browser.close()

    return 0


if __name__ == "__main__":
    raise SystemExit(main())
