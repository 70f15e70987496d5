"""The incremental reader: tqdm carriage returns, appends, torn lines, truncation and replacement,
over-long lines, Gen-2's train/eval split of 'Eval - Step' lines, derived steps and progress."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from backend.train.reader import MAX_LINE, TrainLogReader

# A resumed Gen-2 run as the supervisor captures it (stdout and stderr in one file): args block, vocab
# mapping, resume, a tqdm bar redrawn with carriage returns, interval lines, an evaluation, a save.
GEN2_RESUMED = (
    "\n -----------【args】-----------\n"
    " num_epochs ··············· 2\n"
    " ttt_length ··············· 3\n"
    "top 32000 token frequency ratio: 92.41%\n"
    "Auto-calculated total_steps: 200 (num_epochs=2 * steps_per_epoch=100)\n"
    "Loaded training state from out/epoch_0_step_50: epoch=0, step=50\n"
    "Restored optimizer/scheduler state: epoch=0, step=50, lr=9.8e-05\n"
    "Starting training from epoch:0          step:50\n"
    "Training Epoch 0:  50%|█████     | 50/100 [00:00<?, ?it/s]"
    "\rTraining Epoch 0:  51%|█████     | 51/100 [00:02<01:38,  2.00s/it, loss=4.12, acc=0.31, "
    "acceptance_rate=0.28, time=2.00s, grad_norm=2.50]"
    "\rTraining Epoch 0:  52%|█████▏    | 52/100 [00:04<01:36,  2.00s/it, loss=4.05, acc=0.33, "
    "acceptance_rate=0.30, time=2.00s, grad_norm=2.31]"
    "Eval - Step 52 [53/2], position 0,  Acc: 0.60\n"
    "Eval - Step 52 [53/2], position 1,  Acc: 0.40\n"
    "Eval - Step 52 [53/2], position 2,  Acc: 0.20\n"
    "Training Epoch 0: 100%|██████████| 100/100 [01:40<00:00,  2.00s/it, loss=3.50, acc=0.40, "
    "acceptance_rate=0.35, time=2.00s, grad_norm=1.90]\n"
    "Evaluating Epoch 0: 100%|██████████| 10/10 [00:05<00:00,  2.00it/s]\n"
    "Eval - Step 100 [101/2], position 0,  Acc: 0.65\n"
    "Saved full training state to out/epoch_0_step_100/training_state.pt\n"
)


def write(p: Path, text: str, mode: str = "a") -> None:
    with open(p, mode, encoding="utf-8", newline="") as f:
        f.write(text)


def test_resumed_gen2_log(tmp_path):
    log = tmp_path / "train.log"
    write(log, GEN2_RESUMED, "w")
    r = TrainLogReader(log)
    recs = r.read_all()
    bars = [x for x in recs if x.source == "bar" and x.split == "train"]
    assert [(b.step, b.metrics.get("loss")) for b in bars] == [(50, None), (51, 4.12), (52, 4.05), (100, 3.5)]
    assert all(b.info["step_derived"] for b in bars)
    steps = [x for x in recs if x.source == "step_line"]
    assert [(s.step, s.split, s.metrics) for s in steps] == [
        (52, "train", {"acc_0": 0.60}), (52, "train", {"acc_1": 0.40}), (52, "train", {"acc_2": 0.20}),
        (100, "eval", {"acc_0": 0.65})]
    assert [s.line_no for s in steps] == [10, 11, 12, 15]  # line 1 is the empty one before the args
    assert r.generation == 2
    assert (r.start.kind, r.start.step) == ("start", 50)
    assert [x.kind for x in recs if x.kind in ("resume", "checkpoint")] == ["resume", "resume", "checkpoint"]
    p = r.progress()
    assert (p.step, p.total_steps, p.epoch, p.num_epochs, p.s_per_step) == (100, 200, 0, 2, 2.0)
    assert p.eta_s == 200.0  # 100 steps left at 2.00 s/it
    assert r.stats.unparsed == 0 and r.stats.values_rejected == 0


def test_tqdm_redraws_are_read_as_they_come(tmp_path):
    log = tmp_path / "train.log"
    write(log, "Training Epoch 0:   0%|          | 0/10 [00:00<?, ?it/s]", "w")
    r = TrainLogReader(log)
    first = r.poll().records
    assert [(x.info["n"], x.kind) for x in first] == [(0, "progress")]  # the newest redraw, not yet ended
    assert r.poll().records == []  # not parsed twice
    write(log, "\rTraining Epoch 0:  10%|█         | 1/10 [00:01<00:09,  1.00s/it, loss=5.10, acc=0.10]")
    got = r.poll().records
    assert [(x.info["n"], x.metrics) for x in got] == [(1, {"loss": 5.10, "acc": 0.10})]
    write(log, "\rTraining Epoch 0:  20%|██        | 2/10 [00:02<00:08,  1.00s/it, loss=5.00, acc=0.12]\n")
    got = r.poll().records
    assert [(x.info["n"], x.metrics) for x in got] == [(2, {"loss": 5.00, "acc": 0.12})]
    assert r.stats.records == 3


def test_early_bar_then_log_line_glued_on(tmp_path):
    log = tmp_path / "train.log"
    write(log, "Training Epoch 0:  10%|█         | 10/100 [00:10<01:30,  1.00s/it, loss=4.00]", "w")
    r = TrainLogReader(log)
    assert [x.source for x in r.poll().records] == ["bar"]
    write(log, "Eval - Step 10 [11/1], position 0,  Acc: 0.50\n")
    got = r.poll().records
    assert [(x.source, x.metrics) for x in got] == [("step_line", {"acc_0": 0.5})]


def test_torn_line_waits_for_its_end(tmp_path):
    log = tmp_path / "train.log"
    write(log, "step 1: {'loss': 5.0}\nstep 2: {'loss': 4.", "w")
    r = TrainLogReader(log)
    assert [x.step for x in r.poll().records] == [1]
    assert r.stats.unparsed == 0
    write(log, "5, 'acc': 0.2}\n")
    got = r.poll().records
    assert [(x.step, x.metrics) for x in got] == [(2, {"loss": 4.5, "acc": 0.2})]


def test_torn_utf8_character(tmp_path):
    log = tmp_path / "train.log"
    bar = "Training Epoch 0:  10%|█         | 1/10 [00:01<00:09,  1.00s/it, loss=5.10]\n".encode()
    cut = bar.index("█".encode()) + 1  # inside the 3-byte block character
    log.write_bytes(bar[:cut])
    r = TrainLogReader(log)
    assert r.poll().records == []
    with open(log, "ab") as f:
        f.write(bar[cut:])
    got = r.poll().records
    assert [(x.info["n"], x.metrics) for x in got] == [(1, {"loss": 5.10})]
    assert r.stats.unparsed == 0


def test_truncation_starts_over(tmp_path):
    log = tmp_path / "train.log"
    write(log, "step 1: {'loss': 5.0}\nstep 2: {'loss': 4.0}\n", "w")
    r = TrainLogReader(log)
    assert len(r.poll().records) == 2
    write(log, "step 1: {'loss': 9.0}\n", "w")  # shorter: a new run wrote the file again
    chunk = r.poll()
    assert chunk.reset
    assert [(x.step, x.metrics["loss"], x.line_no) for x in chunk.records] == [(1, 9.0, 1)]
    assert r.stats.resets == 1 and r.stats.records == 1


def test_replaced_file_starts_over(tmp_path):
    log = tmp_path / "train.log"
    write(log, "step 1: {'loss': 5.0}\n", "w")
    r = TrainLogReader(log)
    r.poll()
    other = tmp_path / "new.log"
    write(other, "step 1: {'loss': 7.0}\nstep 2: {'loss': 6.0}\nstep 3: {'loss': 5.5}\n", "w")
    os.replace(other, log)
    chunk = r.poll()
    assert chunk.reset
    assert [x.metrics["loss"] for x in chunk.records] == [7.0, 6.0, 5.5]


def test_missing_file_reads_nothing(tmp_path):
    r = TrainLogReader(tmp_path / "not-yet.log")
    assert r.poll().records == []
    write(tmp_path / "not-yet.log", "step 4: {'loss': 1.0}\n", "w")
    assert [x.step for x in r.poll().records] == [4]


def test_overlong_line_is_counted_and_skipped(tmp_path):
    log = tmp_path / "train.log"
    write(log, "step 1: {'loss': 5.0}\n" + "x" * (MAX_LINE + 10), "w")
    r = TrainLogReader(log)
    r.poll()
    write(log, "y" * 1000 + "\nstep 2: {'loss': 4.0}\n")
    r.poll()
    assert r.stats.unparsed == 1
    assert "longer than" in r.unparsed[0].reason
    assert r.stats.records == 2


def test_unparsed_lines_are_counted_with_reasons(tmp_path):
    log = tmp_path / "train.log"
    write(log, "Eval - Step 5 [6/1], position x,  Acc: 0.3\nstep 6: {'loss': -1.0, 'acc': 0.5}\n"
               "some library warning\n", "w")
    r = TrainLogReader(log)
    recs = r.read_all()
    assert [x.metrics for x in recs] == [{"acc": 0.5}]
    assert (r.stats.unparsed, r.stats.values_rejected, r.stats.ignored) == (1, 1, 1)
    assert [(u.line_no, u.reason) for u in r.unparsed] == [
        (1, "an 'Eval - Step' line without the step, position, metric and value SpecForge prints"),
        (2, "value dropped: loss: -1.0 is negative")]


def test_multi_rank_output(tmp_path):
    log = tmp_path / "train.log"
    write(log, "[rank1]: rank 1: Initialized dist\n"
               "[rank0]: step 10: {'loss': 3.0}\n"
               "[rank1]: step 10: {'loss': 3.1}\n", "w")
    recs = TrainLogReader(log).read_all()
    assert [(x.rank, x.metrics["loss"]) for x in recs] == [(0, 3.0), (1, 3.1)]


def test_gen3_progress_from_step_lines(tmp_path):
    log = tmp_path / "train.log"
    write(log, "step 50: {'loss': 3.0}\nstep 100: {'loss': 2.5}\n", "w")
    r = TrainLogReader(log)
    r.read_all()
    p = r.progress()
    assert (p.step, p.generation, p.eta_s) == (100, 3, None)  # no bar through a pipe: no rate, no ETA


def test_crlf_and_lone_cr_line_numbers(tmp_path):
    log = tmp_path / "train.log"
    log.write_bytes(b"step 1: {'loss': 5.0}\r\nstep 2: {'loss': 4.0}\r\n")
    recs = TrainLogReader(log).read_all()
    assert [(x.step, x.line_no) for x in recs] == [(1, 1), (2, 2)]


@pytest.mark.parametrize("pieces", [3, 17, 101])
def test_any_split_of_the_file_gives_the_same_records(tmp_path, pieces):
    data = GEN2_RESUMED.encode()
    whole = tmp_path / "whole.log"
    whole.write_bytes(data)
    expect = [(x.source, x.step, x.metrics, x.line_no) for x in TrainLogReader(whole).read_all()]
    log = tmp_path / "grow.log"
    log.write_bytes(b"")
    r = TrainLogReader(log)
    got = []
    size = max(1, len(data) // pieces)
    for i in range(0, len(data), size):
        with open(log, "ab") as f:
            f.write(data[i:i + size])
        got.extend(r.poll().records)
    got.extend(r.flush())
    assert [(x.source, x.step, x.metrics, x.line_no) for x in got] == expect


def test_supervisor_run_marks_start_a_new_run(tmp_path):
    log = tmp_path / "train.log"
    write(log, "===== specdeck: a-training-process-with-a-long-name run 20261130T100000-4f2a starting at "
               "2026-11-30 10:00:00: python -m trainer --epochs 2\n"
               "Auto-calculated total_steps: 20 (num_epochs=2 * steps_per_epoch=10)\n"
               "Training Epoch 0:  30%|███       | 3/10 [00:03<00:07,  1.00s/it, loss=5.00]"
               "\n===== specdeck: demo-train run r1 ended at 2026-11-30 10:00:04: killed by signal 15\n"
               "===== specdeck: demo-train run r2 starting at 2026-11-30 10:01:00: python -m trainer --resume\n"
               "Starting training from epoch:0          step:3\n", "w")
    r = TrainLogReader(log)
    recs = r.read_all()
    marks = [(x.kind, x.info["run_id"], x.info.get("exit_code")) for x in recs if x.source == "supervisor"]
    assert marks == [("run_start", "20261130T100000-4f2a", None), ("run_end", "r1", -15), ("run_start", "r2", None)]
    assert recs[0].info["command"] == "python -m trainer --epochs 2"
    assert recs[0].wall_time == time.mktime(time.strptime("2026-11-30 10:00:00", "%Y-%m-%d %H:%M:%S"))
    assert r.run_id == "r2"
    p = r.progress()
    # r1's total and rate do not stand for r2; r2 resumes at step 3
    assert (p.step, p.total_steps, p.s_per_step, p.eta_s) == (3, None, None, None)
    assert r.start.step == 3


def test_bar_without_a_total_and_gen3_bar(tmp_path):
    log = tmp_path / "train.log"
    write(log, "Training Epoch 1: 457it [09:28,  1.05s/it, loss=1.11]\n"
               "Training:  10%|█         | 100/1000 [01:00<09:00,  1.67step/s]\n", "w")
    r = TrainLogReader(log)
    a, b = r.read_all()
    assert (a.epoch, a.info["n"], a.info["total"], a.elapsed_s, a.metrics, a.step) == (1, 457, None, 568.0,
                                                                                        {"loss": 1.11}, None)
    assert (b.generation, b.step, b.info["total"]) == (None, 100, 1000)  # a bar alone names no trainer
    assert b.info["s_per_it"] == pytest.approx(1 / 1.67)
    p = r.progress()
    assert (p.step, p.total_steps) == (100, 1000)
    assert p.eta_s == pytest.approx(900 / 1.67)


def test_poll_budget_catches_up_in_steps(tmp_path):
    log = tmp_path / "train.log"
    write(log, "".join(f"step {i}: {{'loss': 1.5}}\n" for i in range(1, 201)), "w")  # 22-23 bytes a line
    r = TrainLogReader(log)
    first = r.poll(max_bytes=1000).records
    assert 0 < len(first) < 50
    rest = r.read_all()
    assert [x.step for x in first + rest] == list(range(1, 201))


def test_max_num_steps_caps_the_total_and_the_end_line_ends_the_eta(tmp_path):
    """The H200 run (docs/bench/train-h200): --num-epochs 1000 --max-num-steps 1500, so the trainer prints
    'Auto-calculated total_steps: 125000' but stops at 1500; the supervisor's end line closes the log."""
    log = Path(__file__).resolve().parents[2] / "docs" / "bench" / "train-h200" / "train.log"
    text = log.read_text(encoding="utf-8")
    assert "Auto-calculated total_steps: 125000" in text and "max_num_steps" in text
    cut = text.rindex("===== specdeck:")  # the run still going: everything before the end line
    running = tmp_path / "running.log"
    running.write_text(text[:cut], encoding="utf-8")
    r = TrainLogReader(running)
    r.read_all()
    p = r.progress()
    assert (p.step, p.total_steps, p.ended) == (1500, 1500, None)
    assert p.eta_s == 0
    r = TrainLogReader(log)
    r.read_all()
    p = r.progress()
    assert (p.step, p.total_steps) == (1500, 1500)
    assert p.ended == "exit code 0" and p.eta_s is None
