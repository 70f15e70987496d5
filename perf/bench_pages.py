"""Benchmark: how long each page of the dashboard takes to render, against a trivial page with one chart.

    python perf/bench_pages.py [--runs 5] [--results 50] [--regen-rows 83288] [--full] [--pages a,b]

Builds a workspace in a temporary folder (nothing is started in it: a simulated server that is not
running, ``--results`` benchmark results over three datasets, a regeneration progress log ``--regen-rows``
rows long with a snapshot every 30 s, and two training runs, one with a 10,000-step log), then renders each
page through Streamlit's AppTest, in the dashboard's frame (app.py), as a browser's first visit and then
its reruns do.  For each page it prints the median of ``--runs`` script runs (after one warm-up run that
opens the workspace; its time is printed too) beside a trivial page (a title, a metric and one 300-point plotly chart) measured
the same way, interleaved, and the ratio.

``--full`` builds the workspace at full scale instead (:func:`build_full_workspace`): a regeneration of
``--regen-rows`` output records with its 24 h progress log, 24 h x 8 GPUs of 1 Hz telemetry in the state
store, a 1 GB server log, ``--results`` benchmark results and three training runs; each page's median is
then also printed against the 500 ms budget.  The frame's first run, before any page is chosen, is the Overview
(the page at /): its "first visit" is therefore a second one.  Server time only: a browser's drawing is not in these figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

BUDGET_S = 0.5  # a page's server time at full scale, first visit and reruns
PAGES = ("overview", "servers", "regeneration", "training", "benchmarks", "processes", "gpus")

TRIVIAL = '''
import numpy as np
import plotly.graph_objects as go
import streamlit as st

st.title("Trivial")
st.metric("value", 42)
x = np.arange(300)
st.plotly_chart(go.Figure(go.Scatter(x=x, y=np.sin(x / 20.0))), key="chart")
'''


def write_gen2_log(path: Path, steps: int, ttt: int) -> None:
    """A SpecForge Gen-2 log of ``steps`` tqdm redraws, an ``Eval - Step`` line per TTT position every 50 steps."""
    spe = steps // 2
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"Auto-calculated total_steps: {steps} (num_epochs=2 * steps_per_epoch={spe})\n")
        f.write(f"Training Epoch 0:   0%|          | 0/{spe} [00:00<?, ?it/s]")
        for n in range(1, steps + 1):
            e, k = divmod(n - 1, spe)
            f.write(f"\rTraining Epoch {e}:  50%|#####     | {k + 1}/{spe} [01:10<01:10,  1.00s/it, "
                    f"loss={5 - n * 1e-5:.2f}, acc={0.1 + n * 1e-6:.2f}, acceptance_rate=0.30, time=1.00s, "
                    "grad_norm=0.50]")
            if n % 50 == 0:
                f.write("\n" + "".join(f"Eval - Step {n} [{n + 1}/2], position {i},  Acc: 0.50\n"
                                       for i in range(ttt)))


def build_workspace(root: Path, results: int, regen_rows: int, *, regen: bool = True, trains: int = 2) -> Path:
    from backend.sim.models import make_draft_dir, make_target_dir
    from specdeck_types.bench import BenchConfig, BenchFigures, BenchLoad, BenchResult
    from state.bench import BenchStore
    from state.store import Store

    target = make_target_dir(root / "models" / "target", hidden_size=4096, num_hidden_layers=32, vocab_size=128256)
    draft = make_draft_dir(root / "models" / "draft", kind="eagle3", target_hidden_size=4096, vocab_size=128256)
    (root / "logs").mkdir(parents=True, exist_ok=True)
    py = json.dumps(sys.executable)
    (root / "specdeck.toml").write_text(f"""[workspace]
name = "bench-pages"

[telemetry]
source = "fake"

[[server]]
name = "sim"
model_path = {json.dumps(str(target))}
port = 1
simulate = true
sglang_version = "0.5.23"
baseline_tok_s = 90.0
gpus = [0, 1]

[server.speculative]
algorithm = "EAGLE3"
draft_model_path = {json.dumps(str(draft))}

[[train]]
name = "draft-a"
python = {py}
generation = "gen2"
entry = "module:backend.flows.tiny train"
target_model = {json.dumps(str(target))}
train_data = {json.dumps(str(root / "data.jsonl"))}
gpus = [2, 3]

