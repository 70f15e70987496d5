"""Tiny checkpoint folders written by hand: config.json, a safetensors file whose header is written
byte by byte (8-byte little-endian length + JSON), and a training_state.pt saved with torch."""

from __future__ import annotations

import argparse
import json
import struct
from pathlib import Path

_SIZES = {"F32": 4, "BF16": 2, "F16": 2, "I64": 8, "BOOL": 1}


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> None:
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        n = _SIZES[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))


def draft_config(hidden: int = 8, vocab: int = 32, draft_vocab: int = 16, layers: int = 1) -> dict:
    return {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": hidden,
            "num_hidden_layers": layers, "num_attention_heads": 2, "num_key_value_heads": 1,
            "intermediate_size": 16, "vocab_size": vocab, "draft_vocab_size": draft_vocab}


def eagle3_tensors(hidden: int = 8, fc_in: int = 24, draft_vocab: int = 16, vocab: int = 32,
                   d2t: bool = True, t2d: bool = True) -> dict:
    t = {
        "fc.weight": ("BF16", [hidden, fc_in]),
        "midlayer.self_attn.q_proj.weight": ("BF16", [hidden, 2 * hidden]),
        "midlayer.input_layernorm.weight": ("BF16", [hidden]),
        "norm.weight": ("BF16", [hidden]),
        "lm_head.weight": ("BF16", [draft_vocab, hidden]),
    }
    if d2t:
        t["d2t"] = ("I64", [draft_vocab])
    if t2d:
        t["t2d"] = ("BOOL", [vocab])
    return t


def write_state(path: Path, epoch: int, step: int) -> None:
    import torch

    lin = torch.nn.Linear(4, 4)
    opt = torch.optim.AdamW(lin.parameters(), lr=1e-4)
    lin(torch.ones(1, 4)).sum().backward()
    opt.step()
    torch.save({"epoch": epoch, "global_step": step,
                "args": argparse.Namespace(num_epochs=3, learning_rate=1e-4, ttt_length=7, output_dir="out"),
                "optimizer_state_dict": opt.state_dict(), "scheduler_state_dict": {"last_epoch": step}}, path)


def write_checkpoint(d: Path, *, cfg: dict | None = None, tensors: dict | None = None,
                     state: tuple | None = None) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg or draft_config(), indent=2), encoding="utf-8")
    write_safetensors(d / "model.safetensors", tensors if tensors is not None else eagle3_tensors())
    if state is not None:
        write_state(d / "training_state.pt", *state)
    return d


def write_target(d: Path, hidden: int = 8, layers: int = 6, vocab: int = 32) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                                               "hidden_size": hidden, "num_hidden_layers": layers,
                                               "vocab_size": vocab}), encoding="utf-8")
    return d


def write_rank_state(path: Path, step: int = 100) -> Path:
    """A whole per-rank training state: a small torch.save-shaped zip (``archive/data.pkl``)."""
    import pickle
    import zipfile

    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("archive/data.pkl", pickle.dumps({"global_step": step}, protocol=2))
    return path
