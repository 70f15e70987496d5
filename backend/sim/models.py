"""Writers for small fake model directories (target and draft) used by tests and the demo.

The files look like the real ones on disk: a Hugging Face style ``config.json`` and, for
drafts, a valid ``model.safetensors`` whose header lists realistic tensors. The tensor data
section is written as a sparse region (seek + truncate), so a multi-gigabyte draft costs
almost no disk space. Only writers live here; reading headers belongs to backend.sglang.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any, Iterable, Sequence

from backend.sim.tokenizer import SimTokenizer, write_tokenizer

__all__ = ["make_target_dir", "make_draft_dir", "write_safetensors"]

_DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "I64": 8, "I32": 4, "BOOL": 1, "U8": 1}

TensorSpec = tuple[str, str, Sequence[int]]  # (name, dtype, shape)


def _heads_for(hidden: int) -> tuple[int, int, int]:
    """(num_attention_heads, num_key_value_heads, head_dim) for a hidden width."""
    head_dim = 128 if hidden % 128 == 0 and hidden >= 128 else (64 if hidden % 64 == 0 else hidden)
    heads = max(1, hidden // head_dim)
    kv = 8 if heads % 8 == 0 else heads
    return heads, kv, head_dim


def _intermediate_for(hidden: int) -> int:
    if hidden == 4096:
        return 14336
    if hidden == 7168:
        return 18432
    return max(256, int(round(hidden * 3.5 / 256.0)) * 256)


def write_safetensors(path: str | Path, tensors: Iterable[TensorSpec],
                      metadata: dict[str, str] | None = None) -> Path:
    """Write a valid safetensors file whose data section is sparse (all zero bytes).

    ``tensors`` is an iterable of (name, dtype, shape). Offsets are laid out back to back in
    the given order, exactly as the format requires (contiguous, no gaps, no overlap).
    """
    path = Path(path)
    header: dict[str, Any] = {"__metadata__": dict(metadata or {"format": "pt"})}
    offset = 0
    for name, dtype, shape in tensors:
        if dtype not in _DTYPE_BYTES:
            raise ValueError(f"unsupported dtype {dtype!r}")
        if name in header:
            raise ValueError(f"duplicate tensor name {name!r}")
        count = 1
        for dim in shape:
            count *= int(dim)
        size = count * _DTYPE_BYTES[dtype]
        header[name] = {"dtype": dtype, "shape": [int(d) for d in shape],
                        "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * ((8 - len(raw) % 8) % 8)  # pad so the data section starts 8-byte aligned
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)))
        fh.write(raw)
        fh.truncate(8 + len(raw) + offset)
    return path


def make_target_dir(path: str | Path, *, architecture: str = "LlamaForCausalLM",
                    hidden_size: int = 4096, num_hidden_layers: int = 32,
                    vocab_size: int = 128256, eagle_config: dict | None = None,
                    model_type: str = "llama") -> Path:
    """Write a target model directory: config.json plus the simulated tokenizer
    (tokenizer.json + tokenizer_config.json, see backend/sim/tokenizer.py), whose special
    token ids config.json's bos/eos ids name."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    heads, kv, head_dim = _heads_for(hidden_size)
    tok = SimTokenizer.builtin()
    config: dict[str, Any] = {
        "architectures": [architecture],
        "model_type": model_type,
        "hidden_size": hidden_size,
        "intermediate_size": _intermediate_for(hidden_size),
        "num_hidden_layers": num_hidden_layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "head_dim": head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-05,
        "rope_theta": 500000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "vocab_size": vocab_size,
        "bos_token_id": tok.bos_id,
        "eos_token_id": tok.eos_id,
        "transformers_version": "4.46.0",
    }
    if eagle_config is not None:
        config["eagle_config"] = dict(eagle_config)
    (path / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    write_tokenizer(path)
    return path


def _layer_tensors(prefix: str, hidden: int, qkv_in: int, heads: int, kv: int,
                   head_dim: int, inter: int, eagle3: bool) -> list[TensorSpec]:
    t: list[TensorSpec] = [
        (f"{prefix}.input_layernorm.weight", "BF16", [hidden]),
        (f"{prefix}.self_attn.q_proj.weight", "BF16", [heads * head_dim, qkv_in]),
        (f"{prefix}.self_attn.k_proj.weight", "BF16", [kv * head_dim, qkv_in]),
        (f"{prefix}.self_attn.v_proj.weight", "BF16", [kv * head_dim, qkv_in]),
        (f"{prefix}.self_attn.o_proj.weight", "BF16", [hidden, heads * head_dim]),
        (f"{prefix}.post_attention_layernorm.weight", "BF16", [hidden]),
        (f"{prefix}.mlp.gate_proj.weight", "BF16", [inter, hidden]),
        (f"{prefix}.mlp.up_proj.weight", "BF16", [inter, hidden]),
        (f"{prefix}.mlp.down_proj.weight", "BF16", [hidden, inter]),
    ]
    if eagle3:
        t.insert(1, (f"{prefix}.hidden_norm.weight", "BF16", [hidden]))
    return t


def make_draft_dir(path: str | Path, *, kind: str = "eagle3", target_hidden_size: int = 4096,
                   hidden_size: int | None = None, num_aux_layers: int = 3,
                   fc_in_features: int | None = None, vocab_size: int = 128256,
                   draft_vocab_size: int = 32000, num_hidden_layers: int = 1,
                   with_d2t: bool = True, with_t2d: bool = True,
                   eagle_aux_hidden_state_layer_ids: Sequence[int] | None = None) -> Path:
    """Write a draft model directory as SpecForge saves it: config.json + model.safetensors.

    kind="eagle3": architectures ["LlamaForCausalLMEagle3"], fc.weight is
    [hidden, num_aux_layers * target_hidden_size] unless ``fc_in_features`` overrides the
    input width (to model a draft trained for another target), lm_head is over the draft
    vocabulary, and d2t [draft_vocab] int64 / t2d [vocab] bool are present unless disabled.
    kind="eagle": an EAGLE-1/2 draft (architectures ["LlamaForCausalLMEagle"]) whose fc
    fuses token embedding and hidden state, so its input width is 2 * hidden.
    """
    if kind not in ("eagle3", "eagle"):
        raise ValueError("kind must be 'eagle3' or 'eagle'")
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    hidden = int(hidden_size if hidden_size is not None else target_hidden_size)
    heads, kv, head_dim = _heads_for(hidden)
    inter = _intermediate_for(hidden)
    eagle3 = kind == "eagle3"

    config: dict[str, Any] = {
        "architectures": ["LlamaForCausalLMEagle3" if eagle3 else "LlamaForCausalLMEagle"],
        "bos_token_id": 128000,
        "eos_token_id": 128001,
        "hidden_act": "silu",
        "hidden_size": hidden,
        "initializer_range": 0.02,
        "intermediate_size": inter,
        "max_position_embeddings": 2048,
        "model_type": "llama",
        "num_attention_heads": heads,
        "num_key_value_heads": kv,
        "num_hidden_layers": num_hidden_layers,
        "pad_token_id": 0,
        "rms_norm_eps": 1e-05,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.28.1",
        "use_cache": True,
        "vocab_size": vocab_size,
    }
    if eagle3:
        config["draft_vocab_size"] = draft_vocab_size
        if hidden != target_hidden_size:
            config["target_hidden_size"] = target_hidden_size
        if eagle_aux_hidden_state_layer_ids is not None:
            config["eagle_config"] = {
                "eagle_aux_hidden_state_layer_ids": [int(i) for i in eagle_aux_hidden_state_layer_ids],
                "use_aux_hidden_state": True,
            }
    (path / "config.json").write_text(json.dumps(config, indent=2) + "\n")

    if eagle3:
        fc_in = int(fc_in_features if fc_in_features is not None else num_aux_layers * target_hidden_size)
        lm_rows = draft_vocab_size
    else:
        fc_in = int(fc_in_features if fc_in_features is not None else 2 * hidden)
        lm_rows = vocab_size
    qkv_in = 2 * hidden if eagle3 else hidden

    tensors: list[TensorSpec] = [("fc.weight", "BF16", [hidden, fc_in])]
    if num_hidden_layers == 1 and eagle3:
        tensors += _layer_tensors("midlayer", hidden, qkv_in, heads, kv, head_dim, inter, eagle3)
    else:
        for i in range(num_hidden_layers):
            tensors += _layer_tensors(f"layers.{i}", hidden, qkv_in, heads, kv, head_dim, inter, eagle3)
    if eagle3:
        tensors.append(("norm.weight", "BF16", [hidden]))
    tensors.append(("embed_tokens.weight", "BF16", [vocab_size, hidden]))
    tensors.append(("lm_head.weight", "BF16", [lm_rows, hidden]))
    if with_d2t:
        tensors.append(("d2t", "I64", [draft_vocab_size]))
    if with_t2d:
        tensors.append(("t2d", "BOOL", [vocab_size]))
    write_safetensors(path / "model.safetensors", tensors)
    return path
