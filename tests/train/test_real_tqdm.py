"""tqdm's own output, not a hand-written imitation: a child process draws SpecForge Gen-2's bar (desc,
postfix keys and formats as SpecForge sets them) and logs 'Eval - Step' lines through logging on the same
stream, as a supervised training does; the reader follows the file while it grows."""

from __future__ import annotations

import subprocess
import sys
import time

from backend.train.reader import TrainLogReader

CHILD = r'''
import logging, sys
from tqdm import tqdm
logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s - %(levelname)s - %(message)s")
log = logging.getLogger("specforge")
losses = [5.0, 4.5, 4.0, 3.5]
for epoch in range(2):
    bar = tqdm(range(4), desc=f"Training Epoch {epoch}", leave=True, mininterval=0, miniters=1, file=sys.stderr)
    for i in bar:
        step = epoch * 4 + i + 1
        bar.set_postfix({"loss": f"{losses[i] - epoch:.2f}", "acc": f"{0.1 * (i + 1) + 0.4 * epoch:.2f}",
                         "acceptance_rate": f"{0.05 * (i + 1):.2f}", "time": "0.01s", "grad_norm": "0.50"})
        if step % 2 == 0:
            for p in range(3):
                log.info(f"Eval - Step {step} [{step + 1}/2], position {p},  Acc: {0.6 - 0.1 * p + 0.01 * step:.2f}")
'''


def test_reader_follows_real_tqdm_output(tmp_path):
    log = tmp_path / "train.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-c", CHILD], stdout=out, stderr=subprocess.STDOUT)
    reader = TrainLogReader(log)
    recs = []
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            recs.extend(reader.poll().records)
            time.sleep(0.01)  # polling interval of a follower, not a wait for a result
        assert proc.wait(timeout=max(1.0, deadline - time.monotonic())) == 0
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=10)
    recs.extend(reader.read_all())
    assert reader.stats.unparsed == 0 and reader.stats.values_rejected == 0, list(reader.unparsed)
    bars = [r for r in recs if r.source == "bar" and r.metrics]
    # each step's postfix once, at its step (the child's table: loss 5.0 - 0.5 (i - 1) - epoch, acc
    # 0.1 i + 0.4 epoch, acceptance_rate 0.05 i for step i of 4 in the epoch)
    assert [(b.step, b.epoch, b.metrics["loss"], b.metrics["acc"], b.metrics["acceptance_rate"]) for b in bars] == [
        (1, 0, 5.0, 0.1, 0.05), (2, 0, 4.5, 0.2, 0.1), (3, 0, 4.0, 0.3, 0.15), (4, 0, 3.5, 0.4, 0.2),
        (5, 1, 4.0, 0.5, 0.05), (6, 1, 3.5, 0.6, 0.1), (7, 1, 3.0, 0.7, 0.15), (8, 1, 2.5, 0.8, 0.2)]
    assert all(b.metrics["step_time_s"] == 0.01 and b.metrics["grad_norm"] == 0.5 for b in bars)
    assert reader.progress().step == 8
    steps = [r for r in recs if r.source == "step_line"]
    assert [(r.step, r.position, r.metrics[f"acc_{r.position}"], r.split) for r in steps] == [
        (s, p, round(0.6 - 0.1 * p + 0.01 * s, 2), "train") for s in (2, 4, 6, 8) for p in range(3)]
    assert all(r.wall_time is not None for r in steps)  # the logging timestamp, also when glued to a bar
