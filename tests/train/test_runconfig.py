"""[[train]] entries of the workspace file: validation errors name file, line and field; edits are written
back with comments kept, and a bad edit loses nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend.train.config import TrainRunConfig
from backend.workspace import ConfigError, update_entry
from backend.flows.workspace import load_workspace, parse_config

GOOD = """\
[workspace]
name = "t"

# the CPU trainer on the demo data
[[train]]
name = "tiny"            # keep this comment
entry = "module:backend.flows.tiny train"
target_model = "models/tiny-target"
train_data = "outputs/regen/demo.jsonl"
learning_rate = 1e-4     # the reference's default
batch_size = 2

[train.tracker]
report_to = "tensorboard"
"""


def _problems(text: str, path: str = "/ws/specdeck.toml") -> list[str]:
    with pytest.raises(ConfigError) as ei:
        parse_config(text, path)
    return ei.value.problems


def test_good_entry_parses():
    cfg = parse_config(GOOD)
    tc = TrainRunConfig.model_validate(cfg.train[0])
    assert (tc.name, tc.batch_size, tc.learning_rate, tc.tracker.report_to) == ("tiny", 2, 1e-4, "tensorboard")
    assert tc.entry_kind == "module" and tc.entry_words == ["backend.flows.tiny", "train"]


def test_a_workspace_written_before_the_trainer_moved_still_runs_it():
    """Demo workspaces of earlier versions name the CPU trainer by its old module; the run starts the
    module where it lives now, and a module of the user's own is taken as written."""
    old = TrainRunConfig.model_validate(parse_config(GOOD.replace("backend.flows.tiny", "backend.train.tiny")).train[0])
    assert old.entry_words == ["backend.flows.tiny", "train"]
    own = TrainRunConfig.model_validate(parse_config(GOOD.replace("backend.flows.tiny", "mytrainer.tiny")).train[0])
    assert own.entry_words == ["mytrainer.tiny", "train"]


@pytest.mark.parametrize("line_no, old, new, expected", [
    (11, "batch_size = 2", "batch_size = 0",
     "/ws/specdeck.toml:11: train[0].batch_size: Input should be greater than or equal to 1"),
    (10, "learning_rate = 1e-4     # the reference's default", "learning_rate = nan",
     "/ws/specdeck.toml:10: train[0].learning_rate: Input should be a finite number"),
    (11, "batch_size = 2", "batch_sise = 2",
     "/ws/specdeck.toml:11: train[0].batch_sise: unknown key (check its spelling)"),
    (14, 'report_to = "tensorboard"', 'report_to = "tensorbord"',
     "/ws/specdeck.toml:14: train[0].tracker.report_to: Input should be 'none', 'tensorboard', 'wandb', "
     "'mlflow' or 'swanlab'"),
    (7, 'entry = "module:backend.flows.tiny train"', 'entry = "modul:backend.flows.tiny"',
     "/ws/specdeck.toml:7: train[0].entry: Value error, entry is '' (SpecForge's own entry point), "
     "'module:PKG.MOD [ARG ...]' or 'script:PATH'"),
])
def test_field_errors_name_file_line_and_field(line_no, old, new, expected):
    text = GOOD.replace(old, new)
    assert text.splitlines()[line_no - 1].startswith(new.split(" = ")[0])
    assert _problems(text) == [expected]


def test_missing_key_points_at_the_entry_header():
    text = GOOD.replace('target_model = "models/tiny-target"\n', "")
    assert _problems(text) == ["/ws/specdeck.toml:5: train[0].target_model: required key is missing"]


def test_generation_limits_are_errors_on_their_line():
    text = GOOD.replace('entry = "module:backend.flows.tiny train"\n',
                        'generation = "gen1"\nspecforge_dir = "/opt/SpecForge"\nmax_steps = 100\n')
    lines = text.splitlines()
    assert lines[8] == "max_steps = 100" and lines[15] == 'report_to = "tensorboard"'
    assert _problems(text) == [
        "/ws/specdeck.toml:9: train[0].max_steps: Gen-1 scripts count epochs only (no --max-num-steps); "
        "use num_epochs",
        "/ws/specdeck.toml:16: train[0].tracker.report_to: Gen-1 scripts predate --report-to; use Gen-2 or "
        "later, or extra_args",
    ]


