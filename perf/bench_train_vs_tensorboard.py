"""Benchmark: the Training page's curves against TensorBoard's on the same run, in Chromium.

    .venv/bin/python perf/bench_train_vs_tensorboard.py [--steps 10000,100000] [--repeats 3] [--idle-s 20]
                                                       [--append 1000] [--tb-venv /tmp/specdeck-tb-venv]
                                                       [--settle 0]

For each ``--steps`` it builds one run twice over (under /tmp/specdeck-train-vs-tb, kept between calls):
SpecForge Gen-2's console log (a tqdm redraw per step at 1 s/it with loss, acc, acceptance_rate, time and
grad_norm; ``Eval - Step`` lines with acc_i for 7 TTT positions every 50 steps) as the log of a ``[[train]]``
run of a workspace, and TensorBoard event files with the same scalars at the same steps and wall times
(``train/loss`` …, written with tensorboardX).  TensorBoard 2.21 runs from its own virtual environment
(``--tb-venv``, made with ``pip install tensorboard==2.21.*`` when missing; nothing of Specdeck needs it).

Each repeat, for each server in turn (the order alternates between repeats; each its own copy of the run):
the server starts cold on 127.0.0.1 (``python -m ui.launch`` as scripts/dashboard runs it, with the loopback
token; ``tensorboard --logdir``), and once it answers HTTP (and ``--settle`` seconds later: a dashboard
started a while before it is opened) a new Chromium (Debian's, through playwright; a fresh profile: nothing
cached) opens the loss curve's page (1440 x 3000, so every chart is on screen):

* first curve: from the navigation's start to a loss curve on screen.  Specdeck: the plotly chart titled
  Loss has a drawn line (read in the page).  TensorBoard draws on a canvas, so its time is when the browser
  received the first ``timeSeries`` answer with ``train/loss`` points, plus two animation frames (a lower
  bound for TensorBoard);
* whole curve: the same, once the curve reaches the run's last step;
* server CPU (seconds of CPU of the server and its children from the navigation to the whole curve, and
  from the server's start to the whole curve: both start reading the run's files before a browser asks)
  and RSS (of the server and its children, after the load);
* idle CPU: the server's CPU over ``--idle-s`` seconds with the tab open and nothing appended;
* append (unless ``--append 0``): ``--append`` steps are appended (to the log; to a new event file of the same run) and the time
  until the page's loss curve reaches the new last step (at most 60 s; TensorBoard's page reloads its data
  every 30 s by default).

Printed: every measurement, then per size the medians side by side with the ratio Specdeck / TensorBoard.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from perf.bench_pages_browser import tree_cpu  # noqa: E402  (a server's process tree's CPU seconds)
from tests.e2e._dashboard import stop_group  # noqa: E402

ROOT = Path("/tmp/specdeck-train-vs-tb")
TTT = 7
APPEND_TIMEOUT_S = 60.0
LOAD_TIMEOUT_S = 180.0
T_START = 1_767_225_600.0  # the run's first step: 2026-01-01 00:00 UTC

# the loss curve's last step on screen, in Specdeck's page: the plotly chart titled Loss
SPECDECK_JS = """() => {
  for (const box of document.querySelectorAll('.sd-chart[data-drawn]')) {  // uPlot (ui/linechart.js)
    if (box.dataset.title === 'Loss') return box.dataset.last === '' ? null : Number(box.dataset.last);
  }
  for (const gd of document.querySelectorAll('.js-plotly-plot')) {
    const title = gd.layout && gd.layout.title && (gd.layout.title.text || gd.layout.title);
    if (String(title).replace(/<[^>]+>/g, '') !== 'Loss' || !gd.data) continue;
    if (!gd.querySelector('.scatterlayer .trace path.js-line')) return null;
    let last = null;
    for (const t of (gd._fullData || gd.data)) {
      if (!t.x) continue;
      for (let i = t.x.length - 1; i >= 0; i--) {
        if (t.y[i] !== null && !Number.isNaN(t.y[i])) { if (last === null || t.x[i] > last) last = t.x[i]; break; }
      }
    }
    return last;
  }
  return null;
}"""

# TensorBoard: each timeSeries answer's last train/loss step, with when it arrived
TB_INIT = """(() => {
  window.__tb = [];
  const note = (text) => {
    try {
      const body = JSON.parse(text);
      for (const item of (Array.isArray(body) ? body : [])) {
        if (item.tag !== 'train/loss' || !item.runToSeries) continue;
        let last = null;
        for (const series of Object.values(item.runToSeries))
          for (const p of series) if (last === null || p.step > last) last = p.step;
        if (last !== null) window.__tb.push([performance.now(), last]);
      }
    } catch (e) {}
  };
  const open = XMLHttpRequest.prototype.open;
  XMLHttpRequest.prototype.open = function (m, url) { this.__url = String(url); return open.apply(this, arguments); };
  const send = XMLHttpRequest.prototype.send;
  XMLHttpRequest.prototype.send = function () {
    if (this.__url.includes('timeSeries')) this.addEventListener('load', () => note(this.responseText));
    return send.apply(this, arguments);
  };
  const f = window.fetch;
  window.fetch = async function (input, init) {
    const r = await f.apply(this, arguments);
    const url = String(input && input.url || input);
    if (url.includes('timeSeries')) r.clone().text().then(note);
    return r;
  };
})();"""
TB_JS = """async (want) => {
  const hits = (window.__tb || []).filter(([, s]) => s >= want);
  if (!hits.length) return null;
  await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  return hits[0][0];
}"""


# -- the run, written twice --------------------------------------------------------------------------

def _bar(n: int, spe: int) -> str:
    e, k = divmod(n - 1, spe)
    el = n - e * spe
    rem = spe - k - 1
    return (f"\rTraining Epoch {e}:  {100 * (k + 1) // spe:2d}%|#####     | {k + 1}/{spe} "
            f"[{el // 3600:d}:{el // 60 % 60:02d}:{el % 60:02d}<{rem // 3600:d}:{rem // 60 % 60:02d}:{rem % 60:02d},"
            f"  1.00s/it, loss={_loss(n):.4f}, acc={_acc(n):.4f}, acceptance_rate={_acc(n) * 0.9:.4f}, time=1.00s, "
            f"grad_norm={0.5 + (n % 7) * 0.01:.2f}]")


def _loss(n: int) -> float:
    return 1.0 + 4.0 / (1.0 + n / 2000.0) + (0.2 if n % 997 == 0 else 0.0)


def _acc(n: int) -> float:
    return min(0.95, 0.1 + 0.8 * n / (n + 5000.0))


def _pos_acc(n: int, i: int) -> float:
    return max(0.0, _acc(n) - 0.08 * i)


def console_lines(first: int, last: int, spe: int) -> str:
    out = []
    for n in range(first, last + 1):
        out.append(_bar(n, spe))
        if n % 50 == 0:
            out.append("\n" + "".join(f"Eval - Step {n} [{n + 1}/2], position {i},  Acc: {_pos_acc(n, i):.4f}\n"
                                      for i in range(TTT)))
    return "".join(out)


def write_events(logdir: Path, first: int, last: int) -> None:
    from tensorboardX import SummaryWriter

    w = SummaryWriter(str(logdir), flush_secs=3600, max_queue=100_000)
    for n in range(first, last + 1):
        t = T_START + n
        w.add_scalar("train/loss", _loss(n), n, walltime=t)
        w.add_scalar("train/acc", _acc(n), n, walltime=t)
        w.add_scalar("train/acceptance_rate", _acc(n) * 0.9, n, walltime=t)
        w.add_scalar("train/step_time", 1.0, n, walltime=t)
        w.add_scalar("train/grad_norm", 0.5 + (n % 7) * 0.01, n, walltime=t)
        if n % 50 == 0:
            for i in range(TTT):
                w.add_scalar(f"train/acc_{i}", _pos_acc(n, i), n, walltime=t)
    w.close()


WORKSPACE = """[workspace]
name = "train-vs-tb"

