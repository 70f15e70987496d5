"""Checkpoints verified, not trusted: a file cut short (a crash or power loss mid-write, a full disk) makes
the checkpoint torn everywhere it is shown: the list keeps its name and latest mark but says TORN and names
the newest good one, inspection calls it not servable and the command exits 1, preflight and deploy refuse
it with the reason, and a whole checkpoint is never flagged."""

from __future__ import annotations

import io
import json
import os
import zipfile

from backend.cli import main as cli_main
from backend.flows.checkpoint_check import preflight_checkpoint
from backend.flows.deploy import DeployRequest
from backend.flows.deploy_job import run_deploy
from backend.train.checkpoints import inspect_checkpoint, list_checkpoints, verify_checkpoint
from tests.bench.sweep_kit import SERVER, session
from tests.train.ckpt_files import eagle3_tensors, write_checkpoint, write_rank_state, write_safetensors, write_target


def two(tmp_path):
    out = tmp_path / "out"
    good = write_checkpoint(out / "epoch_0_step_10", state=(0, 10))
    newest = write_checkpoint(out / "epoch_0_step_20", state=(0, 20))
    return out, good, newest


def cut(path, n: int) -> None:
    os.truncate(path, path.stat().st_size - n)


def test_whole_checkpoints_are_not_torn(tmp_path):
    out, good, newest = two(tmp_path)
    run = list_checkpoints(out)
    assert [c.problems for c in run.checkpoints] == [(), ()]
    assert run.latest.name == run.latest_good.name == "epoch_0_step_20" and run.torn == ()
    info = inspect_checkpoint(newest)
    assert info.servable and not info.torn and info.damage == ()


def test_truncated_weights_are_torn_but_keep_their_name_and_latest_mark(tmp_path):
    out, good, newest = two(tmp_path)
    f = newest / "model.safetensors"
    size = f.stat().st_size
    cut(f, 100)
    run = list_checkpoints(out)
    latest = run.latest
    assert latest.name == "epoch_0_step_20" and latest.latest and latest.torn
    assert latest.problems == (f"{f}: {size - 100:,} bytes, but its header declares {size:,} (8 + "
                               f"{size - 8 - 1088:,} header + 1,088 data): 100 bytes missing, truncated",)
    assert run.latest_good.name == "epoch_0_step_10" and not run.latest_good.torn
    info = inspect_checkpoint(newest)
    assert not info.servable and info.torn
    assert info.why_not_servable.startswith("torn or incomplete (1 problem): " + str(f))
    assert info.summary()["torn"] is True and info.summary()["damage"] == list(latest.problems)


def test_a_file_longer_than_its_header_declares_is_torn(tmp_path):
    out, good, newest = two(tmp_path)
    with open(newest / "model.safetensors", "ab") as fh:
        fh.write(b"\0" * 7)
    (why,) = verify_checkpoint(newest)
    assert "7 more than its header declares" in why


def test_a_cut_training_state_is_torn_a_legacy_one_is_not(tmp_path):
    out, good, newest = two(tmp_path)
    st = newest / "training_state.pt"
    cut(st, st.stat().st_size // 2)
    (why,) = verify_checkpoint(newest)
    assert why.startswith(f"{st}: a zip archive cut short") and "torn write" in why
    st.write_bytes(b"")
    assert verify_checkpoint(newest) == (f"{st}: empty (0 bytes): the write never finished",)
    st.write_bytes(b"\x80\x02}q\x00.")  # a legacy (pre-zip) torch file: not read, but not damaged either
    assert verify_checkpoint(newest) == ()
    # a whole zip whose pickle was cut inside it
    with zipfile.ZipFile(st, "w") as zf:
        zf.writestr("archive/data.pkl", b"\x80\x02}q\x00(X\x05\x00\x00\x00epoch")
    (why,) = verify_checkpoint(newest)
    assert "data.pkl is not a readable pickle" in why


def test_a_missing_shard_and_a_cut_rank_state(tmp_path):
    d = tmp_path / "out" / "epoch_0_step_5"
    write_checkpoint(d, state=(0, 5))
    os.remove(d / "model.safetensors")
    write_safetensors(d / "model-00001-of-00002.safetensors", eagle3_tensors())
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "fc.weight": "model-00001-of-00002.safetensors", "d2t": "model-00002-of-00002.safetensors"}}))
    assert verify_checkpoint(d) == (f"{d / 'model-00002-of-00002.safetensors'}: missing (listed in "
                                    "model.safetensors.index.json)",)
    g = tmp_path / "out" / "run-step7"
    g.mkdir()
    write_rank_state(g / "training_state_rank0.pt")
    assert verify_checkpoint(g) == ()
    cut(g / "training_state_rank0.pt", 30)
    (why,) = verify_checkpoint(g)
    assert "training_state_rank0.pt: a zip archive cut short" in why
    info = inspect_checkpoint(g, draft_config="draft.json")
    assert not info.servable and info.export_argv is None  # no export offered for a torn runtime checkpoint


