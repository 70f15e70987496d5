"""Benchmark: a regeneration through an sglang-router over 8 simulated servers (figures printed, not a test).

    .venv/bin/python perf/bench_router_fleet.py [--prompts 1000000] [--servers 8] [--concurrency 256]
        [--max-tokens 16] [--peak-tok-s 320] [--where local|ray] [--dir /tmp] [--keep]

A fresh workspace under ``--dir`` with ``--servers`` simulated servers (no speculation, each one's
aggregate decode ceiling ``--peak-tok-s``) and a ``[[router]]`` (round_robin) in front of them, run by
the supervisor, the router's workers kept by the reconciler (backend/flows/router_sync.py).  With
``--where ray`` the servers run as Ray jobs on a local cluster Specdeck starts for the workspace
(``cluster up``, ended by ``cluster down`` at the end; the router stays local).  Then
``regen run --server fleet`` (the router by name) asks ``--prompts`` one-turn prompts, as its own
process, and prints:

* completed requests/s while it runs (from 10 % to 90 % of the rows, from the progress log), and end
  to end, against the sum of the servers' capacity: ``servers × peak tok/s ÷ mean answer tokens``
  (the answer length measured from the run), and the answer tok/s against ``servers × peak tok/s``;
* the router's count of requests per server (the progress log's ``behind``), to see the spread;
* the job's peak resident memory (wait4) and its CPU time;
* the Regeneration page at that size: the progress follower's first open and a refresh after one
  appended line, and the page's server time (AppTest runs of app_pages/regeneration.py, cold and warm).

The simulator's decode model is a stand-in for a GPU (a per-stream speed and an aggregate ceiling),
so the capacity is what the simulated servers can give, not what a GPU would.  On a 2-core machine the
job, the router and eight servers share the CPUs: the ratio says how close the whole path comes to
the servers' own ceiling there.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.helpers import free_port, wait_for  # noqa: E402


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f} ms"


def write_prompts(path: Path, n: int) -> None:
    with open(path, "w") as f:
        for i in range(n):
            f.write(json.dumps({"id": f"p{i}", "conversations": [
                {"role": "user", "content": f"question {i}: write a function that adds two numbers"}]}) + "\n")


def workspace_text(target: Path, ports: list[int], rport: int, mport: int, peak: float, cluster_py: str,
                   where: str = "local") -> str:
    text = '[workspace]\nname = "router-fleet"\n\n[telemetry]\nsource = "fake"\n'
    if where == "ray":
        text += f'\n[cluster]\nkind = "ray"\naddress = "local"\nnum_cpus = {2 * len(ports)}\npython = "{sys.executable}"\n'
    for i, port in enumerate(ports):
        text += (f'\n[[server]]\nname = "sim{i}"\nmodel_path = "{target}"\nport = {port}\nsimulate = true\n'
                 f'where = "{where}"\n'
                 f'decode_log_interval = 40\nextra_args = ["--max-running-requests", "512"]\n'
                 f'env = {{ SPECDECK_SIM_SPEED = "200", SPECDECK_SIM_BASELINE_TOK_S = "{peak / 8:g}", '
                 f'SPECDECK_SIM_PEAK_TOK_S = "{peak:g}", SPECDECK_SIM_SEED = "{i}" }}\n')
    return text + (f'\n[[router]]\nname = "fleet"\nport = {rport}\nmetrics_port = {mport}\npolicy = "round_robin"\n'
                   f'health_check_interval_s = 5\npython = "{cluster_py}"\n')


def progress(out: Path) -> list[dict]:
    p = out.with_name(out.name[:-6] + ".progress.jsonl")
    if not p.exists():
        return []
    lines = []
    for line in p.read_text().splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            pass
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=1_000_000)
    ap.add_argument("--servers", type=int, default=8)
    ap.add_argument("--concurrency", type=int, default=256, help="requests in flight through the router")
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--peak-tok-s", type=float, default=320.0, help="each simulated server's decode ceiling")
    ap.add_argument("--where", choices=("local", "ray"), default="local", help="where the servers run")
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()

    from backend.sim.models import make_target_dir

    cluster_py = os.environ.get("SPECDECK_CLUSTER_PYTHON") or str(REPO / ".venv-cluster" / "bin" / "python")
    base = Path(tempfile.mkdtemp(prefix="bench-router-fleet-", dir=args.dir))
    root = base / "ws"
    stop = threading.Event()
    try:
        target = make_target_dir(base / "models" / "target")
        ports = [free_port() for _ in range(args.servers)]
        rport, mport = free_port(), free_port()
        inp = base / "prompts.jsonl"
        t = time.perf_counter()
        write_prompts(inp, args.prompts)
        print(f"{args.prompts:,} prompts written ({inp.stat().st_size / 1e6:,.0f} MB) in {time.perf_counter() - t:.1f} s")
        names = [f"sim{i}" for i in range(args.servers)]
        text = workspace_text(target, ports, rport, mport, args.peak_tok_s, cluster_py, args.where)
        if args.where == "ray":
            root.mkdir(parents=True)
            (root / "specdeck.toml").write_text(text)
            t = time.perf_counter()
            subprocess.run([sys.executable, "-m", "backend.cli", "--workspace", str(root), "cluster", "up"],
                           cwd=str(REPO), check=True, timeout=300)
            print(f"local Ray head up in {time.perf_counter() - t:.1f} s")
        try:
            run(args, root, text, names, rport, inp, stop)
        finally:
            if args.where == "ray":
                subprocess.run([sys.executable, "-m", "backend.cli", "--workspace", str(root), "cluster", "down"],
                               cwd=str(REPO), timeout=300)
    finally:
        stop.set()
        if args.keep:
            print(f"kept {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)


def run(args, root: Path, text: str, names: list[str], rport: int, inp: Path, stop: threading.Event) -> None:
    from backend.flows.router_sync import RouterSync
    from tests.simws import running_fleet

    with running_fleet(root, text) as f:
        try:
            measure(args, f, root, names, rport, inp, stop, RouterSync)
        finally:
            stop.set()  # the reconciler's thread ends before the fleet's store closes
            for n in ["fleet", *names]:  # the router and the servers (Ray jobs too) before the Ray head
                v = f.sup.view(n)
                if v is not None and v.live:
                    f.sup.stop(n, actor="bench", source="bench", wait=True)


def measure(args, f, root: Path, names: list[str], rport: int, inp: Path, stop: threading.Event,
            RouterSync) -> None:
    base = root.parent
    t = time.perf_counter()
    for n in names + ["fleet"]:
        f.sup.start(n, actor="bench", source="bench")
    for n in names + ["fleet"]:
        wait_for(lambda n=n: (f.sup.view(n) is not None and f.sup.view(n).state.value == "RUNNING"), 120,
                 f"{n} RUNNING")
    sync = RouterSync(f.fleet, f.sup, f.ws.run_dir)
    sync.run_in_background(stop, interval_s=1.0)
    wait_for(lambda: (sync.view("fleet") is not None
                      and sync.view("fleet").healthy_workers == args.servers), 120, "every worker healthy")
    print(f"{args.servers} simulated servers and the router RUNNING, every worker healthy, in "
          f"{time.perf_counter() - t:.1f} s")

    out = f.ws.outputs_dir / "regen" / "fleet.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "backend.cli", "regen", "run", "--input", str(inp), "--server", "fleet",
            "--workspace", str(root), "--out", str(out), "--max-tokens", str(args.max_tokens),
            "--concurrency", str(args.concurrency), "--temperature", "0"]
    log = open(base / "regen.log", "wb")
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=str(REPO), stdout=log, stderr=subprocess.STDOUT)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - t0
    log.close()
    if proc.returncode != 0:
        print((base / "regen.log").read_text()[-3000:])
        raise SystemExit(f"regen run exited {proc.returncode}")
    lines = progress(out)
    last = lines[-1]
    done = last["done"]
    tokens = last["completion_tokens"]
    mean_tok = tokens / max(done, 1)
    lo = next(x for x in lines if x["done"] >= 0.1 * done)
    hi = next(x for x in lines if x["done"] >= 0.9 * done)
    steady = (hi["done"] - lo["done"]) / max(hi["t"] - lo["t"], 1e-9)
    steady_tok = (hi["completion_tokens"] - lo["completion_tokens"]) / max(hi["t"] - lo["t"], 1e-9)
    cap_tok = args.servers * args.peak_tok_s
    cap_req = cap_tok / mean_tok
    print(f"regen run through the router: {done:,} done, {last['failed']:,} failed in {wall:,.1f} s "
          f"(exit {proc.returncode})")
    print(f"  completed req/s from 10 % to 90 %: {steady:,.1f}; end to end {done / wall:,.1f}; "
          f"the servers' capacity {cap_req:,.1f} req/s ({args.servers} × {args.peak_tok_s:g} tok/s ÷ "
          f"{mean_tok:.1f} answer tokens): {steady / cap_req * 100:.0f} % of it")
    print(f"  answer tok/s from 10 % to 90 %: {steady_tok:,.0f} of {cap_tok:,.0f} "
          f"({steady_tok / cap_tok * 100:.0f} %)")
    behind = (last.get("behind") or {}).get(f"http://127.0.0.1:{rport}") or {}
    counts = sorted(w["done"] for w in (behind.get("workers") or {}).values())
    if counts:
        print(f"  the router's requests per server: min {counts[0]:,}, median {statistics.median(counts):,.0f}, "
              f"max {counts[-1]:,} over {len(counts)} servers")
    print(f"  the job: peak resident memory {usage.ru_maxrss / 1024:,.0f} MB, CPU {usage.ru_utime + usage.ru_stime:,.1f} s "
          f"({(usage.ru_utime + usage.ru_stime) / wall * 100:.0f} % of one core); load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"  output {out.stat().st_size / 1e6:,.0f} MB, progress log {len(lines):,} snapshots")

    # the Regeneration page at that size, with the servers and the router still up
    from backend.regen import follow

    t = time.perf_counter()
    fo = follow.ProgressFollower(out).poll()
    fo.eta()
    first = time.perf_counter() - t
    prog = out.with_name(out.name[:-6] + ".progress.jsonl")
    refresh = []
    for k in range(20):
        snap = dict(last, t=time.time())
        with open(prog, "a") as fh:
            fh.write(json.dumps(snap) + "\n")
        t = time.perf_counter()
        fo.poll()
        fo.eta()
        refresh.append(time.perf_counter() - t)
    print(f"progress follower: first open {ms(first)}; refresh after one appended line, median of 20 "
          f"{ms(statistics.median(refresh))} (max {ms(max(refresh))})")

    os.environ["SPECDECK_WORKSPACE"] = str(root)
    import streamlit.runtime.scriptrunner.script_runner as script_runner
    from streamlit.testing.v1 import AppTest

    from backend import runtime as runtime_mod

    script = []
    real_exec = script_runner.exec_func_with_error_handling

    def timed_exec(*a, **k):
        t, c = time.perf_counter(), time.thread_time()
        try:
            return real_exec(*a, **k)
        finally:
            script.append((time.perf_counter() - t, time.thread_time() - c))

    script_runner.exec_func_with_error_handling = timed_exec
    follow._followers.clear()
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=180)
    at.run()
    at.switch_page("app_pages/regeneration.py")
    script.clear()
    at.run()
    assert not at.exception, at.exception
    cold = script[-1]
    shown = [m.value for m in at.markdown if "↳" in m.value]
    runs = []
    for k in range(9):
        with open(prog, "a") as fh:
            fh.write(json.dumps(dict(last, t=time.time())) + "\n")
        at.run()
        runs.append(script[-1])
    print(f"Regeneration page server time (app.py + app_pages/regeneration.py; {len(shown)} servers behind the "
          f"router listed): first {ms(cold[0])} wall / {ms(cold[1])} CPU; then median of 9 "
          f"{ms(statistics.median(r[0] for r in runs))} wall / {ms(statistics.median(r[1] for r in runs))} CPU")
    runtime_mod.close_all()


if __name__ == "__main__":
    main()
