"""``python -m backend.cli train …``: parselog as a real subprocess, the other commands in-process."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

from backend.cli import main
from tests.train.ckpt_files import eagle3_tensors, write_checkpoint, write_target
from tests.train.test_reader import GEN2_RESUMED

REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "backend.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


def test_parselog_json_lines(tmp_path):
    log = tmp_path / "train.log"
    log.write_text(GEN2_RESUMED + "Eval - Step 7 [8/2], position 1,  Acc: 3.5\n", encoding="utf-8")
    p = run_cli("train", "parselog", str(log), "--json")
    assert p.returncode == 0, p.stderr
    rows = [json.loads(line) for line in p.stdout.splitlines()]
    steps = [r for r in rows if r["source"] == "step_line"]
    assert [(r["step"], r["position"], r["split"], r["metrics"]) for r in steps] == [
        (52, 0, "train", {"acc_0": 0.6}), (52, 1, "train", {"acc_1": 0.4}), (52, 2, "train", {"acc_2": 0.2}),
        (100, 0, "eval", {"acc_0": 0.65})]
    bar = next(r for r in rows if r["source"] == "bar" and r["step"] == 51)
    assert (bar["epoch"], bar["metrics"]["acceptance_rate"], bar["metrics"]["grad_norm"]) == (0, 0.28, 2.5)
    assert f"{log}:17: acc_1: 3.5 is outside 0..1" in p.stderr
    assert "1 unparsed" in p.stderr and "SpecForge Gen-2" in p.stderr


def test_parselog_text_and_unreadable(tmp_path):
    log = tmp_path / "t.log"
    log.write_text("step 3: {'loss': 2.5, 'acc_0': 0.7}\n", encoding="utf-8")
    out = io.StringIO()
    assert main(["train", "parselog", str(log)], out=out) == 0
    assert out.getvalue() == "1: metrics step 3 split train · loss=2.5 acc_0=0.7\n"
    err = io.StringIO()
    assert main(["train", "parselog", str(tmp_path / "missing.log")], out=io.StringIO(), err=err) == 2


def test_parselog_of_a_torn_last_line(tmp_path):
    log = tmp_path / "t.log"
    log.write_text("step 3: {'loss': 2.5}\nstep 4: {'loss': 2.", encoding="utf-8")
    p = run_cli("train", "parselog", str(log), "--json")
    assert [json.loads(x)["step"] for x in p.stdout.splitlines()] == [3]
    assert f"{log}:2: metrics dict is not closed with '}}'" in p.stderr


def test_checkpoints_and_inspect(tmp_path):
    out_dir = tmp_path / "out"
    write_checkpoint(out_dir / "epoch_0_step_50", state=(0, 50))
    write_checkpoint(out_dir / "epoch_0_step_100", tensors=eagle3_tensors(fc_in=48))
    target = write_target(tmp_path / "target")
    out = io.StringIO()
    assert main(["train", "checkpoints", str(out_dir), "--json"], out=out) == 0
    doc = json.loads(out.getvalue())
    assert [(c["name"], c["step"], c["latest"]) for c in doc["checkpoints"]] == [
        ("epoch_0_step_50", 50, False), ("epoch_0_step_100", 100, True)]
    out = io.StringIO()
    assert main(["train", "inspect", str(out_dir / "epoch_0_step_50"), "--json"], out=out) == 0
    doc = json.loads(out.getvalue())
    assert (doc["fc_weight_shape"], doc["epoch"], doc["step"], doc["d2t"]) == ([8, 24], 0, 50, True)
    out = io.StringIO()
    code = main(["train", "inspect", str(out_dir / "epoch_0_step_100"), "--target", str(target),
                 "--sglang-version", "0.5.23"], out=out)
    assert code == 1
    assert "ERROR    fc-width:" in out.getvalue()


def test_tracker_command(tmp_path):
    m = tmp_path / "metrics" / "train"
    m.mkdir(parents=True)
    (m / "acc_0").write_text("1700000000000 0.5 10\n")
    out = io.StringIO()
    assert main(["train", "tracker", str(tmp_path), "--json"], out=out) == 0
    row = json.loads(out.getvalue())
    assert (row["source"], row["step"], row["metrics"]) == ("mlflow", 10, {"acc_0": 0.5})


def _readline(proc: subprocess.Popen, timeout: float = 60.0) -> str:
    """The child's next stdout line, failing (not hanging) when none comes within ``timeout``."""
    import selectors

    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        assert sel.select(timeout), f"no output within {timeout} s"
    return proc.stdout.readline()  # the follower writes and flushes whole lines


def test_parselog_follow(tmp_path):
    """--follow prints records as lines are appended; SIGTERM ends it with the counts on stderr."""
    log = tmp_path / "train.log"
    log.write_text("step 1: {'loss': 5.0}\n", encoding="utf-8")
    proc = subprocess.Popen([sys.executable, "-m", "backend.cli", "train", "parselog", str(log), "--json", "-f"],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    try:
        first = json.loads(_readline(proc))
        assert (first["step"], first["metrics"]) == (1, {"loss": 5.0})
        with open(log, "a", encoding="utf-8") as f:
            f.write("step 2: {'loss': 4.0}\n")
        second = json.loads(_readline(proc))
        assert (second["step"], second["metrics"]) == (2, {"loss": 4.0})
    finally:
        proc.terminate()
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
    assert proc.returncode == 0, err
    assert "2 records" in err
