"""Checkpoint listing, inspection without loading weights, training_state.pt read safely, and the
Servers page's preflight applied to a checkpoint against a target."""

from __future__ import annotations

import os
import pickle
import zipfile

import pytest

from backend.train.checkpoints import inspect_checkpoint, list_checkpoints
from backend.flows.checkpoint_check import preflight_checkpoint
from backend.train.torchstate import StateReadError, read_training_state
from tests.train.ckpt_files import (
    draft_config, eagle3_tensors, write_checkpoint, write_rank_state, write_safetensors, write_state, write_target,
)


def test_gen2_listing_latest_and_no_best(tmp_path):
    for name in ("epoch_0_step_50", "epoch_0_step_100", "epoch_1_step_150"):
        (tmp_path / name).mkdir()
    (tmp_path / "runs").mkdir()  # tensorboard, not a checkpoint
    (tmp_path / "epoch_2_step_x").mkdir()
    run = list_checkpoints(tmp_path)
    assert [(c.name, c.generation, c.epoch, c.step) for c in run.checkpoints] == [
        ("epoch_0_step_50", 2, 0, 50), ("epoch_0_step_100", 2, 0, 100), ("epoch_1_step_150", 2, 1, 150)]
    assert run.latest.name == "epoch_1_step_150" and run.latest.latest
    assert run.best is None


def test_gen1_listing(tmp_path):
    for name in ("epoch_0", "epoch_1", "epoch_10"):
        (tmp_path / name).mkdir()
    run = list_checkpoints(tmp_path)
    assert [c.name for c in run.checkpoints] == ["epoch_0", "epoch_1", "epoch_10"]
    assert run.latest.name == "epoch_10"


def test_gen3_listing_with_links_and_best_meta(tmp_path):
    for name in ("llama-step100", "llama-step200", "llama-step300", "other-step5"):
        (tmp_path / name).mkdir()
    os.symlink("llama-step200", tmp_path / "llama-latest")
    os.symlink("llama-step100", tmp_path / "llama-best")
    (tmp_path / "llama.best_meta.json").write_text('{"metric": "eval/simulated_acc_len", "value": 2.1, "step": 100}')
    run = list_checkpoints(tmp_path, "llama")
    assert [c.step for c in run.checkpoints] == [100, 200, 300]
    assert run.latest.name == "llama-step200"  # the run's own link, not the highest number
    assert run.best.name == "llama-step100"
    assert [c.name for c in run.checkpoints if c.best] == ["llama-step100"]
    assert run.best_meta == {"metric": "eval/simulated_acc_len", "value": 2.1, "step": 100}


def test_gen3_dangling_link_is_a_problem(tmp_path):
    (tmp_path / "r-step1").mkdir()
    os.symlink("r-step9", tmp_path / "r-latest")
    run = list_checkpoints(tmp_path)
    assert run.latest.name == "r-step1"
    assert len(run.problems) == 1 and "r-latest" in run.problems[0]


def test_missing_folder(tmp_path):
    run = list_checkpoints(tmp_path / "nope")
    assert run.checkpoints == () and "not found" in run.problems[0]


def test_inspect_gen2_checkpoint(tmp_path):
    d = write_checkpoint(tmp_path / "epoch_1_step_150", state=(1, 150))
    info = inspect_checkpoint(d)
    assert info.servable and not info.runtime and info.generation == 2
    assert info.fc_shape == (8, 24)
    assert (info.layers, info.draft_vocab, info.has_d2t, info.has_t2d) == (1, 16, True, True)
    assert info.draft.vocab_size == 32 and info.draft.arch == "LlamaForCausalLMEagle3"
    assert (info.state.epoch, info.state.step) == (1, 150)
    assert info.state.args["ttt_length"] == 7
    s = info.summary()
    assert s["fc_weight_shape"] == [8, 24] and s["step"] == 150 and s["d2t"] is True


def test_inspect_missing_d2t_is_noted(tmp_path):
    d = write_checkpoint(tmp_path / "epoch_0_step_10", tensors=eagle3_tensors(d2t=False))
    info = inspect_checkpoint(d)
    assert not info.has_d2t
    assert info.notes == ("no d2t tensor: draft token ids cannot be mapped to target ids",)
    assert info.state is None and "not present" in info.state_error


