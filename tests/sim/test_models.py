import json
import os
import struct

import pytest

from backend.sim.models import make_draft_dir, make_target_dir, write_safetensors


def _header(path):
    with open(path, "rb") as fh:
        n = struct.unpack("<Q", fh.read(8))[0]
        return n, json.loads(fh.read(n))


def _check_layout(path):
    n, header = _header(path)
    spans = sorted(v["data_offsets"] for k, v in header.items() if k != "__metadata__")
    assert spans[0][0] == 0
    for (a0, a1), (b0, b1) in zip(spans, spans[1:]):
        assert a1 == b0
    assert os.path.getsize(path) == 8 + n + spans[-1][1]
    return header


def test_target_dir(tmp_path):
    p = make_target_dir(tmp_path / "t", hidden_size=7168, num_hidden_layers=61,
                        eagle_config={"eagle_aux_hidden_state_layer_ids": [2, 30, 58]},
                        architecture="DeepseekV3ForCausalLM", model_type="kimi_k2")
    cfg = json.loads((p / "config.json").read_text())
    assert cfg["architectures"] == ["DeepseekV3ForCausalLM"]
    assert cfg["hidden_size"] == 7168 and cfg["num_hidden_layers"] == 61
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 30, 58]
    assert cfg["model_type"] == "kimi_k2"
    assert (p / "tokenizer_config.json").is_file()


def test_eagle3_draft_header_and_sparse(tmp_path):
    p = make_draft_dir(tmp_path / "d")
    cfg = json.loads((p / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle3"]
    assert cfg["draft_vocab_size"] == 32000 and cfg["num_hidden_layers"] == 1
    assert "target_hidden_size" not in cfg
    st = p / "model.safetensors"
    h = _check_layout(st)
    assert h["fc.weight"]["shape"] == [4096, 12288]
    assert h["d2t"] == {"dtype": "I64", "shape": [32000], "data_offsets": h["d2t"]["data_offsets"]}
    assert h["t2d"]["dtype"] == "BOOL" and h["t2d"]["shape"] == [128256]
    assert h["lm_head.weight"]["shape"] == [32000, 4096]
    assert h["midlayer.self_attn.q_proj.weight"]["shape"][1] == 8192
    assert os.path.getsize(st) > 1_000_000_000
    assert os.stat(st).st_blocks * 512 < 1_000_000  # sparse: costs no real disk


def test_draft_overrides(tmp_path):
    p = make_draft_dir(tmp_path / "d", target_hidden_size=7168, hidden_size=4096,
                       fc_in_features=7168, with_d2t=False,
                       eagle_aux_hidden_state_layer_ids=[2, 30, 58], vocab_size=163840)
    cfg = json.loads((p / "config.json").read_text())
    assert cfg["target_hidden_size"] == 7168
    assert cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [2, 30, 58]
    h = _check_layout(p / "model.safetensors")
    assert h["fc.weight"]["shape"] == [4096, 7168]
    assert "d2t" not in h and h["t2d"]["shape"] == [163840]


def test_eagle1_draft(tmp_path):
    p = make_draft_dir(tmp_path / "d", kind="eagle", with_d2t=False, with_t2d=False)
    cfg = json.loads((p / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLMEagle"]
    assert "draft_vocab_size" not in cfg
    h = _check_layout(p / "model.safetensors")
    assert h["fc.weight"]["shape"] == [4096, 8192]
    assert "layers.0.self_attn.q_proj.weight" in h
    with pytest.raises(ValueError):
        make_draft_dir(tmp_path / "x", kind="medusa")


def test_write_safetensors_rejects_bad_dtype(tmp_path):
    with pytest.raises(ValueError):
        write_safetensors(tmp_path / "a.safetensors", [("x", "F8", [2])])
