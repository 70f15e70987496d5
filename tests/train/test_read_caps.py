"""Training files of absurd size cost the dashboard nothing: a checkpoint folder's are refused by
name with the read limit, before anything is read.

The memory figures are taken in a fresh process (its peak RSS is then the call's own; a test process's
peak is whatever an earlier test left)."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from backend.readcap import MiB
from backend.modelinfo import ModelInfoError, read_json_config, read_safetensors_header
from backend.train.checkpoints import inspect_checkpoint, list_checkpoints
from backend.train.torchstate import StateReadError, read_training_state
from tests.train.ckpt_files import write_checkpoint

REPO = Path(__file__).resolve().parents[2]
GIB = 1 << 30


def sparse(path: Path, head: bytes, size: int) -> Path:
    """``head`` then zeros up to ``size`` bytes: a file of that size that uses no disk."""
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)
    return path


_PROBE = r"""
import json, resource, sys
sys.path.insert(0, sys.argv[1])
import psutil
from backend.train.checkpoints import inspect_checkpoint

inspect_checkpoint(sys.argv[2])  # a small checkpoint first: imports and first-call costs out of the figure
proc = psutil.Process()
rss0, peak0 = proc.memory_info().rss, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
info = inspect_checkpoint(sys.argv[3])
rss1, peak1 = proc.memory_info().rss, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"rss_growth": rss1 - rss0, "peak_growth": peak1 - peak0, "config_error": info.config_error}))
"""


@pytest.mark.timeout(120)
def test_a_1gb_config_json_is_refused_by_name_and_costs_no_memory(tmp_path):
    small = write_checkpoint(tmp_path / "epoch_0_step_100")
    big = write_checkpoint(tmp_path / "epoch_0_step_200")
    sparse(big / "config.json", b"{", GIB)
    out = subprocess.run([sys.executable, "-c", _PROBE, str(REPO), str(small), str(big)], capture_output=True,
                         text=True, timeout=100)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["config_error"] == (f"{big / 'config.json'}: 1 GiB, over the 16 MiB read limit for a model config; "
                                   "not read")
    assert got["rss_growth"] < 50 * MiB, got
    assert got["peak_growth"] < 50 * MiB, got  # a plain read_text: +2.0 GiB (the file as bytes, then as text)


def test_the_refusal_is_what_the_training_page_shows(tmp_path):
    ck = write_checkpoint(tmp_path / "epoch_1_step_10")
    sparse(ck / "config.json", b"{", GIB)
    info = inspect_checkpoint(ck)
    assert info.draft is None and not info.servable
    assert "over the 16 MiB read limit" in info.config_error and info.why_not_servable == info.config_error
    with pytest.raises(ModelInfoError, match=r"config\.json: 1 GiB, over the 16 MiB read limit"):
        read_json_config(ck / "config.json")


def test_a_huge_safetensors_header_length_is_refused_before_any_allocation(tmp_path):
    ck = write_checkpoint(tmp_path / "epoch_0_step_5")
    st = ck / "model.safetensors"
    # a length prefix of 1 TiB on a (sparse) 2 GiB file: within the file is not enough, it must be under the cap
    sparse(st, struct.pack("<Q", 1 << 40) + b"{", 2 * GIB)
    with pytest.raises(ModelInfoError) as e:
        read_safetensors_header(st)
    assert str(e.value) == (f"{st}: header length field says 1024 GiB, over the 100 MiB read limit for a "
                            "safetensors header; not read (not a safetensors file, or corrupt)")
    sparse(st, struct.pack("<Q", 1 * GIB) + b"{", 2 * GIB)  # inside the file, over the cap
    with pytest.raises(ModelInfoError, match="1 GiB, over the 100 MiB read limit"):
        read_safetensors_header(st)
    info = inspect_checkpoint(ck)
    assert info.draft is not None and "over the 100 MiB read limit" in info.draft.weights_error


def test_a_huge_best_meta_is_a_problem_of_the_listing(tmp_path):
    write_checkpoint(tmp_path / "run1-step100")
    sparse(tmp_path / "run1.best_meta.json", b"{", GIB)
    run = list_checkpoints(tmp_path)
    assert run.best_meta is None
    assert any("run1.best_meta.json: 1 GiB, over the 16 MiB read limit" in p for p in run.problems)


def test_a_huge_link_file_is_not_read_as_a_link(tmp_path):
    write_checkpoint(tmp_path / "run1-step100")
    sparse(tmp_path / "run1-latest", b"run1-step100", GIB)
    run = list_checkpoints(tmp_path)
    assert any("run1-latest: points to a folder that does not exist" in p for p in run.problems)


def test_a_training_state_whose_pickle_is_over_the_cap(tmp_path):
    p = tmp_path / "training_state.pt"
    with zipfile.ZipFile(p, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("archive/data.pkl", bytes(65 * MiB))  # zeros: a few kilobytes compressed
    with pytest.raises(StateReadError) as e:
        read_training_state(p)
    assert str(e.value) == (f"{p} (archive/data.pkl): 65 MiB, over the 64 MiB read limit for a training state's "
                            "pickle; not read")


def test_an_mlflow_metric_file_over_the_limit_is_read_up_to_it_and_says_so(tmp_path, monkeypatch):
    from backend.train import trackers

    m = tmp_path / "metrics" / "train"
    m.mkdir(parents=True)
    lines = "".join(f"17000000{i:05d} 0.5 {i}\n" for i in range(1000))  # 20 to 22 bytes a line: 21.4 KiB
    (m / "acc_0").write_text(lines)
    monkeypatch.setattr(trackers, "METRICS_FILE_MAX", 1000)
    recs, problems = trackers.read_mlflow_run(tmp_path)
    whole = lines[:1000].count("\n")
    assert [r.step for r in recs] == list(range(whole))  # the line the limit falls in is left out, not misread
    assert problems == [f"{m / 'acc_0'}: only the first 1,000 bytes of 21.4 KiB read (the read limit); "
                        "the later steps are not shown"]


def test_a_tensorboard_record_longer_than_one_read_is_a_problem_not_a_stall(tmp_path):
    from backend.train.trackers import TensorboardReader
    from tests.train.test_trackers import frame, scalar_event

    f = tmp_path / "events.out.tfevents.1.h"
    f.write_bytes(frame(scalar_event(1.0, 1, [("train/acc_0", 0.5)] * 200)))  # a ~3 KB event
    tb = TensorboardReader(tmp_path, max_bytes=1024)
    assert tb.poll() == []
    assert tb.stats.broken_files == 1
    assert any("over the 1,024-byte read size" in k for k in tb.stats.problems)