[[train]]
name = "draft-b"
python = {py}
generation = "gen2"
entry = "module:backend.flows.tiny train"
target_model = {json.dumps(str(target))}
train_data = {json.dumps(str(root / "data.jsonl"))}
""" + "".join(f"""
[[train]]
name = "draft-{chr(ord('a') + k)}"
python = {py}
generation = "gen2"
entry = "module:backend.flows.tiny train"
target_model = {json.dumps(str(target))}
train_data = {json.dumps(str(root / "data.jsonl"))}
""" for k in range(2, trains)))
    # results over three datasets and two concurrencies, each with its baseline
    t0 = time.time() - 86400
    with Store(root / "state.db") as store:
        bench = BenchStore(store)
        for i in range(results):
            spec = i % 4 != 0
            cfg = BenchConfig(target_model="target", algorithm="EAGLE3" if spec else "NONE",
                              draft_model="draft" if spec else None, num_steps=3 if spec else None, tp=2)
            bench.insert(BenchResult(
                source="run", server="sim", config=cfg,
                load=BenchLoad(concurrency=1 + (i % 2) * 7, num_prompts=200, input_len=1024, output_len=512,
                               dataset=("sharegpt", "humaneval", "gsm8k")[i % 3]),
                results=BenchFigures(output_tok_s=90.0 + (i % 7) * 10, accept_len=2.0 + (i % 5) / 10 if spec else None),
                started_at=t0 + 600 * i, ended_at=t0 + 600 * i + 300))
    # a regeneration half done: a progress snapshot every 30 s, the last 2,000 of them in the log
    write_gen2_log(root / "logs" / "draft-a.log", 10_000, 7)  # where the workspace keeps its log (Workspace.log_path)
    if not regen:
        return root
    reg = root / "outputs" / "regen"
    reg.mkdir(parents=True, exist_ok=True)
    now, lines, done = time.time(), [], 0
    n = 2000
    for k in range(n):
        done = min(regen_rows, done + max(1, regen_rows // (2 * n)))
        lines.append(json.dumps({"t": now - 30 * (n - k), "state": "running", "total": regen_rows, "done": done,
                                 "failed": 3, "skipped": 0, "remaining": regen_rows - done - 3, "in_flight": 64,
                                 "req_s": 1.4, "tok_s": 700.0, "started_at": now - 30 * n}))
    (reg / "mix.progress.jsonl").write_text("\n".join(lines) + "\n")
    return root


def write_telemetry(db: Path, hours: float, gpus: int = 8) -> int:
    """``hours`` of 1 Hz GPU and host telemetry as the sampler leaves it in the state store: one
    min/mean/max bucket per minute per GPU and field (60 readings each), ending now."""
    import math

    from backend.telemetry.model import GPU_SERIES, HOST_SERIES
    from state.store import Store
    from state.telemetry import HOST_INDEX, Bucket, TelemetryStore

    scale = {"util_gpu": 100.0, "util_mem": 60.0, "mem_used": 70e9, "power_w": 600.0, "temp_c": 80.0,
             "sm_clock_mhz": 1980.0, "mem_clock_mhz": 2619.0, "cpu_percent": 100.0, "mem_percent": 100.0,
             "net_rx_bps": 1e8, "net_tx_bps": 1e8, "load_1m": 16.0}
    end = math.floor(time.time() / 60) * 60
    minutes = int(hours * 60)
    n = 0
    with Store(db) as store:
        tele = TelemetryStore(store)
        for m in range(minutes):
            t0 = end - (minutes - m) * 60
            wave = 0.5 + 0.4 * math.sin(m / 90.0)
            rows = [Bucket("gpu", g, f, t0, 60.0, 60, scale[f] * wave * 0.8, scale[f] * wave,
                           scale[f] * min(1.0, wave * 1.2)) for g in range(gpus) for f in GPU_SERIES]
            rows += [Bucket("host", HOST_INDEX, f, t0, 60.0, 60, scale[f] * wave * 0.8, scale[f] * wave,
                            scale[f] * wave * 1.1) for f in HOST_SERIES]
            n += tele.write(rows)
    return n


def write_server_log(path: Path, size: int) -> int:
    """A server log of about ``size`` bytes in SGLang 0.5.23's words: decode and prefill lines of a
    speculative server, the dashboard's probes and user requests in its access log, a timestamp per
    second.  Written in blocks (one block's lines share their second) so a gigabyte takes seconds."""
    from backend.sim.logfmt import Flavor, access_line

    fl = Flavor.of("0.5.23")
    body: list[str] = []
    for k in range(400):  # about 60 KB: a minute of a busy server
        if k % 8 == 0:
            body.append(access_line(40000 + k, "GET", ("/health", "/metrics", "/server_info")[k % 3], 200))
        elif k % 8 == 1:
            body.append(access_line(41000 + k, "POST", "/generate", 200))
        elif k % 8 == 2:
            body.append(fl.prefill_line(forward_ct=k, new_seq=4, new_token=4096, cached_token=512,
                                        token_usage=0.31, running=60, queue=2, pending_token=0, cuda_graph=False,
                                        input_throughput=9123.4))
        else:
            body.append(fl.decode_line(forward_ct=k, running=64, tokens=51200 + k, token_usage=0.42,
                                       accept_len=2.1 + (k % 9) / 20, accept_rate=0.37, cuda_graph=True,
                                       gen_throughput=820.5 + k % 37, queue=2))
    block = "".join("@@TS@@" + line + "\n" for line in body)
    blocks = max(1, size // len(block.replace("@@TS@@", fl.prefix(now=0.0))))
    t = time.time() - blocks * 60
    with open(path, "w", encoding="utf-8") as f:
        for b in range(blocks):
            f.write(block.replace("@@TS@@", fl.prefix(now=t + 60 * b)))
    return path.stat().st_size


def build_full_workspace(root: Path, results: int = 50, regen_rows: int = 83_288, *, log_bytes: int = 10**9,
                         telemetry_hours: float = 24.0, answer_chars: int = 3300) -> Path:
    """The workspace at full scale: ``regen_rows`` regeneration records (a 24 h run 90 % done, its output
    and its progress log of a snapshot every 2 s), ``telemetry_hours`` of 8 GPUs at 1 Hz in the state
    store, a ``log_bytes`` server log, ``results`` benchmark results and three training runs (a 10,000-step
    log, a 2,000-step one and one not started)."""
    from perf.bench_regen_page import write_inputs_and_output, write_progress

    build_workspace(root, results, regen_rows, regen=False, trains=3)
    write_gen2_log(root / "logs" / "draft-b.log", 2_000, 7)
    _, out = write_inputs_and_output(root, regen_rows, answer_chars)
    write_progress(out.with_name(out.stem + ".progress.jsonl"), regen_rows, 24.0, time.time())
    write_telemetry(root / "state.db", telemetry_hours)
    write_server_log(root / "logs" / "sim.log", log_bytes)
    return root


def _page_runner(app: Path, page: str | None):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(app), default_timeout=300)
    t = time.perf_counter()
    at.run()
    if page is not None:
        at.switch_page(f"app_pages/{page}.py")
        t = time.perf_counter()
        at.run()  # the first visit (opens files, fills caches)
    first = time.perf_counter() - t
    if at.exception:
        raise RuntimeError(f"{page or 'trivial'}: {at.exception[0].message}")

    def once() -> float:
        t = time.perf_counter()
        at.run()
        return time.perf_counter() - t

    return once, first


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5, help="script runs per page (median shown)")
    ap.add_argument("--results", type=int, default=50, help="benchmark results in the store")
    ap.add_argument("--regen-rows", type=int, default=83_288, help="rows of the regeneration run")
    ap.add_argument("--full", action="store_true", help="the full-scale workspace (build_full_workspace)")
    ap.add_argument("--pages", default=",".join(PAGES), help="the pages to measure, by name, comma-separated")
    args = ap.parse_args(argv)
    pages = [p for p in args.pages.split(",") if p]
    if any(p not in PAGES for p in pages):
        ap.error(f"--pages: choose among {', '.join(PAGES)}")
    if args.runs < 1 or args.results < 0 or args.regen_rows < 1:
        ap.error("--runs and --regen-rows must be at least 1, --results at least 0")
    with tempfile.TemporaryDirectory(prefix="bench-pages-") as tmp:
        t0 = time.perf_counter()
        root = (build_full_workspace(Path(tmp) / "ws", args.results, args.regen_rows) if args.full
                else build_workspace(Path(tmp) / "ws", args.results, args.regen_rows))
        trivial = Path(tmp) / "trivial.py"
        trivial.write_text(TRIVIAL)
        os.environ["SPECDECK_WORKSPACE"] = str(root)
        os.environ["SPECDECK_HOME"] = str(Path(tmp) / "home")
        if args.full:
            print(f"full-scale workspace (built in {time.perf_counter() - t0:.0f} s): {args.results} benchmark results, "
                  f"{args.regen_rows:,} regeneration records, 24 h x 8 GPUs of 1 Hz telemetry, a "
                  f"{(root / 'logs' / 'sim.log').stat().st_size / 1e9:.2f} GB server log, 3 training runs; "
                  f"median of {args.runs} AppTest script runs after a first visit")
        else:
            print(f"workspace: {args.results} benchmark results, a {args.regen_rows:,}-row regeneration, 2 training "
                  f"runs (one 10,000-step log); median of {args.runs} AppTest script runs after a first visit")
        base, _ = _page_runner(trivial, None)
        print(f"{'page':<14}{'first visit ms':>15}{'rerun median ms':>17}{'trivial ms':>12}{'ratio':>8}"
              f"{'min ms':>9}{'max ms':>9}")
        try:
            for page in pages:
                run, first = _page_runner(REPO / "app.py", page)
                times, triv = [], []
                for _ in range(args.runs):  # interleaved with the trivial page, so both meet the same load
                    times.append(run())
                    triv.append(base())
                m, b = statistics.median(times), statistics.median(triv)
                print(f"{page:<14}{first * 1000:>15.0f}{m * 1000:>17.0f}{b * 1000:>12.0f}{m / b:>7.1f}x"
                      f"{min(times) * 1000:>9.0f}{max(times) * 1000:>9.0f}"
                      + (f"  {'under' if max(m, first) < BUDGET_S else 'OVER'} {BUDGET_S * 1000:.0f} ms"
                         if args.full else ""), flush=True)
        finally:
            from backend import runtime as runtime_mod

            runtime_mod.close_all()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