def test_inspect_gen3_runtime_checkpoint(tmp_path):
    d = tmp_path / "llama-step300"
    d.mkdir()
    write_state(d / "training_state.pt", 0, 300)
    write_rank_state(d / "training_state_rank0.pt")
    info = inspect_checkpoint(d, draft_config="configs/llama3-8B-eagle3.json")
    assert info.runtime and not info.servable and "specforge export" in info.why_not_servable
    assert info.export_argv == ("specforge", "export", "--to", "sglang", "--checkpoint", str(d),
                                "--draft-config", "configs/llama3-8B-eagle3.json",
                                "--output-dir", str(tmp_path / "llama-step300-sglang"))
    assert info.state.step == 300 and info.rank_states == ("training_state_rank0.pt",)


def test_inspect_broken_config(tmp_path):
    d = tmp_path / "epoch_0_step_1"
    d.mkdir()
    (d / "config.json").write_text('{\n  "hidden_size": 8,\n  "architectures": ["X"\n}')
    info = inspect_checkpoint(d)
    assert not info.servable and "config.json:4" in info.config_error


# -- training_state.pt ----------------------------------------------------------------------------

def test_state_without_storages_is_still_read(tmp_path):
    """Only data.pkl is read: a copy of the archive without its tensor data gives the same fields."""
    src = tmp_path / "training_state.pt"
    write_state(src, 2, 300)
    stripped = tmp_path / "stripped.pt"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(stripped, "w") as zout:
        kept = [i for i in zin.infolist() if "/data/" not in i.filename]
        assert len(kept) < len(zin.infolist())
        for i in kept:
            zout.writestr(i, zin.read(i))
    st = read_training_state(stripped)
    assert (st.epoch, st.step) == (2, 300)
    assert st.keys == ("epoch", "global_step", "args", "optimizer_state_dict", "scheduler_state_dict")


class _Evil:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_state_pickle_runs_no_code(tmp_path):
    marker = tmp_path / "ran"
    p = tmp_path / "training_state.pt"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({"epoch": 4, "global_step": 9, "x": _Evil(marker)}, protocol=2))
    st = read_training_state(p)
    assert (st.epoch, st.step) == (4, 9)
    assert not marker.exists()


@pytest.mark.parametrize("content, why", [
    (b"not a zip at all", "legacy format"),
    (None, "no data.pkl"),
])
def test_state_errors_name_the_file(tmp_path, content, why):
    p = tmp_path / "training_state.pt"
    if content is None:
        with zipfile.ZipFile(p, "w") as z:
            z.writestr("archive/other", b"x")
    else:
        p.write_bytes(content)
    with pytest.raises(StateReadError, match=why) as e:
        read_training_state(p)
    assert str(p) in str(e.value)


def test_legacy_torch_format_is_reported(tmp_path):
    import torch

    p = tmp_path / "training_state.pt"
    torch.save({"epoch": 1}, p, _use_new_zipfile_serialization=False)
    with pytest.raises(StateReadError, match="legacy"):
        read_training_state(p)


def test_truncated_pickle(tmp_path):
    p = tmp_path / "training_state.pt"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("archive/data.pkl", pickle.dumps({"epoch": 4}, protocol=2)[:-3])
    with pytest.raises(StateReadError, match="not a readable pickle"):
        read_training_state(p)


# -- preflight against a target --------------------------------------------------------------------

def codes(findings, severity="error"):
    return sorted(f.code for f in findings if f.severity == severity)


def test_good_checkpoint_passes(tmp_path):
    target = write_target(tmp_path / "target")
    ck = write_checkpoint(tmp_path / "out" / "epoch_0_step_10")
    f = preflight_checkpoint(ck, target, sglang_version="0.5.23")
    assert codes(f) == []
    assert "aux-layers-default" in codes(f, "info")


