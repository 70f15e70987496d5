"""How fast the training-log reader gets through a whole SpecForge log, and what a poll costs.

    .venv/bin/python perf/bench_train_parse.py [--steps 20000] [--ttt 7] [--dir /tmp]

Writes two synthetic logs of ``--steps`` optimizer steps in SpecForge's own formats: Gen-2 (one tqdm
redraw per step after a carriage return, ``Eval - Step`` lines for every TTT position every 50 steps)
and Gen-3 (one ``step N: {...}`` dict every 10 steps with acc_i, ploss_i, acceptance_rate_i and perf/*).
Prints, for each, the size, the time to read it whole (TrainLogReader.read_all, best of 3), segments
and records per second, and the cost of a poll when nothing changed and when one redraw was appended.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backend.train.reader import TrainLogReader  # noqa: E402


def gen2(steps: int, ttt: int) -> str:
    out = ["Auto-calculated total_steps: %d (num_epochs=1 * steps_per_epoch=%d)\n" % (steps, steps),
           "Starting training from epoch:0          step:0\n",
           "Training Epoch 0:   0%%|          | 0/%d [00:00<?, ?it/s]" % steps]
    for s in range(1, steps + 1):
        el = s * 2
        rem = (steps - s) * 2
        out.append("\rTraining Epoch 0:  %2d%%|#####     | %d/%d [%02d:%02d<%02d:%02d,  2.00s/it, loss=%.2f, "
                   "acc=%.2f, acceptance_rate=%.2f, time=2.00s, grad_norm=%.2f]"
                   % (100 * s // steps, s, steps, el // 60 % 60, el % 60, rem // 60 % 60, rem % 60,
                      5 - s / steps, 0.2 + s / steps / 2, 0.1 + s / steps / 2, 1.5))
        if s % 50 == 0:
            for i in range(ttt):
                out.append("Eval - Step %d [%d/1], position %d,  Acc: %.2f\n" % (s, s + 1, i, 0.7 - i * 0.05))
                out.append("Eval - Step %d [%d/1], position %d,  Acceptance Rate: %.4f\n"
                           % (s, s + 1, i, 0.6 - i * 0.05))
                out.append("Eval - Step %d [%d/1], position %d, pLoss: %s\n" % (s, s + 1, i, 1.5 + i * 0.1))
    out.append("\n")
    return "".join(out)


def gen3(steps: int, ttt: int) -> str:
    out = []
    for s in range(10, steps + 1, 10):
        d = {}
        for i in range(ttt):
            d[f"acc_{i}"] = round(0.7 - i * 0.05, 4)
            d[f"ploss_{i}"] = round(1.5 + i * 0.1, 4)
            d[f"acceptance_rate_{i}"] = round(0.6 - i * 0.05, 4)
        d.update({"acc": 0.55, "loss": 3.1, "acceptance_rate": 0.45, "lr": 9.9e-05,
                  "perf/optimizer_steps_per_hour": 2400.0, "perf/optimizer_step_time_s": 1.5,
                  "perf/data_wait_time_s": 0.01, "perf/train_compute_time_s": 1.4,
                  "perf/durable_ack_time_s": 0.0, "perf/global_samples_per_second": 5.3})
        out.append(f"step {s}: {d}\n")
    return "".join(out)


def measure(name: str, path: Path, append: str) -> None:
    size = path.stat().st_size
    best = float("inf")
    for _ in range(3):
        r = TrainLogReader(path)
        t0 = time.perf_counter()
        recs = r.read_all()
        best = min(best, time.perf_counter() - t0)
    st = r.stats
    print(f"{name}: {size / 1e6:.1f} MB, {st.lines:,} lines/segments, {len(recs):,} records; whole read "
          f"{best * 1000:.0f} ms = {st.lines / best:,.0f} segments/s, {size / 1e6 / best:.1f} MB/s")
    r = TrainLogReader(path)
    r.read_all()
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        r.poll()
    idle = (time.perf_counter() - t0) / n
    t0 = time.perf_counter()
    for _ in range(200):
        with open(path, "a", encoding="utf-8") as f:
            f.write(append)
        r.poll()
    grow = (time.perf_counter() - t0) / 200
    print(f"{name}: poll with nothing new {idle * 1e6:.0f} µs; append one line + poll {grow * 1e6:.0f} µs")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=20000)
    ap.add_argument("--ttt", type=int, default=7)
    ap.add_argument("--dir", default=None)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=a.dir) as d:
        p2 = Path(d) / "gen2.log"
        p2.write_text(gen2(a.steps, a.ttt), encoding="utf-8")
        measure("Gen-2", p2, "\rTraining Epoch 1:   1%|          | 1/100 [00:02<03:18,  2.00s/it, loss=3.00, acc=0.50]")
        p3 = Path(d) / "gen3.log"
        p3.write_text(gen3(a.steps, a.ttt), encoding="utf-8")
        measure("Gen-3", p3, "step 99999: {'loss': 2.0, 'acc_0': 0.7}\n")


if __name__ == "__main__":
    main()
