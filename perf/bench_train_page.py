"""Benchmark: what the Training page spends on a long SpecForge Gen-2 log.

    python perf/bench_train_page.py [--steps 100000] [--ttt 7]

Writes a Gen-2 log of ``--steps`` tqdm redraws (one per step, an ``Eval - Step`` line per TTT position
every 50 steps), then prints, side by side in one run:

* the first read of the whole log in one poll (what the page waited for before the reading was split);
* the first refresh (ui.train.data.POLL_BYTES at a time for up to POLL_S), and how long until the follower's
  background thread has read the rest (the polls meanwhile answer at once);
* one refresh of a log that is already read (nothing appended);
* building every curve, the predicted accept length, and the loss and per-position charts from it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ui.train import charts as tc  # noqa: E402
from ui.train import data as train_data  # noqa: E402
from ui.train.data import LogFollower, predicted  # noqa: E402
from ui.train.series import curves  # noqa: E402


def write_log(path: Path, steps: int, ttt: int) -> None:
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


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--ttt", type=int, default=7)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        log = Path(d) / "train.log"
        write_log(log, a.steps, a.ttt)
        size = log.stat().st_size
        print(f"log: {a.steps:,} steps, {size / 2**20:,.1f} MiB")
        whole, t_whole = timed(lambda: LogFollower(log).poll(max_bytes=size + 1))
        print(f"whole log in one poll:          {t_whole:6.2f} s ({len(whole.records):,} records)")
        f = LogFollower(log)
        t0 = time.perf_counter()
        first, t_first = timed(f.poll)
        worst = t_first
        snap = first
        while snap.catching_up:  # the rest is read by the follower's thread; a poll meanwhile answers at once
            time.sleep(0.05)
            snap, t = timed(f.poll)
            worst = max(worst, t)
        t_all = time.perf_counter() - t0
        print(f"first refresh ({train_data.POLL_BYTES / 2**20:.0f} MiB at a time for up to {train_data.POLL_S:.1f} s): "
              f"{t_first:6.2f} s, {first.offset / 2**20:.1f} MiB read; the whole log read after {t_all:.2f} s, "
              f"the slowest poll {worst:.2f} s")
        _, t_idle = timed(f.poll)
        print(f"refresh with nothing appended:  {t_idle * 1000:6.1f} ms")
        c, t_curves = timed(lambda: curves(snap.records, snap.times))
        _, t_pred = timed(lambda: predicted(snap.records, 2))
        _, t_loss = timed(lambda: tc.metric_chart("Loss", [("run", c)], "loss", tc.STEP, smooth=0.6))
        _, t_pos = timed(lambda: tc.position_chart("acc_i", [("run", c)], "acc", tc.STEP, smooth=0.6))
        print(f"curves {t_curves * 1000:.0f} ms · predicted accept length {t_pred * 1000:.0f} ms · loss chart "
              f"{t_loss * 1000:.0f} ms · per-position chart {t_pos * 1000:.0f} ms")


if __name__ == "__main__":
    main()