def test_wrong_fc_width(tmp_path):
    target = write_target(tmp_path / "target", hidden=8)
    ck = write_checkpoint(tmp_path / "out" / "epoch_0_step_10", cfg=draft_config(hidden=8),
                          tensors=eagle3_tensors(fc_in=48))  # 3 × 16: trained for a hidden-16 target
    f = preflight_checkpoint(ck, target, sglang_version="0.5.23")
    assert "fc-width" in codes(f)
    msg = next(x.found for x in f if x.code == "fc-width")
    assert "48" in msg and "3 aux layers × hidden size 8 = 24" in msg and "hidden size 16" in msg


def test_missing_d2t_and_vocab_mismatch(tmp_path):
    target = write_target(tmp_path / "target", vocab=64)
    ck = write_checkpoint(tmp_path / "out" / "epoch_0_step_10", tensors=eagle3_tensors(d2t=False))
    assert codes(preflight_checkpoint(ck, target, sglang_version="0.5.23")) == ["d2t-missing", "vocab-size"]


def test_runtime_checkpoint_gets_the_export_command(tmp_path):
    target = write_target(tmp_path / "target")
    d = tmp_path / "out" / "run-step100"
    d.mkdir(parents=True)
    write_rank_state(d / "training_state_rank0.pt")
    [f] = preflight_checkpoint(d, target, draft_config="configs/d.json")
    assert f.code == "checkpoint-not-servable" and f.severity == "error"
    assert f"specforge export --to sglang --checkpoint {d} --draft-config configs/d.json" in f.fix


def test_missing_target(tmp_path):
    ck = write_checkpoint(tmp_path / "epoch_0_step_10")
    assert "model_path-missing" in codes(preflight_checkpoint(ck, tmp_path / "no-target"))


def test_server_settings_are_kept(tmp_path):
    from backend.sglang.config import ServerConfig

    target = write_target(tmp_path / "target")
    ck = write_checkpoint(tmp_path / "epoch_0_step_10")
    server = ServerConfig(name="s", model_path="/elsewhere", attention_backend="trtllm_mha", simulate=True)
    f = preflight_checkpoint(ck, target, server=server, eagle_topk=4, num_draft_tokens=8)
    assert "topk-trtllm" in codes(f)  # the server's backend, checked with the checkpoint's settings


def test_header_written_by_hand_is_what_inspect_reads(tmp_path):
    d = tmp_path / "epoch_0"
    d.mkdir()
    (d / "config.json").write_text('{"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 4}')
    write_safetensors(d / "model.safetensors", {"fc.weight": ("F32", [4, 12]), "layers.0.mlp.w": ("F32", [2]),
                                                "layers.1.mlp.w": ("F32", [2])})
    info = inspect_checkpoint(d)
    assert (info.fc_shape, info.layers, info.has_d2t, info.generation) == ((4, 12), 2, False, 1)


def test_pickle_weights_are_servable_but_not_inspected(tmp_path):
    d = tmp_path / "epoch_0_step_1"
    d.mkdir()
    (d / "config.json").write_text('{"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": 8}')
    (d / "pytorch_model.bin").write_bytes(b"\x80\x02}q\x00.")
    info = inspect_checkpoint(d)
    assert info.servable and info.fc_shape is None
    assert any("pytorch_model.bin" in n for n in info.notes)
    empty = tmp_path / "epoch_0_step_2"
    empty.mkdir()
    (empty / "config.json").write_text('{"architectures": ["LlamaForCausalLMEagle3"]}')
    assert not inspect_checkpoint(empty).servable


def test_preflight_of_a_missing_checkpoint(tmp_path):
    [f] = preflight_checkpoint(tmp_path / "gone", write_target(tmp_path / "t"))
    assert (f.code, f.severity) == ("checkpoint-missing", "error")


def test_inspect_notes_missing_exporter_tensors(tmp_path):
    t = eagle3_tensors()
    del t["norm.weight"], t["lm_head.weight"]
    info = inspect_checkpoint(write_checkpoint(tmp_path / "epoch_0_step_10", tensors=t))
    assert info.notes == ("no lm_head.weight tensor (SpecForge's exporter requires it)",
                          "no norm.weight tensor (SpecForge's exporter requires it)")