[[train]]
name = "bench"
python = "{python}"
generation = "gen2"
entry = "module:backend.flows.tiny train"
target_model = "{root}/target"
train_data = "{root}/data.jsonl"
"""


def build(steps: int) -> Path:
    """The run of ``steps`` steps (built once, kept under ROOT)."""
    base = ROOT / f"run-{steps}"
    done = base / "built"
    if done.exists():
        return base
    shutil.rmtree(base, ignore_errors=True)
    (base / "ws" / "logs").mkdir(parents=True)
    spe = steps  # one epoch: the bar counts every step
    log = base / "ws" / "logs" / "bench.log"
    with open(log, "w", encoding="utf-8") as f:
        f.write("===== specdeck: bench run bench-1 starting at 2026-01-01 00:00:00: python -m specforge\n")
        f.write(f"Auto-calculated total_steps: {steps * 2} (num_epochs=2 * steps_per_epoch={spe})\n")
        f.write("Starting training from epoch:0          step:0\n")
        f.write(f"Training Epoch 0:   0%|          | 0/{spe} [00:00<?, ?it/s]")
        for a in range(1, steps + 1, 10_000):
            f.write(console_lines(a, min(steps, a + 9_999), spe))
    write_events(base / "tb" / "bench", 1, steps)
    done.write_text(json.dumps({"steps": steps}))
    return base


def copy_run(base: Path, dest: Path) -> Path:
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(base, dest)
    (dest / "ws" / "specdeck.toml").write_text(WORKSPACE.format(python=sys.executable, root=dest / "ws"))
    return dest


def append(run: Path, steps: int, more: int) -> None:
    with open(run / "ws" / "logs" / "bench.log", "a", encoding="utf-8") as f:
        f.write(console_lines(steps + 1, steps + more, steps))  # the bar of an epoch as long as the run
    write_events(run / "tb" / "bench", steps + 1, steps + more)


# -- the servers ----------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tb_python(venv: Path) -> Path:
    py = venv / "bin" / "python"
    if not (venv / "bin" / "tensorboard").exists():
        print(f"making {venv} with tensorboard 2.21 …", flush=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "tensorboard==2.21.*"], check=True)
    return venv / "bin" / "tensorboard"


@contextmanager
def serve(kind: str, run: Path, tb: Path | None, tree: Path = REPO):
    """``kind`` (specdeck: the dashboard of the checkout ``tree``; tensorboard) serving ``run`` on a free port of
    127.0.0.1; yields (its process, the URL of its loss curves) once it answers."""
    port = _free_port()
    out = open(run / f"{kind}.out", "wb")  # noqa: SIM115 - the server's life
    if kind == "specdeck":
        token = secrets.token_urlsafe(24)
        env = dict(os.environ, SPECDECK_WORKSPACE=str(run / "ws"), SPECDECK_HOME=str(run / "home"),
                   SPECDECK_ACCESS_TOKEN=token, PYTHONUNBUFFERED="1")
        argv = [sys.executable, "-m", "ui.launch", "--server.address", "127.0.0.1",
                "--server.port", str(port), "--server.headless", "true", "--global.developmentMode", "false",
                "--browser.gatherUsageStats", "false"]
        health = f"http://127.0.0.1:{port}/_stcore/health"
        url = f"http://127.0.0.1:{port}/training?token={token}&run=bench"
        cwd = tree
    else:
        env = dict(os.environ)
        argv = [str(tb), "--logdir", str(run / "tb"), "--host", "127.0.0.1", "--port", str(port)]
        health = f"http://127.0.0.1:{port}/"
        url = f"http://127.0.0.1:{port}/#timeseries"  # every card, as Specdeck draws every chart
        cwd = run
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.time() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{kind} exited with {proc.returncode}: see {run / (kind + '.out')}")
            try:
                with urllib.request.urlopen(health, timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.time() > deadline:
                raise RuntimeError(f"{kind} did not answer within 120 s")
            time.sleep(0.2)
        yield proc, url
    finally:
        stop_group(proc)
        out.close()



def tree_rss(pid: int) -> int:
    total = 0
    try:
        p = psutil.Process(pid)
        procs = [p, *p.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    for q in procs:
        try:
            total += q.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total


# -- one measurement ------------------------------------------------------------------------------------

def wait_for(page, kind: str, want: int, timeout: float) -> float | None:
    """performance.now() (ms) when the loss curve reached step ``want``; None at the timeout."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if kind == "specdeck":
            last = page.evaluate(SPECDECK_JS)
            if last is not None and last >= want:
                return page.evaluate("() => performance.now()")
        else:
            t = page.evaluate(TB_JS, want)
            if t is not None:
                return t
        time.sleep(0.05)
    return None


