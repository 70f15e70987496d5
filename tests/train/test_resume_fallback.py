"""``train resume`` with a torn newest checkpoint: it falls back to the newest good one and says which.
SpecForge's Gen-2 ``--resume`` takes the highest-numbered folder whatever it holds, so the torn one is
renamed aside after confirmation; the project's trainer skips it itself, so nothing needs confirming."""

from __future__ import annotations

import io
import os
import textwrap

from backend.cli import main as cli_main
from backend.flows.workspace import load_workspace
from backend.runtime import Runtime
from backend.train.generation import clear_cache
from state import audit
from tests.train.ckpt_files import write_checkpoint
from tests.train.test_runs import _config


def _torn_pair(out):
    write_checkpoint(out / "epoch_0_step_10", state=(0, 10))
    newest = write_checkpoint(out / "epoch_0_step_20", state=(0, 20))
    f = newest / "model.safetensors"
    os.truncate(f, f.stat().st_size - 10)
    return newest


def test_specforge_gen2_resume_sets_the_torn_checkpoint_aside_after_confirmation(tmp_path):
    clear_cache()
    ws = _config(tmp_path, "0.3.0")
    out = ws / "outputs" / "train" / "sf"
    newest = _torn_pair(out)
    o, e = io.StringIO(), io.StringIO()
    assert cli_main(["--workspace", str(ws), "train", "resume", "sf"], o, e) == 1
    said = o.getvalue()
    assert said.startswith(f"warning: epoch_0_step_20 is torn or incomplete ({newest / 'model.safetensors'}: ")
    assert ("the run resumes from epoch_0_step_10, the newest good checkpoint. SpecForge's --resume takes the "
            "highest-numbered folder, so epoch_0_step_20 is renamed epoch_0_step_20.torn first.") in said
    assert newest.is_dir()  # nothing moved without --yes
    runtime = Runtime(load_workspace(ws), background=False)
    try:
        runtime.train.resume("sf", actor="bob", source="test", confirmed=True)
        assert not newest.exists() and (out / "epoch_0_step_20.torn").is_dir()
        assert runtime.train.resume_plan("sf").skipped == ()
        rows = [(r.action, r.detail) for r in audit.recent(runtime.store, limit=50) if r.target == "sf"]
        assert ("checkpoint-set-aside", f"torn {newest} renamed epoch_0_step_20.torn") in rows
    finally:
        sup = runtime.supervisor
        sup.poll()
        v = sup.view("sf")
        if v is not None and v.live:
            sup.stop("sf", actor="test", source="teardown", wait=True)
        runtime.close()
        clear_cache()


def test_the_projects_trainer_falls_back_by_itself_and_the_resume_says_which(tmp_path):
    clear_cache()
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "specdeck.toml").write_text(textwrap.dedent("""\
        [workspace]
        name = "t"
        [telemetry]
        source = "fake"
        [[train]]
        name = "tiny"
        entry = "module:backend.flows.tiny train"
        target_model = "/models/t"
        train_data = "/data/t.jsonl"
        """))
    out = ws / "outputs" / "train" / "tiny"
    newest = _torn_pair(out)
    runtime = Runtime(load_workspace(ws), background=False)
    try:
        plan = runtime.train.resume_plan("tiny")
        assert (plan.how, plan.resume_from.name, [c.name for c in plan.skipped]) == (
            "trainer", "epoch_0_step_10", ["epoch_0_step_20"])
        assert runtime.train.resume_warning("tiny") == ""  # nothing is moved: no confirmation
        note = runtime.train.resume_note("tiny")
        assert note.startswith(f"epoch_0_step_20 is torn or incomplete ({newest / 'model.safetensors'}: ")
        assert note.endswith("the run resumes from epoch_0_step_10, the newest good checkpoint.")
        # every checkpoint torn: a resume starts over, and that is confirmed first
        f = out / "epoch_0_step_10" / "training_state.pt"
        os.truncate(f, 20)
        warning = runtime.train.resume_warning("tiny")
        assert warning.startswith(f"Every checkpoint in {out} is torn or incomplete (epoch_0_step_20, "
                                  "epoch_0_step_10): a resume starts from step 0.")
    finally:
        runtime.close()
        clear_cache()
