"""Benchmark: the tiny trainer's speed, run as users run it (``python -m backend.flows.tiny train``).

    python perf/bench_tiny_train.py [--device cpu|cuda|all] [--repeat 3] [--rows 200] [--epochs 3]
                                     [--batch-size 4] [--max-length 128] [--ttt-length 7] [--size tiny]
                                     [--large-batch-size 32] [--large-rows 2000] [--large-steps 300]
                                     [--threads 1,2]

For each device (``all``: cpu, and cuda when torch sees a GPU) it writes a target and a data file, runs the
trainer ``--repeat`` times as a child process and prints per run: seconds from start to exit, training steps,
steps per second of the training loop (steps over the time between the log's "Starting training" line and
its last checkpoint line, both read by the project's own log reader) and the last acc_0 it printed.
CPU runs the demo size (``--size``, default tiny); cuda runs ``--size large`` with the ``--large-*`` settings.
``--threads 1,2`` runs the CPU case once per thread count (``OMP_NUM_THREADS``), side by side in one run,
and also prints each run's CPU seconds (the child's user + system time).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from backend.train.reader import TrainLogReader  # noqa: E402
from backend.flows.tiny.demo_data import write_demo_data  # noqa: E402
from backend.flows.tiny.target import make_target  # noqa: E402


def one_run(root: Path, i: int, device: str, size: str, data: Path, flags: list[str],
            threads: str | None = None) -> dict:
    tag = f"{device}-{threads or 'default'}-{i}"
    out, log = root / f"out-{tag}", root / f"train-{tag}.log"
    env = dict(os.environ)
    if threads:
        env["OMP_NUM_THREADS"] = threads
    cmd = [sys.executable, "-m", "backend.flows.tiny", "train", "--target-model-path", str(root / f"target-{size}"),
           "--train-data-path", str(data), "--output-dir", str(out), "--device", device, "--seed", "0", *flags]
    t0 = time.perf_counter()
    c0 = os.times()
    with open(log, "wb") as f:
        rc = subprocess.run(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT, env=env).returncode
    wall = time.perf_counter() - t0
    c1 = os.times()
    cpu = (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system)
    if rc != 0:
        sys.stdout.write(log.read_text(encoding="utf-8", errors="replace")[-3000:])
        raise SystemExit(f"trainer exited {rc}")
    recs = TrainLogReader(log).read_all()
    start = next(r for r in recs if r.kind == "start")
    saved = [r for r in recs if r.kind == "checkpoint"]
    steps = max(r.step for r in recs if r.source == "bar" and r.step is not None)
    loop_s = saved[-1].wall_time - start.wall_time
    acc0 = [r.metrics["acc_0"] for r in recs if r.source == "step_line" and "acc_0" in r.metrics]
    return {"wall_s": wall, "cpu_s": cpu, "steps": steps, "steps_per_s": steps / loop_s if loop_s > 0 else float("nan"),
            "acc0_first": acc0[0] if acc0 else None, "acc0_last": acc0[-1] if acc0 else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cpu", "cuda", "all"], default="all")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--size", choices=["tiny", "large"], default="tiny")
    ap.add_argument("--rows", type=int, default=200)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--ttt-length", type=int, default=7)
    ap.add_argument("--learning-rate", default="1e-2")
    ap.add_argument("--large-rows", type=int, default=2000)
    ap.add_argument("--large-batch-size", type=int, default=32)
    ap.add_argument("--large-steps", type=int, default=300)
    ap.add_argument("--threads", default="", help="comma-separated CPU thread counts to compare (OMP_NUM_THREADS)")
    a = ap.parse_args()
    import torch

    devices = ["cpu", "cuda"] if a.device == "all" else [a.device]
    if "cuda" in devices and not torch.cuda.is_available():
        print("cuda: no GPU visible to torch; skipped")
        devices.remove("cuda")
    root = Path(tempfile.mkdtemp(prefix="bench-tiny-train-"))
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs"
          + (f", {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ""))
    for device in devices:
        if device == "cpu":
            size, data = a.size, write_demo_data(root / "data-cpu.jsonl", rows=a.rows)
            flags = ["--num-epochs", str(a.epochs), "--batch-size", str(a.batch_size), "--max-length",
                     str(a.max_length), "--ttt-length", str(a.ttt_length), "--learning-rate", a.learning_rate,
                     "--log-interval", "10", "--save-interval", "100000"]
            what = (f"{size}, {a.rows} rows x {a.epochs} epochs, batch {a.batch_size}, max length {a.max_length}, "
                    f"TTT {a.ttt_length}")
        else:
            size, data = "large", write_demo_data(root / "data-cuda.jsonl", rows=a.large_rows)
            flags = ["--num-epochs", "1000", "--max-num-steps", str(a.large_steps), "--batch-size",
                     str(a.large_batch_size), "--max-length", "2048", "--ttt-length", str(a.ttt_length),
                     "--learning-rate", "1e-3", "--log-interval", "50", "--save-interval", "100000"]
            what = f"large, {a.large_rows} rows, batch {a.large_batch_size}, {a.large_steps} steps, TTT {a.ttt_length}"
        make_target(root / f"target-{size}", size)
        for threads in (a.threads.split(",") if device == "cpu" and a.threads else [None]):
            print(f"\n{device}: {what}" + (f", OMP_NUM_THREADS={threads}" if threads else ""))
            runs = []
            for i in range(a.repeat):
                r = one_run(root, i, device, size, data, flags, threads)
                runs.append(r)
                print(f"  run {i + 1}: {r['wall_s']:.1f} s start to exit ({r['cpu_s']:.1f} s of CPU), {r['steps']} "
                      f"steps, {r['steps_per_s']:.2f} steps/s in the loop, acc_0 {r['acc0_first']} -> "
                      f"{r['acc0_last']}")
            print(f"  median: {statistics.median(r['wall_s'] for r in runs):.1f} s per run, "
                  f"{statistics.median(r['cpu_s'] for r in runs):.1f} s of CPU, "
                  f"{statistics.median(r['steps_per_s'] for r in runs):.2f} steps/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