def test_an_empty_folder_under_a_checkpoint_name_is_incomplete(tmp_path):
    d = tmp_path / "epoch_0_step_3"
    d.mkdir()
    assert verify_checkpoint(d) == (f"{d / 'config.json'}: missing: incomplete",
                                    f"{d}: no weight file (model.safetensors): incomplete")


def test_cli_list_and_inspect_say_torn(tmp_path):
    out, good, newest = two(tmp_path)
    cut(newest / "model.safetensors", 100)
    o = io.StringIO()
    assert cli_main(["train", "checkpoints", str(out)], o, io.StringIO()) == 0
    lines = o.getvalue().splitlines()
    assert lines[0] == "epoch_0_step_10  Gen-2  epoch 0 step 10"
    assert lines[1] == "epoch_0_step_20  Gen-2  epoch 0 step 20  [TORN, latest by name, not usable]"
    assert lines[2].startswith(f"  torn: {newest / 'model.safetensors'}: ") and "100 bytes missing" in lines[2]
    assert lines[3] == ("1 torn or incomplete checkpoint(s); the newest good one is epoch_0_step_10 (a resume "
                        "continues from it)")
    o = io.StringIO()
    assert cli_main(["train", "checkpoints", str(out), "--json"], o, io.StringIO()) == 0
    doc = json.loads(o.getvalue())
    assert doc["latest_good"] == "epoch_0_step_10"
    assert [(c["name"], c["latest"], c["torn"]) for c in doc["checkpoints"]] == [
        ("epoch_0_step_10", False, False), ("epoch_0_step_20", True, True)]
    import sys

    o, e = io.StringIO(), io.StringIO()
    old = sys.stderr
    sys.stderr = e
    try:
        assert cli_main(["train", "inspect", str(newest)], o, io.StringIO()) == 1
        assert cli_main(["train", "inspect", str(good)], io.StringIO(), io.StringIO()) == 0
    finally:
        sys.stderr = old
    assert "servable: False" in o.getvalue()
    assert e.getvalue().startswith(f"error: {newest} is torn or incomplete, not servable and not resumable:\n  "
                                   f"{newest / 'model.safetensors'}: ")


def test_preflight_refuses_a_torn_checkpoint(tmp_path):
    out, good, newest = two(tmp_path)
    target = write_target(tmp_path / "target")
    cut(newest / "training_state.pt", 10)
    findings = preflight_checkpoint(newest, target)
    assert [(f.severity, f.code) for f in findings] == [("error", "checkpoint-torn")]
    assert "epoch_0_step_20 is torn or incomplete: " in findings[0].found and "training_state.pt" in findings[0].found
    assert all(f.code != "checkpoint-torn" for f in preflight_checkpoint(good, target))


def test_deploy_refuses_a_torn_checkpoint_at_inspection(tmp_path):
    from tests.train.test_deploy_flow import make_ckpt, make_ws

    ws = make_ws(tmp_path)
    ckpt = make_ckpt(ws["runs"] / "r")
    cut(ckpt / "model.safetensors", 64)
    text = (ws["root"] / "specdeck.toml").read_text()
    with session(ws["root"]) as s:
        st = run_deploy(s, DeployRequest(checkpoint=str(ckpt), server=SERVER), tmp_path / "state.json",
                        actor="t", source="test")
        assert (st.state, st.failed_step) == ("failed", "inspect")
        assert st.error.startswith(f"{ckpt.name} cannot be served: torn or incomplete (1 problem): "
                                   f"{ckpt / 'model.safetensors'}: ") and "64 bytes missing, truncated" in st.error
        assert st.checkpoint_info["torn"] is True
        assert not (s.sup.view(SERVER) and s.sup.view(SERVER).live)  # nothing was started
    assert (ws["root"] / "specdeck.toml").read_text() == text
