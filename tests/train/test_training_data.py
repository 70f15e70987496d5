"""The Training page's data without Streamlit: times of a log's records (the supervisor's start line, tqdm's
elapsed seconds, timestamped lines), restarts, TensorBoard files, smoothing, the ETA band and staleness."""

from __future__ import annotations

import pytest

from tests.train.page_kit import gen2_log

def test_a_run_appended_to_the_log_breaks_the_lines(tmp_path):
    """The supervisor's line before each run anchors wall time; a second run starts a new line."""
    from datetime import datetime

    from ui.train.data import follower
    from ui.train.series import curves

    mark = "===== specdeck: sf run {n} starting at 2026-11-30 10:00:{s:02d}: python train.py\n"
    log = tmp_path / "sf.log"
    log.write_text(mark.format(n=1, s=0) + gen2_log(steps=3) + "\n" + mark.format(n=2, s=30) + gen2_log(steps=2),
                   encoding="utf-8")
    snap = follower(log).poll()
    c = curves(snap.records, snap.times)
    loss = c.train["loss"]
    assert [round(v, 2) if v is not None else None for v in loss.values] == [4.9, 4.8, 4.7, None, 4.9, 4.8]
    start1 = datetime(2026, 11, 30, 10, 0, 0).timestamp()
    start2 = datetime(2026, 11, 30, 10, 0, 30).timestamp()
    # the bar printed n seconds elapsed at step n: the run's start plus tqdm's elapsed time
    assert [t for t in loss.times if t is not None] == [start1 + 1, start1 + 2, start1 + 3, start2 + 1, start2 + 2]
    assert [t for _, t in c.restarts] == [start2]  # the first run's start is no restart


def test_tensorboard_fills_in_the_learning_rate(tmp_path):
    """Gen-2 prints no lr: its TensorBoard files under <output>/runs have train/lr; a metric the console has
    is not taken twice."""
    from tests.train.test_trackers import frame, scalar_event, version_event
    from ui.train.data import follower
    from ui.train.series import curves

    out = tmp_path / "out"
    (out / "runs").mkdir(parents=True)
    events = frame(version_event()) + b"".join(
        frame(scalar_event(1000.0 + s, s, [("train/lr", 1e-4 * s), ("train/loss", 99.0)])) for s in (1, 2, 3))
    (out / "runs" / "events.out.tfevents.1.host").write_bytes(events)
    log = tmp_path / "train.log"
    log.write_text(gen2_log(steps=3), encoding="utf-8")
    snap = follower(log, out).poll()
    c = curves(snap.records, snap.times, snap.tracker_records)
    assert c.train["lr"].steps == [1.0, 2.0, 3.0]
    assert c.train["lr"].values == pytest.approx([1e-4, 2e-4, 3e-4])
    assert c.train["loss"].values == pytest.approx([4.9, 4.8, 4.7])  # from the console, not the tracker's 99
    assert "TensorBoard files under" in snap.tracker_note


def test_eta_band_and_ema():
    from backend.train.reader import Progress
    from ui.train.series import Curves, Series, ema, eta

    # by hand: n=1 → 1.0; n=2 → (0.5·0.5·1 + 0.5·3) / 0.75 = 2.3333; a gap restarts it
    got = ema([1.0, 3.0, None, 2.0], 0.5)
    assert got[0] == pytest.approx(1.0) and got[1] == pytest.approx(2.3333, abs=1e-4)
    assert got[2] is None and got[3] == pytest.approx(2.0)
    s = Series()
    for i, v in enumerate([9.0, None, 1.0, 2.0, 4.0]):
        s.add(float(i), None, v)
    c = Curves(train={"step_time_s": s})
    e = eta(Progress(step=90, total_steps=100, epoch=0, num_epochs=1, s_per_step=2.0, eta_s=20.0, generation=2), c)
    # 10 steps left; the last times since the gap: 1, 2, 4 s → 10-40 s, tqdm's point 20 s
    assert (e.point_s, e.low_s, e.high_s) == (20.0, 10.0, 40.0)
    assert eta(Progress(90, None, 0, 1, 2.0, None, 2), c).point_s is None


