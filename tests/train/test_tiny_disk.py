"""The project's trainer on a failing disk: each file and folder of a save is flushed (fsync) before the
rename; a full disk (ENOSPC, injected in process) ends the run with one line "no space left on device in
OUTPUT_DIR" and exit 1, leaving no temporary folder; torch's "unexpected pos" after a short write is read as a
full disk when the free space says so; temp folders a killed run left are removed at the next start; and a
resume passes over a torn checkpoint to the newest good one, saying which."""

from __future__ import annotations

import argparse
import errno
import os
import shutil
import subprocess
import sys

import pytest

from backend.flows.tiny.__main__ import main
from backend.flows.tiny.demo_data import write_demo_data
from backend.train.checkpoints import list_checkpoints, verify_checkpoint
from backend.train.runs import failure_reason


def _train_argv(d, out, *extra):
    return ["train", "--target-model-path", str(d / "target"), "--train-data-path", str(d / "data.jsonl"),
            "--output-dir", str(out), "--num-epochs", "1", "--batch-size", "4", "--max-length", "64",
            "--ttt-length", "2", "--save-interval", "2", "--log-interval", "2", "--seed", "0", "--device", "cpu",
            *extra]


@pytest.fixture(scope="module")
def checkpoint():
    """The tiny trainer's checkpoint module (it loads torch: imported when a test runs, not when the
    suite is collected in every worker)."""
    from backend.flows.tiny import checkpoint

    return checkpoint


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A finished 4-step run: checkpoints epoch_0_step_2 and epoch_0_step_4."""
    from backend.flows.tiny.target import make_target

    d = tmp_path_factory.mktemp("tinydisk")
    make_target(d / "target", "tiny")
    write_demo_data(d / "data.jsonl", rows=16)
    assert main(_train_argv(d, d / "out")) == 0
    assert sorted(p.name for p in (d / "out").iterdir() if p.name.startswith("epoch")) == [
        "epoch_0_step_2", "epoch_0_step_4"]
    return d


def _small():
    import torch

    lin = torch.nn.Linear(4, 4)
    opt = torch.optim.AdamW(lin.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    return lin, opt, sched, argparse.Namespace(batch_size=1)


def test_a_save_flushes_each_file_and_both_folders_before_and_after_the_rename(checkpoint, tmp_path, monkeypatch):
    synced: list[str] = []
    real = os.fsync

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    lin, opt, sched, args = _small()
    saved = checkpoint.save(tmp_path, 0, 3, lin, {"a": 1}, opt, sched, args)
    tmp = str(tmp_path / f".epoch_0_step_3.tmp-{os.getpid()}")
    assert synced == [f"{tmp}/config.json", f"{tmp}/model.safetensors", f"{tmp}/training_state.pt", tmp,
                      str(tmp_path)]
    assert saved.path == tmp_path / "epoch_0_step_3" and verify_checkpoint(saved.path) == ()


def test_enospc_in_a_save_is_disk_full_and_leaves_no_temp_folder(checkpoint, tmp_path, monkeypatch):
    real = os.fsync

    def fsync(fd):
        if os.readlink(f"/proc/self/fd/{fd}").endswith("training_state.pt"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # delayed allocation: said at the flush
        return real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    lin, opt, sched, args = _small()
    with pytest.raises(checkpoint.DiskFull) as e:
        checkpoint.save(tmp_path, 0, 3, lin, {}, opt, sched, args)
    assert str(e.value) == f"no space left on device in {tmp_path} (writing epoch_0_step_3/training_state.pt)"
    assert e.value.errno == errno.ENOSPC
    assert list(tmp_path.iterdir()) == []


def test_torchs_unexpected_pos_is_disk_full_only_when_the_disk_is(checkpoint, tmp_path, monkeypatch):
    def short(obj, fh, *a, **k):
        raise RuntimeError("[enforce fail at inline_container.cc:603] . unexpected pos 4416 vs 4310")

    monkeypatch.setattr(checkpoint.torch, "save", short)
    lin, opt, sched, args = _small()
    monkeypatch.setattr(checkpoint, "free_bytes", lambda folder: 4096)
    with pytest.raises(checkpoint.DiskFull, match=f"^no space left on device in {tmp_path} "):
        checkpoint.save(tmp_path, 0, 3, lin, {}, opt, sched, args)
    monkeypatch.setattr(checkpoint, "free_bytes", lambda folder: 50 << 30)
    with pytest.raises(RuntimeError, match="unexpected pos"):
        checkpoint.save(tmp_path, 0, 3, lin, {}, opt, sched, args)
    assert list(tmp_path.iterdir()) == []


def test_a_run_that_fills_the_disk_ends_with_one_plain_line_and_resumes_after(checkpoint, base, tmp_path, monkeypatch,
                                                                              capsys):
    out = tmp_path / "out"
    real = checkpoint._write

    def write(path, fn):
        if path.name == "model.safetensors" and "step_4" in str(path):
            with open(path, "wb") as fh:
                fh.write(b"\0" * 100)  # part of it went out before the disk filled
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(path, fn)

    monkeypatch.setattr(checkpoint, "_write", write)
    assert main(_train_argv(base, out)) == 1
    lines = capsys.readouterr().err.splitlines()
    last = lines[-1].rsplit("\r", 1)[-1]
    assert last.endswith(f" - ERROR - no space left on device in {out} (writing epoch_0_step_4/model.safetensors); "
                         "the checkpoints saved before stay, resume once space is freed"), lines[-3:]
    assert sorted(p.name for p in out.iterdir() if p.name != "cache") == ["epoch_0_step_2"]  # no temp folder
    # the Training page's reason for the failed run is that line, not "Traceback"
    why = failure_reason([ln.rsplit("\r", 1)[-1] for ln in lines], out)
    assert f"ERROR - no space left on device in {out} (writing epoch_0_step_4/model.safetensors)" in why
    monkeypatch.setattr(checkpoint, "_write", real)  # space freed
    assert main(_train_argv(base, out, "--resume")) == 0
    err = capsys.readouterr().err
    assert f"Loaded training state from {out / 'epoch_0_step_2'}/training_state.pt: epoch=0, step=2" in err
    assert [c.name for c in list_checkpoints(out).checkpoints if not c.torn] == ["epoch_0_step_2", "epoch_0_step_4"]


def test_resume_passes_over_a_torn_checkpoint_to_the_newest_good_one(base, tmp_path, capsys):
    out = tmp_path / "out"
    shutil.copytree(base / "out", out)
    f = out / "epoch_0_step_4" / "model.safetensors"
    os.truncate(f, f.stat().st_size - 50)
    assert list_checkpoints(out).latest_good.name == "epoch_0_step_2"
    assert main(_train_argv(base, out, "--resume", "--num-epochs", "2")) == 0
    err = capsys.readouterr().err
    assert f"Checkpoint {out / 'epoch_0_step_4'} cannot be resumed from (torn or incomplete): {f}: cannot be read" in err
    assert "Resuming from epoch_0_step_2, the newest good checkpoint; skipped the torn epoch_0_step_4" in err
    assert f"Loaded training state from {out / 'epoch_0_step_2'}/training_state.pt: epoch=0, step=2" in err
    assert verify_checkpoint(out / "epoch_0_step_4") == ()  # saved again, whole
    assert list_checkpoints(out).latest.name == "epoch_1_step_8"


def test_temp_folders_of_dead_runs_are_removed_at_start(checkpoint, tmp_path):
    import logging

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "backend.flows.tiny"])
    try:
        for name in (f".epoch_0_step_2.tmp-{dead.pid}", f".epoch_0_step_4.old-{dead.pid}",
                     f".epoch_0_step_6.old-{dead.pid}", "epoch_0_step_6", f".epoch_0_step_8.tmp-{alive.pid}",
                     f".epoch_0_step_9.tmp-{os.getpid()}"):
            (tmp_path / name).mkdir()
            (tmp_path / name / "config.json").write_text(name)
        done = checkpoint.clean_temp(tmp_path, logging.getLogger("test"))
        assert len(done) == 4
        assert sorted(p.name for p in tmp_path.iterdir()) == [
            f".epoch_0_step_8.tmp-{alive.pid}", "epoch_0_step_4", "epoch_0_step_6"]
        # an interrupted re-save's previous copy is put back; the newer copy of 6 is kept
        assert (tmp_path / "epoch_0_step_4" / "config.json").read_text() == f".epoch_0_step_4.old-{dead.pid}"
        assert (tmp_path / "epoch_0_step_6" / "config.json").read_text() == "epoch_0_step_6"
    finally:
        alive.terminate()
        alive.wait()


def test_failure_reason_reads_a_traceback_and_torchs_short_write(tmp_path, monkeypatch):
    import backend.train.runs as runs

    tb = ["Training Epoch 0: 5%", "Traceback (most recent call last):", '  File "train.py", line 9, in <module>',
          "    torch.save(state, path)",
          "RuntimeError: [enforce fail at inline_container.cc:595] . unexpected pos 1093 vs 1009"]
    monkeypatch.setattr(runs, "_free", lambda p: 1024)
    assert failure_reason(tb, tmp_path) == (f"no space left on device in {tmp_path} (torch: RuntimeError: [enforce "
                                            "fail at inline_container.cc:595] . unexpected pos 1093 vs 1009)")
    monkeypatch.setattr(runs, "_free", lambda p: 200 << 30)
    assert failure_reason(tb, tmp_path).startswith(f"torch could not write a file in {tmp_path}: RuntimeError")
    assert failure_reason(["Traceback (most recent call last):", '  File "x.py", line 1', "    f()",
                           "ValueError: bad shape"], tmp_path) == "ValueError: bad shape"
    assert failure_reason(["OSError: [Errno 28] No space left on device: '/runs/out/epoch_1/x.pt'"]) == \
        "no space left on device in /runs/out/epoch_1"
    assert failure_reason(["all fine"]) is None