def test_tracker_option_of_another_backend_is_refused():
    text = GOOD.replace('report_to = "tensorboard"', 'report_to = "tensorboard"\nproject = "p"')
    assert _problems(text) == ["/ws/specdeck.toml:13: train[0].tracker: Value error, project is not an option "
                               "of report_to = 'tensorboard'"]


def test_gpus_must_hold_whole_tp_groups():
    text = GOOD.replace("batch_size = 2", "batch_size = 2\ntp_size = 2\ngpus = [0, 1, 2]")
    assert _problems(text) == ["/ws/specdeck.toml:5: train[0]: Value error, tp_size 2 must divide the number of "
                               "GPUs (3): each data-parallel rank holds a whole tensor-parallel group"]


def test_name_shared_with_a_process_is_an_error():
    text = GOOD + '\n[[process]]\nname = "tiny"\nargv = ["true"]\n'
    assert _problems(text) == [
        "/ws/specdeck.toml:6: train[0].name: 'tiny' is already the name of process[0] (line 17); every process, "
        "server and training run needs its own name"]


def _workspace(tmp_path: Path, text: str = GOOD):
    (tmp_path / "specdeck.toml").write_text(text, encoding="utf-8")
    return load_workspace(tmp_path)


def test_edit_keeps_comments_and_other_lines(tmp_path):
    ws = _workspace(tmp_path)
    update_entry(ws, "train", "tiny", {"learning_rate": 3e-4, "max_steps": 50})
    text = (tmp_path / "specdeck.toml").read_text()
    assert '# the CPU trainer on the demo data\n' in text
    assert 'name = "tiny"            # keep this comment\n' in text
    assert "learning_rate = 0.0003     # the reference's default\n" in text
    assert "max_steps = 50\n" in text
    tc = TrainRunConfig.model_validate(ws.config.train[0])
    assert (tc.learning_rate, tc.max_steps, tc.batch_size) == (3e-4, 50, 2)
    update_entry(ws, "train", "tiny", {"max_steps": None})
    assert "max_steps" not in (tmp_path / "specdeck.toml").read_text()


def test_new_entry_is_appended_and_the_rest_untouched(tmp_path):
    ws = _workspace(tmp_path)
    update_entry(ws, "train", "big", {"target_model": "/m/llama", "train_data": "/d/x.jsonl", "generation": "gen2",
                                      "specforge_dir": "/opt/SpecForge", "tracker": {"report_to": "wandb",
                                                                                     "project": "p"}}, create=True)
    text = (tmp_path / "specdeck.toml").read_text()
    assert text.startswith(GOOD)
    assert text[len(GOOD):] == ('\n[[train]]\nname = "big"\ntarget_model = "/m/llama"\ntrain_data = "/d/x.jsonl"\n'
                                'generation = "gen2"\nspecforge_dir = "/opt/SpecForge"\n\n[train.tracker]\n'
                                'report_to = "wandb"\nproject = "p"\n\n')
    assert [e["name"] for e in parse_config(text).train] == ["tiny", "big"]


def test_bad_edit_raises_with_line_and_leaves_the_file(tmp_path):
    ws = _workspace(tmp_path)
    before = (tmp_path / "specdeck.toml").read_text()
    with pytest.raises(ConfigError) as ei:
        update_entry(ws, "train", "tiny", {"batch_size": -1})
    assert ei.value.problems == [f"{tmp_path / 'specdeck.toml'}:11: train[0].batch_size: Input should be greater "
                                 "than or equal to 1"]
    assert (tmp_path / "specdeck.toml").read_text() == before
    with pytest.raises(ConfigError, match=r"there is no \[\[train\]\] entry named 'nope'"):
        update_entry(ws, "train", "nope", {"batch_size": 3})