def measure(kind: str, base: Path, steps: int, a: argparse.Namespace, tb: Path, pw) -> dict:
    import tempfile

    run = copy_run(base, Path(tempfile.mkdtemp(prefix=f"work-{kind}-", dir=ROOT)))
    res: dict = {"server": kind, "steps": steps}
    with serve(kind, run, tb) as (proc, url):
        if a.settle > 0:  # a dashboard started a while before it is opened: its start-up work has had its time
            time.sleep(a.settle)
        browser = pw.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                     args=["--no-sandbox", "--disable-dev-shm-usage"])
        try:
            ctx = browser.new_context(viewport={"width": 1440, "height": 3000})
            page = ctx.new_page()
            if kind == "tensorboard":
                page.add_init_script(TB_INIT)
            cpu0 = tree_cpu(proc.pid)
            page.goto(url, wait_until="commit")
            first = wait_for(page, kind, 1, LOAD_TIMEOUT_S)
            whole = wait_for(page, kind, steps, LOAD_TIMEOUT_S)
            res["first_s"] = first / 1000 if first is not None else None
            res["whole_s"] = whole / 1000 if whole is not None else None
            total = tree_cpu(proc.pid)
            res["load_cpu_s"] = total - cpu0
            res["start_cpu_s"] = total  # from the server's start: TensorBoard reads its files before a browser asks
            res["rss_mib"] = tree_rss(proc.pid) / 2**20
            time.sleep(3)
            c0, t0 = tree_cpu(proc.pid), time.monotonic()
            time.sleep(a.idle_s)
            res["idle_cpu"] = (tree_cpu(proc.pid) - c0) / (time.monotonic() - t0)
            if not a.append:
                res["append_write_s"] = res["append_s"] = None
                return res
            t_app = time.monotonic()
            append(run, steps, a.append)
            written = time.monotonic() - t_app
            t_app = page.evaluate("() => performance.now()")
            shown = wait_for(page, kind, steps + a.append, APPEND_TIMEOUT_S)
            res["append_write_s"] = written
            res["append_s"] = (shown - t_app) / 1000 if shown is not None else None
        finally:
            browser.close()
    shutil.rmtree(run, ignore_errors=True)
    return res


