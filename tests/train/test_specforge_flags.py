"""Preflight of Gen-1/Gen-2 commands: the training script's own parser where the run's python has
SpecForge, else the flag table of SpecForge's history (backend/train/specforge-flags.json), whose findings
name the range of commits."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from datetime import datetime
from pathlib import Path

import pytest

from backend.train import specforge_check as sc
from backend.train.command import CommandError, build_command
from backend.train.config import TrainRunConfig
from backend.train.generation import EnvProbe, GenerationInfo

ROOT = Path("/ws")
OUT = Path("/ws/outputs")


def _argv(generation, sf="/opt/SpecForge", **kw):
    d = dict(name="r", python="/venv/bin/python", specforge_dir=sf, target_model="/m/t", train_data="/d/t.jsonl",
             draft_config="/c/draft.json")
    d.update(kw)
    cmd = build_command(TrainRunConfig.model_validate(d), generation, root=ROOT, outputs_dir=OUT)
    script, argv = sc._script_argv(cmd, generation)
    return cmd, argv


def _at(day: str) -> datetime:
    return datetime.fromisoformat(day + "T12:00:00+08:00")


def test_the_table_was_read_from_specforges_history():
    t = sc.flag_table()
    assert t["read_at"]["commit"] == "a6b6b0230009"
    assert t["scripts"] == {"gen1-online": "scripts/train_eagle3_online.py",
                            "gen1-offline": "scripts/train_eagle3_offline.py", "gen2": "scripts/train_eagle3.py"}
    gen2 = t["ranges"]["gen2"]
    assert (gen2[0]["from"], gen2[0]["from_time"][:10]) == ("2ab6da7a583b", "2025-11-20")
    assert gen2[-1]["until_time"][:10] == "2026-07-18"  # the scripts left main with the Gen-3 cutover
    assert gen2[0]["options"]["--report-to"] == ["wandb", "tensorboard", "swanlab", "mlflow", "none"]
    assert gen2[0]["options"]["--target-model-path"] == "required"
    assert gen2[0]["options"]["--resume"] == "flag"


def test_gen1_offline_of_late_2025_refuses_batch_size():
    cmd, argv = _argv("gen1", train_hidden_states="/d/hs")
    assert cmd.argv[6].endswith("scripts/train_eagle3_offline.py")
    res = sc.table_check("gen1-offline", argv, when=_at("2025-09-15"))
    assert res.rejected == ("SpecForge Gen-1 scripts/train_eagle3_offline.py of 2025-08-27 (f346bb9a) to 2025-11-20 "
                            "(2ab6da7a): unrecognized arguments: --batch-size 1")
    assert res.field == "batch_size"
    # the day it was removed and every commit after: one span named with each refusal
    before = sc.table_check("gen1-offline", argv, when=_at("2025-08-20"))
    assert before.rejected is None and before.warnings == ()


def test_gen1_before_july_31_refuses_ttt_length():
    cmd, argv = _argv("gen1")
    res = sc.table_check("gen1-online", argv, when=_at("2025-07-25"))
    assert res.rejected == ("SpecForge Gen-1 scripts/train_eagle3_online.py of 2025-07-22 (3234e24a) to 2025-07-31 "
                            "(154b78d7): unrecognized arguments: --ttt-length 7")
    assert res.field == "ttt_length"
    assert sc.table_check("gen1-online", argv, when=_at("2025-08-01")).rejected is None


def test_gen1_before_august_27_requires_a_draft_config():
    cmd, argv = _argv("gen1", draft_config=None)
    res = sc.table_check("gen1-online", argv, when=_at("2025-08-01"))
    assert res.rejected.endswith("the following arguments are required: --draft-model-config")
    assert sc.table_check("gen1-online", argv, when=_at("2025-09-01")).rejected is None


def test_gen2_first_release_refuses_max_num_steps_and_the_wandb_flags():
    cmd, argv = _argv("gen2", max_steps=500,
                      tracker={"report_to": "wandb", "project": "p", "wandb_dir": "/w", "offline": True})
    first = sc.table_check("gen2", argv, when=datetime.fromisoformat("2025-11-20T20:00:00+08:00"))
    assert first.rejected == ("SpecForge Gen-2 scripts/train_eagle3.py of 2025-11-20 (2ab6da7a) to 2025-11-21 "
                              "(57346d30): unrecognized arguments: --max-num-steps 500 --wandb-dir /w "
                              "--wandb-offline")
    assert first.field == "max_steps"
    march = sc.table_check("gen2", argv, when=_at("2026-03-04"))
    assert march.rejected == ("SpecForge Gen-2 scripts/train_eagle3.py of 2026-01-17 (ed87efa3) to 2026-03-31 "
                              "(d5fb617f): unrecognized arguments: --wandb-dir /w --wandb-offline")
    assert march.field == "tracker.wandb_dir"
    assert sc.table_check("gen2", argv, when=_at("2026-04-10")).rejected is None


def test_without_the_commit_the_version_narrows_and_disagreeing_ranges_warn():
    cmd, argv = _argv("gen2", tracker={"report_to": "wandb", "offline": True})
    res = sc.table_check("gen2", argv, version="0.2.0")
    assert res.rejected is None
    assert res.warnings == (
        "SpecForge Gen-2 scripts/train_eagle3.py of 2025-12-03 (5c355b8a) to 2026-03-31 (d5fb617f) would refuse this "
        "command: unrecognized arguments: --wandb-offline (version 0.2.0; other ranges accept it)",)
    # a flag no range of the version has: refused, every range named
    cmd, argv = _argv("gen2", extra_args=["--no-such-flag"])
    res = sc.table_check("gen2", argv, version="0.2.0")
    assert res.rejected == ("SpecForge Gen-2 scripts/train_eagle3.py of 2025-12-03 (5c355b8a) to 2026-07-18 "
                            "(2a9f7d0c): unrecognized arguments: --no-such-flag")
    assert res.source == "flag table (version 0.2.0)"


def test_argparse_matching_is_emulated():
    opts = {"--max-num-steps": "value", "--max-length": "value", "--resume": "flag", "--output-dir": "required",
            "--report-to": ["wandb", "none"]}
    assert sc.emulate(opts, ["--output-dir", "/o", "--max-num", "3", "--resume"]) == []
    assert sc.emulate(opts, ["--output-dir=/o", "--max", "3"]) == [
        ("--max", "ambiguous option: --max could match --max-length, --max-num-steps")]
    assert sc.emulate(opts, ["--output-dir", "/o", "--report-to", "mlflow"]) == [
        ("--report-to", "argument --report-to: invalid choice: 'mlflow' (choose from 'wandb', 'none')")]
    assert sc.emulate(opts, ["--resume"]) == [
        ("--output-dir", "the following arguments are required: --output-dir")]
    assert sc.emulate(opts, ["--output-dir"]) == [("--output-dir", "argument --output-dir: expected one argument")]
    assert sc.emulate(opts, ["--output-dir", "/o", "--max-length", "-1", "--resume=1"]) == [
        ("--resume", "argument --resume: ignored explicit argument '1'")]


def test_the_checkouts_commit_time_places_it(tmp_path):
    sf = tmp_path / "SpecForge"
    (sf / "scripts").mkdir(parents=True)
    (sf / "scripts" / "train_eagle3.py").write_text("# stand-in\n")
    env = {"GIT_COMMITTER_DATE": "2025-11-20T20:00:00+08:00", "GIT_AUTHOR_DATE": "2025-11-20T20:00:00+08:00",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com", "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    for args in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "x"]):
        subprocess.run(["git", "-C", str(sf), *args], check=True, env=env)
    assert sc.checkout_time(str(sf)) == datetime.fromisoformat("2025-11-20T20:00:00+08:00")
    cfg = TrainRunConfig(name="r", python="/no/python", specforge_dir=str(sf), target_model="/m", train_data="/d",
                         max_steps=10)
    cmd = build_command(cfg, "gen2", root=ROOT, outputs_dir=OUT)
    info = GenerationInfo(generation="gen2", version="0.1.0", chosen=False)
    with pytest.raises(CommandError) as ei:
        sc.review(cfg, cmd, info, EnvProbe("/no/python", True), specforge_dir=str(sf))
    assert ei.value.problems == [("max_steps", "flag table (the checkout's commit of 2025-11-20) refuses the command: "
                                               "SpecForge Gen-2 scripts/train_eagle3.py of 2025-11-20 (2ab6da7a) to "
                                               "2025-11-21 (57346d30): unrecognized arguments: --max-num-steps 10")]
    assert sc.checkout_time(str(tmp_path)) is None  # no git history: nothing to place it by


# -- the script's own parser, in the run's python -------------------------------------------------

STANDIN = textwrap.dedent('''\
    import argparse
    print("imported")  # an import that prints must not confuse the answer

    def parse_args():
        parser = argparse.ArgumentParser(description="stand-in")
        parser.add_argument("--target-model-path", required=True)
        parser.add_argument("--train-data-path", required=True)
        parser.add_argument("--output-dir", required=True)
        for flag in ("--draft-model-config", "--num-epochs", "--batch-size", "--learning-rate", "--max-length",
                     "--ttt-length", "--report-to", "--wandb-project"):
            parser.add_argument(flag)
        parser.add_argument("--resume", action="store_true")
        return parser, parser.parse_args()

    if __name__ == "__main__":
        raise SystemExit("main must not run")
    ''')


@pytest.fixture
def checkout(tmp_path):
    sf = tmp_path / "SpecForge"
    (sf / "scripts").mkdir(parents=True)
    (sf / "scripts" / "train_eagle3.py").write_text(STANDIN)
    sc.clear_cache()
    yield sf
    sc.clear_cache()


def _review(sf, **kw):
    cfg = TrainRunConfig(name="r", python=sys.executable, specforge_dir=str(sf), target_model="/m",
                         train_data="/d", **kw)
    cmd = build_command(cfg, "gen2", root=ROOT, outputs_dir=OUT)
    probe = EnvProbe(sys.executable, True, version="0.2.0", package_dir="/site/specforge")
    return sc.review(cfg, cmd, GenerationInfo(generation="gen2", version="0.2.0", chosen=True), probe,
                     specforge_dir=str(sf))


def test_the_scripts_own_parser_is_asked_on_the_exact_argv(checkout):
    assert _review(checkout) == (f"train_eagle3.py's parse_args ({sys.executable}) accepts the command",)
    with pytest.raises(CommandError) as ei:
        _review(checkout, tracker={"report_to": "wandb", "project": "p", "wandb_dir": "/w"})
    assert ei.value.problems == [("tracker.wandb_dir", f"train_eagle3.py's parse_args ({sys.executable}) refuses the "
                                                       "command: train_eagle3.py: error: unrecognized arguments: "
                                                       "--wandb-dir /w")]


def test_a_script_that_cannot_load_falls_back_to_the_table(checkout):
    (checkout / "scripts" / "train_eagle3.py").write_text("import torch_that_is_not_installed\n")
    notes = _review(checkout, max_steps=5)
    assert notes[0].startswith(f"SpecForge's own parser could not be asked (cannot load {checkout}/scripts/"
                               "train_eagle3.py: ModuleNotFoundError: No module named 'torch_that_is_not_installed'); "
                               "checked against the flag table")
    assert notes[-1] == ("flag table, SpecForge Gen-2 scripts/train_eagle3.py of 2025-12-03 (5c355b8a) to 2026-07-18 "
                         "(2a9f7d0c) (version 0.2.0): every flag is accepted")


def test_module_entries_are_not_checked():
    cfg = TrainRunConfig(name="r", entry="module:backend.flows.tiny train", target_model="/m", train_data="/d")
    cmd = build_command(cfg, "gen2", root=ROOT, outputs_dir=OUT)
    assert sc.review(cfg, cmd, GenerationInfo(generation="gen2", version=None, chosen=False), None) == ()