def test_a_quiet_log_is_stale_only_after_the_runs_own_interval(tmp_path):
    """Gen-3 prints a line every log_interval steps: 50 steps at 2 s is 100 s of silence, not a stall; a
    Gen-2 bar redraws every step."""
    from ui.train.curves import expected_gap_s
    from ui.train.data import follower

    g3 = tmp_path / "g3.log"
    g3.write_text("".join(f"step {s}: {{'loss': 2.0, 'acc_0': 0.5, 'perf/optimizer_step_time_s': 2.0}}\n"
                          for s in (50, 100)), encoding="utf-8")
    assert expected_gap_s(follower(g3).poll()) == 100.0
    g2 = tmp_path / "g2.log"
    g2.write_text(gen2_log(steps=3), encoding="utf-8")
    assert expected_gap_s(follower(g2).poll()) == 2.0  # 1.00 s/it, below the page's 2 s refresh


def test_steps_sharing_a_second_are_spread_over_it(tmp_path):
    """tqdm prints whole seconds: four steps shown at 00:01 sit 0.25 s apart, not on one instant."""
    from datetime import datetime

    from ui.train.data import follower

    mark = "===== specdeck: sf run 1 starting at 2026-11-30 10:00:00: python train.py\n"
    bars = "".join(f"\rTraining Epoch 0:  10%|#  | {n}/50 [00:{1 if n <= 4 else 2:02d}<00:10,  4.00it/s, "
                   f"loss={5 - n / 10:.2f}, acc=0.10]" for n in range(1, 6))
    log = tmp_path / "fast.log"
    log.write_text(mark + "Training Epoch 0:   0%|  | 0/50 [00:00<?, ?it/s]" + bars + "\n"
                   + "Eval - Step 5 [6/2], position 0,  Acc: 0.40\n", encoding="utf-8")
    snap = follower(log).poll()
    t0 = datetime(2026, 11, 30, 10, 0, 0).timestamp()
    got = {(r.source, r.step): t - t0 for r, t in zip(snap.records, snap.times)
           if r.kind == "metrics" and t is not None}
    assert [got[("bar", n)] for n in range(1, 6)] == pytest.approx([1.0, 1.25, 1.5, 1.75, 2.0])
    assert got[("step_line", 5)] == pytest.approx(2.0)  # printed after step 5's redraw: its time


def test_timestamped_lines_keep_the_bars_on_the_clock(tmp_path):
    """tqdm's elapsed time leaves out what happens between bars (evaluation, saving): a line with its own
    timestamp puts the bars after it back on the clock."""
    from datetime import datetime

    from ui.train.data import follower

    log = tmp_path / "t.log"
    log.write_text("===== specdeck: sf run 1 starting at 2026-11-30 10:00:00: python train.py\n"
                   "Training Epoch 0: 100%|##| 2/2 [00:02<00:00,  1.00s/it, loss=4.00, acc=0.10]\n"
                   "2026-11-30 10:00:30,000 - INFO - Saved model configuration to out/epoch_0_step_2\n"
                   "Training Epoch 1:  50%|# | 1/2 [00:01<00:01,  1.00s/it, loss=3.00, acc=0.20]\n",
                   encoding="utf-8")
    snap = follower(log).poll()
    t0 = datetime(2026, 11, 30, 10, 0, 0).timestamp()
    bars = [t - t0 for r, t in zip(snap.records, snap.times) if r.source == "bar"]
    # epoch 0's bar 2 s after the start; the save at 30 s; epoch 1's first step 1 s after that
    assert bars == pytest.approx([2.0, 31.0])


def test_bars_before_the_first_timestamp_are_placed_from_it(tmp_path):
    """Start-up (loading the target, preparing data) happens before tqdm's clock starts: the first bars are
    placed back from the first timestamped line, not forward from the run's start."""
    from datetime import datetime

    from ui.train.data import follower

    log = tmp_path / "t.log"
    log.write_text("===== specdeck: sf run 1 starting at 2026-11-30 10:00:00: python train.py\n"
                   "Training Epoch 0:  50%|# | 1/2 [00:01<00:01,  1.00s/it, loss=4.00, acc=0.10]\n"
                   "2026-11-30 10:00:21,000 - INFO - Eval - Step 1 [2/2], position 0,  Acc: 0.30\n",
                   encoding="utf-8")
    snap = follower(log).poll()
    t0 = datetime(2026, 11, 30, 10, 0, 0).timestamp()
    bar = next(t for r, t in zip(snap.records, snap.times) if r.source == "bar")
    assert bar - t0 == pytest.approx(21.0)  # 20 s of start-up, then 1 s into the bar
