"""A folder holding per-rank training states is a runtime checkpoint whatever its name says: one
named like a Gen-1 or Gen-2 checkpoint (renamed, or copied under such a name) is not servable, and
preflight gives the export command instead of serving checks."""

from __future__ import annotations

import pytest

from backend.train.checkpoints import inspect_checkpoint
from backend.flows.checkpoint_check import preflight_checkpoint
from tests.train.ckpt_files import write_checkpoint, write_rank_state, write_target


@pytest.mark.parametrize("name, generation", [("epoch_1_step_150", 2), ("epoch_3", 1)])
@pytest.mark.parametrize("ranks", [("training_state_rank0.pt", "training_state_rank1.pt"),
                                   ("training_state_rank12.pt",)])
def test_per_rank_states_under_a_gen1_or_gen2_name_are_not_servable(tmp_path, name, generation, ranks):
    d = write_checkpoint(tmp_path / "out" / name)  # config.json and weights that would pass on their own
    for r in ranks:
        write_rank_state(d / r)
    info = inspect_checkpoint(d, draft_config="configs/d.json")
    assert info.generation == generation
    assert info.runtime and not info.servable
    assert "specforge export --to sglang" in info.why_not_servable
    assert info.rank_states == tuple(sorted(ranks))
    assert info.export_argv == ("specforge", "export", "--to", "sglang", "--checkpoint", str(d),
                                "--draft-config", "configs/d.json", "--output-dir", str(d.parent / f"{name}-sglang"))
    s = info.summary()
    assert (s["servable"], s["runtime"]) == (False, True)

    [f] = preflight_checkpoint(d, write_target(tmp_path / "target"), draft_config="configs/d.json")
    assert (f.code, f.severity) == ("checkpoint-not-servable", "error")


def test_the_same_folder_without_rank_states_is_servable(tmp_path):
    d = write_checkpoint(tmp_path / "out" / "epoch_1_step_150")
    (d / "training_state_rank0.pt.tmp").write_bytes(b"")  # not a rank state
    (d / "notes_rank0.pt").write_bytes(b"")
    info = inspect_checkpoint(d)
    assert info.servable and not info.runtime and info.rank_states == ()
    assert info.why_not_servable is None and info.export_argv is None
