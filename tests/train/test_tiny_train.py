"""The tiny trainer trains for real: one seeded CPU run (a child process, as the supervisor starts it) read back
by the project's own log reader, tracker reader and checkpoint inspection; a resume from a mid-epoch
checkpoint ends on the same weights as the uninterrupted run; SIGTERM stops at a step with a checkpoint."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from backend.train.checkpoints import inspect_checkpoint, list_checkpoints
from backend.flows.checkpoint_check import preflight_checkpoint
from backend.train.reader import TrainLogReader
from backend.flows.tiny.demo_data import write_demo_data
from backend.train.trackers import TensorboardReader

REPO = Path(__file__).resolve().parents[2]
# 48 usable rows, batch 4: 12 steps per epoch, 36 in all; checkpoints at 8, 16, 24, 32 and the final 36;
# metrics and an evaluation over 16 other rows every 4 steps
ARGS = ["--num-epochs", "3", "--batch-size", "4", "--learning-rate", "1e-2", "--max-length", "96",
        "--ttt-length", "3", "--log-interval", "4", "--eval-interval", "4", "--save-interval", "8", "--seed", "0",
        "--device", "cpu"]
BAD_ROW = {"id": "bad-1", "conversations": [{"from": "robot", "value": "beep"}]}
PROMPT_ONLY = {"id": "prompt-1", "prompt": "a prompt without a reply"}


def _env() -> dict:
    env = dict(os.environ)
    env.pop("OMP_NUM_THREADS", None)  # one thread: the same floats on every run
    env["PYTHONPATH"] = str(REPO)
    return env


def start(run: dict, out: Path, log: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "backend.flows.tiny", "train", "--target-model-path", str(run["target"]),
           "--train-data-path", str(run["data"]), "--eval-data-path", str(run["eval"]), "--output-dir", str(out),
           *ARGS, *extra]
    with open(log, "ab") as f:
        return subprocess.Popen(cmd, cwd=REPO, stdout=f, stderr=subprocess.STDOUT, env=_env())


def finish(p: subprocess.Popen, timeout: float = 240) -> int:
    try:
        return p.wait(timeout=timeout)
    finally:
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> dict:
    from backend.flows.tiny.target import make_target  # loads torch: at the first test, not at collection

    d = tmp_path_factory.mktemp("tiny")
    target = make_target(d / "target", "tiny")
    data = write_demo_data(d / "data.jsonl", rows=48)
    ev = write_demo_data(d / "eval.jsonl", rows=16, seed=1)
    with open(data, "a", encoding="utf-8") as f:
        f.write(json.dumps(BAD_ROW) + "\n" + json.dumps(PROMPT_ONLY) + "\n")
    r = {"dir": d, "target": target, "data": data, "eval": ev, "out": d / "out", "log": d / "train.log"}
    rc = finish(start(r, r["out"], r["log"], "--report-to", "tensorboard"))
    r["text"] = r["log"].read_text(encoding="utf-8")
    assert rc == 0, r["text"][-3000:]
    reader = TrainLogReader(r["log"])
    r["records"] = reader.read_all()
    r["reader"] = reader
    return r


def _bars(records) -> list:
    return [x for x in records if x.source == "bar" and x.metrics and x.split == "train"]


def _step_lines(records, name: str, split: str = "train") -> dict[tuple[int, int], float]:
    return {(x.step, x.position): x.metrics[f"{name}_{x.position}"] for x in records
            if x.source == "step_line" and x.split == split and f"{name}_{x.position}" in x.metrics}


def test_loss_falls_and_acc_rises(run):
    bars = _bars(run["records"])
    first, last = bars[:4], bars[-4:]
    mean = lambda xs, k: sum(x.metrics[k] for x in xs) / len(xs)  # noqa: E731
    assert mean(last, "loss") < mean(first, "loss") - 1.0, [(b.step, b.metrics["loss"]) for b in bars]
    acc0 = _step_lines(run["records"], "acc")
    assert (acc0[(32, 0)] + acc0[(36, 0)]) / 2 > (acc0[(4, 0)] + acc0[(8, 0)]) / 2 + 0.15, sorted(acc0.items())
    # on rows it never trained on
    ev_acc = _step_lines(run["records"], "acc", "eval")
    ev_loss = _step_lines(run["records"], "ploss", "eval")
    ev_rate = _step_lines(run["records"], "acceptance_rate", "eval")
    assert ev_acc[(36, 0)] > ev_acc[(4, 0)] + 0.2, sorted(ev_acc.items())
    assert ev_loss[(36, 0)] < ev_loss[(4, 0)] - 1.0, sorted(ev_loss.items())
    assert ev_rate[(36, 0)] > ev_rate[(4, 0)] + 0.1, sorted(ev_rate.items())


def test_reader_parses_every_line_as_printed(run):
    reader, recs, text = run["reader"], run["records"], run["text"]
    assert reader.stats.unparsed == 0 and reader.stats.values_rejected == 0, list(reader.unparsed)
    assert [b.step for b in _bars(recs)] == list(range(1, 37))  # every step once, at its number
    # each 'Eval - Step' line of the text, read here with a plain regular expression, is a record, in order
    printed = re.findall(r"Eval - Step (\d+) \[\d+/3\], position (\d),\s+(Acc|Acceptance Rate|pLoss): (\S+)", text)
    assert len(printed) == 2 * 9 * 3 * 3  # training and evaluation, steps 4..36, three positions, three metrics
    names = {"Acc": "acc", "Acceptance Rate": "acceptance_rate", "pLoss": "ploss"}
    got = [(r.step, r.position, k, v) for r in recs if r.source == "step_line" for k, v in r.metrics.items()]
    assert got == [(int(s), int(p), f"{names[n]}_{p}", float(v)) for s, p, n, v in printed]
    splits = [r.split for r in recs if r.source == "step_line"]
    assert splits == (["train"] * 9 + ["eval"] * 9) * 9  # eval lines follow an 'Evaluating' bar
    total = next(r for r in recs if r.kind == "total_steps")
    assert total.info == {"total_steps": 36, "num_epochs": 3, "steps_per_epoch": 12}
    start = next(r for r in recs if r.kind == "start")
    assert (start.epoch, start.step) == (0, 0)
    saved = [Path(r.info["path"]).name for r in recs if r.kind == "checkpoint" and r.info["what"] == "training_state"]
    assert saved == ["epoch_0_step_8", "epoch_1_step_16", "epoch_1_step_24", "epoch_2_step_32", "epoch_2_step_36"]
    assert next(r for r in recs if r.kind == "completed").step == 36
    prog = reader.progress()
    assert (prog.step, prog.total_steps, prog.generation) == (36, 36, 2)
    # the unusable rows are named with their file, line and field, and the rest trained
    assert "Row left out: data.jsonl:49: conversations[0].role: unknown role 'robot'" in text
    assert "1 without an assistant token within --max-length 96" in text


def test_tensorboard_files_hold_the_printed_values(run):
    recs = TensorboardReader(run["out"] / "runs").poll()
    tb = {(r.step, k): v for r in recs if r.split == "train" for k, v in r.metrics.items()}
    for (step, pos), acc in _step_lines(run["records"], "acc").items():
        assert round(tb[(step, f"acc_{pos}")], 2) == acc
    assert sorted({s for s, _ in tb}) == list(range(4, 37, 4))
    assert all(tb[(s, "lr")] > 0 for s in range(4, 36, 4))


def test_checkpoints_inspected_and_preflighted(run):
    listed = list_checkpoints(run["out"])
    assert [c.name for c in listed.checkpoints] == [
        "epoch_0_step_8", "epoch_1_step_16", "epoch_1_step_24", "epoch_2_step_32", "epoch_2_step_36"]
    assert listed.latest.name == "epoch_2_step_36"
    info = inspect_checkpoint(run["out"] / "epoch_2_step_36")
    # tiny: hidden 64, aux layers 3 -> fc takes 192; vocabulary 2,112, a quarter of it (528) for the draft
    assert info.fc_shape == (64, 192) and info.layers == 1
    assert info.draft.vocab_size == 2112 and info.draft_vocab == 528
    assert info.has_d2t and info.has_t2d and info.draft.d2t.shape == (528,) and info.draft.t2d.shape == (2112,)
    assert info.draft.arch == "LlamaForCausalLMEagle3" and info.draft.eagle_layer_ids == (1, 2, 4)
    assert (info.state.epoch, info.state.step) == (2, 36)
    assert info.servable and info.notes == () and info.config_error is None and info.state_error is None
    mid = inspect_checkpoint(run["out"] / "epoch_1_step_16")
    assert (mid.state.epoch, mid.state.step) == (1, 16)
    findings = preflight_checkpoint(run["out"] / "epoch_2_step_36", run["target"])
    assert [f for f in findings if f.severity == "error"] == []


def test_resume_from_mid_epoch_matches_the_uninterrupted_run(run):
    import torch
    from safetensors.torch import load_file

    out = run["dir"] / "resumed"
    out.mkdir()
    shutil.copytree(run["out"] / "epoch_1_step_16", out / "epoch_1_step_16")
    log = run["dir"] / "resumed.log"
    assert finish(start(run, out, log, "--resume")) == 0, log.read_text()[-3000:]
    text = log.read_text(encoding="utf-8")
    assert f"Loaded training state from {out / 'epoch_1_step_16'}/training_state.pt: epoch=1, step=16" in text
    reader = TrainLogReader(log)
    recs = reader.read_all()
    assert reader.stats.unparsed == 0
    resume = [r for r in recs if r.kind == "resume"]
    assert [(r.epoch, r.step) for r in resume] == [(1, 16), (1, 16)]
    start_rec = next(r for r in recs if r.kind == "start")
    assert (start_rec.epoch, start_rec.step) == (1, 16)
    assert [b.step for b in _bars(recs)] == list(range(17, 37))
    # the same batches, optimizer and schedule: the steps after 16 print what the first run printed ...
    before = {b.step: b.metrics["loss"] for b in _bars(run["records"])}
    assert {b.step: b.metrics["loss"] for b in _bars(recs)} == {s: before[s] for s in range(17, 37)}
    # the supervisor appends the resumed run to the same log after its own line: read as the runs they are
    joined = run["dir"] / "joined.log"
    joined.write_text(run["text"] + "===== specdeck: tiny run r2 starting at 2026-11-30 13:00:00: python -m "
                      "backend.flows.tiny train --resume\n" + text, encoding="utf-8")
    both = TrainLogReader(joined)
    recs2 = both.read_all()
    cut = next(i for i, r in enumerate(recs2) if r.kind == "run_start")
    assert [b.step for b in _bars(recs2[:cut])] == list(range(1, 37))
    assert [b.step for b in _bars(recs2[cut:])] == list(range(17, 37))
    assert both.stats.unparsed == 0 and both.progress().step == 36
    # ... and the last checkpoint holds the same weights
    a = load_file(str(run["out"] / "epoch_2_step_36" / "model.safetensors"))
    b = load_file(str(out / "epoch_2_step_36" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_sigterm_stops_at_a_step_with_its_checkpoint(run):
    out = run["dir"] / "stopped"
    log = run["dir"] / "stopped.log"
    p = start(run, out, log)
    try:
        deadline = time.monotonic() + 120
        while "Starting training from epoch" not in log.read_text(encoding="utf-8"):  # the handler is set
            assert p.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.02)
        p.send_signal(signal.SIGTERM)
        assert finish(p, timeout=120) == 0
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    text = log.read_text(encoding="utf-8")
    m = re.search(r"Stopping at step (\d+) on SIGTERM", text)
    assert m, text[-3000:]
    step = int(m.group(1))
    assert 1 <= step < 36
    latest = list_checkpoints(out).latest
    assert latest.step == step and inspect_checkpoint(latest.path).state.step == step
    assert "Training completed" not in text