def fmt_s(v: float | None) -> str:
    return f"{v:7.2f}" if v is not None else "    n/a"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", default="10000,100000")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--idle-s", type=float, default=20.0)
    ap.add_argument("--append", type=int, default=1000)
    ap.add_argument("--tb-venv", default="/tmp/specdeck-tb-venv")
    ap.add_argument("--settle", type=float, default=0.0,
                    help="seconds between the server's first answer and the browser's visit (0: at once)")
    a = ap.parse_args()
    from playwright.sync_api import sync_playwright

    tb = tb_python(Path(a.tb_venv))
    ROOT.mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in a.steps.split(",")]
    results: list[dict] = []
    with sync_playwright() as pw:
        for steps in sizes:
            t = time.time()
            base = build(steps)
            size = (base / "ws" / "logs" / "bench.log").stat().st_size
            ev = sum(p.stat().st_size for p in (base / "tb").rglob("*") if p.is_file())
            print(f"run of {steps:,} steps: console log {size / 2**20:.1f} MiB, event files {ev / 2**20:.1f} MiB "
                  f"(built in {time.time() - t:.0f} s)", flush=True)
            for rep in range(a.repeats):
                order = ("specdeck", "tensorboard") if rep % 2 == 0 else ("tensorboard", "specdeck")
                for kind in order:
                    r = measure(kind, base, steps, a, tb, pw)
                    results.append(r)
                    print(f"  {steps:>7,} #{rep + 1} {kind:<11} first {fmt_s(r['first_s'])} s  whole "
                          f"{fmt_s(r['whole_s'])} s  load CPU {r['load_cpu_s']:6.2f} s  RSS {r['rss_mib']:6.0f} MiB  "
                          f"idle {r['idle_cpu'] * 100:5.1f} % of a core"
                          + (f"  +{a.append:,} steps shown after {fmt_s(r['append_s'])} s" if a.append else ""),
                          flush=True)
    print("\nmedians (Specdeck / TensorBoard = ratio; lower is better):")
    for steps in sizes:
        when = f"opened {a.settle:g} s after the server answered" if a.settle > 0 else "opened as soon as it answered"
        print(f"{steps:,} steps, {a.repeats} repeat(s), cold server and browser each time, {when}:")
        for key, label, unit in (("first_s", "first curve", "s"), ("whole_s", "whole curve", "s"),
                                 ("load_cpu_s", "server CPU, navigation to whole curve", "s"),
                                 ("start_cpu_s", "server CPU, start to whole curve", "s"),
                                 ("rss_mib", "RSS after load", "MiB"),
                                 ("idle_cpu", f"idle CPU over {a.idle_s:.0f} s, one tab", "cores"),
                                 *((("append_s", f"+{a.append:,} steps on screen", "s"),) if a.append else ())):
            meds = {}
            for kind in ("specdeck", "tensorboard"):
                vals = [r[key] for r in results if r["steps"] == steps and r["server"] == kind]
                # not on screen within the time allowed: longer than it, whatever it would have been
                vals = [v if v is not None else float("inf") for v in vals]
                meds[kind] = statistics.median(vals) if vals else None
            s, t = meds["specdeck"], meds["tensorboard"]
            ratio = (f"{s / t:6.2f}x" if s is not None and t and s != float("inf") and t != float("inf")
                     else "   n/a")
            limit = APPEND_TIMEOUT_S if key == "append_s" else LOAD_TIMEOUT_S
            shown = lambda v: (f"{v:9.3f}" if v is not None and v != float("inf")  # noqa: E731
                               else f"> {limit:.0f}".rjust(9))
            print(f"  {label:<32} Specdeck {shown(s)} {unit:<5}  TensorBoard {shown(t)} {unit:<5}  {ratio}")


if __name__ == "__main__":
    main()
