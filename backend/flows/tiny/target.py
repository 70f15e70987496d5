"""The fixed target network the tiny trainer drafts for: a small Llama-shaped causal LM with seeded weights.

Its model folder holds ``config.json`` (sizes, architecture, tokenizer, seed) and the tokenizer files
(``tokenizer.json``, ``tokenizer_config.json``); the weights are made from the seed on load, the same on
every machine, so a folder of some 60 kilobytes stands for the model.  :func:`make_target` writes
one; :func:`read_target_config` reads it back and :class:`TinyTarget` builds the network.

The forward pass returns what EAGLE-3 trains on: the hidden states leaving three layers (low, mid and
high; ``aux_layer_ids`` counts layers from 0 and takes each one's output, as SpecForge's
``eagle_aux_hidden_state_layer_ids`` do) concatenated, and the final logits.  The logits carry a fixed
prior from the tokenizer alone, a unigram-like preference for its earlier merges (BPE merges the most
frequent pieces first) over single bytes and against special and reserved ids, and for the words the
simulated server generates; so the network's greedy next tokens are mostly words, as a trained model's
are, not uniform noise over the vocabulary.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from torch import nn

from backend.readcap import CONFIG_JSON_MAX, TooLarge, load_json_capped
from backend.sim.tokenizer import write_tokenizer
from backend.flows.tiny import tokenizer
from backend.flows.tiny.layers import MLP, CausalAttention, RMSNorm, rope_tables

ARCHITECTURE = "SpecdeckTinyForCausalLM"
MODEL_TYPE = "specdeck_tiny"

SIZES: dict[str, dict[str, int]] = {
    # tens of seconds for a demo run on two CPU cores
    "tiny": dict(hidden_size=64, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2,
                 intermediate_size=176, vocab_size=2112, max_position_embeddings=4096),
    # a few minutes of real work for one H200
    "large": dict(hidden_size=1024, num_hidden_layers=16, num_attention_heads=16, num_key_value_heads=8,
                  intermediate_size=2816, vocab_size=4096, max_position_embeddings=8192),
}


class TargetError(ValueError):
    """A target folder that cannot be used; the message names the file and field."""


@dataclass(frozen=True)
class TargetConfig:
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int
    seed: int = 0
    size: str | None = None
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0

    def default_aux_layers(self) -> tuple[int, int, int]:
        """Low, mid and high layer outputs (0-based), all before the last layer."""
        n = self.num_hidden_layers
        return (1, n // 2 - 1, n - 2)

    def to_json(self) -> dict:
        d = asdict(self)
        seed, size = d.pop("seed"), d.pop("size")
        sp = tokenizer.specials()
        return {"architectures": [ARCHITECTURE], "model_type": MODEL_TYPE, **d,
                "hidden_act": "silu", "torch_dtype": "float32", "tie_word_embeddings": False,
                "pad_token_id": sp.pad, "bos_token_id": sp.bos, "eos_token_id": sp.eot,
                "tokenizer": tokenizer.NAME, "seed": seed, "size": size}


def config_for(size: str, seed: int = 0) -> TargetConfig:
    if size not in SIZES:
        raise TargetError(f"size {size!r}: choose one of {', '.join(SIZES)}")
    return TargetConfig(**SIZES[size], seed=seed, size=size)


def make_target(folder: str | Path, size: str = "tiny", seed: int = 0) -> Path:
    """Write the target's model folder (``config.json``, replaced atomically, and the tokenizer files);
    returns the folder.  Writing the same target again changes nothing; a folder that holds another model
    is refused (drafts trained against it would no longer fit)."""
    d = Path(folder)
    cfg = config_for(size, seed)
    text = json.dumps(cfg.to_json(), indent=2) + "\n"
    existing = d / "config.json"
    if existing.exists():
        try:
            same = existing.read_text(encoding="utf-8") == text
        except (OSError, UnicodeDecodeError):
            same = False
        if not same:
            raise TargetError(f"{existing}: already there and not the {size} target with seed {seed}; "
                              "give an empty or new folder")
    write_tokenizer(d, model_max_length=cfg.max_position_embeddings)
    tmp = d / "config.json.tmp"
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, existing)
    return d


def read_target_config(folder: str | Path) -> TargetConfig:
    p = Path(folder) / "config.json"
    try:
        data = load_json_capped(p, CONFIG_JSON_MAX, "a model config")
    except TooLarge as exc:
        raise TargetError(str(exc)) from None
    except FileNotFoundError:
        raise TargetError(f"{p}: not found (write one with `python -m backend.flows.tiny make-target "
                          f"{Path(folder)}`)") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise TargetError(f"{p}: cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise TargetError(f"{p}:{exc.lineno}: JSON syntax: {exc.msg}") from None
    if not isinstance(data, dict):
        raise TargetError(f"{p}: expected a JSON object")
    archs = data.get("architectures")
    if archs != [ARCHITECTURE]:
        raise TargetError(f"{p}: field 'architectures' is {archs!r}; this trainer drafts only for its own "
                          f"target network ({ARCHITECTURE}, written by `python -m backend.flows.tiny make-target`)")
    if data.get("tokenizer") != tokenizer.NAME:
        raise TargetError(f"{p}: field 'tokenizer' is {data.get('tokenizer')!r}, expected {tokenizer.NAME!r}")
    fields: dict = {}
    for name in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                 "intermediate_size", "vocab_size", "max_position_embeddings", "seed"):
        v = data.get(name)
        if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name == "seed" else 1):
            raise TargetError(f"{p}: field {name!r} should be a positive integer, found {v!r}")
        fields[name] = v
    if fields["vocab_size"] < tokenizer.vocab_size():
        raise TargetError(f"{p}: field 'vocab_size' is {fields['vocab_size']}; the tokenizer has "
                          f"{tokenizer.vocab_size()} ids")
    if fields["num_hidden_layers"] < 4:
        raise TargetError(f"{p}: field 'num_hidden_layers' is {fields['num_hidden_layers']}; EAGLE-3 takes "
                          "three distinct layers before the last, so at least 4")
    for name in ("rms_norm_eps", "rope_theta"):
        if name in data:
            v = data[name]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise TargetError(f"{p}: field {name!r} should be a positive number, found {v!r}")
            fields[name] = float(v)
    size = data.get("size")
    return TargetConfig(**fields, size=size if isinstance(size, str) else None)


def _prior(vocab: int) -> torch.Tensor:
    """A fixed logit offset per id from the tokenizer alone: merges from 0 down by the log of their rank,
    single bytes -3, special and reserved ids -8 (``<|eot_id|>`` 0, so replies end), and +3 for the words
    and punctuation the simulated server generates (the network speaks the simulated model's words)."""
    n = tokenizer.vocab_size()
    first_merge = tokenizer.FIRST_MERGE
    prior = torch.full((vocab,), -8.0)
    prior[first_merge - 256:first_merge] = -3.0
    ranks = torch.arange(n - first_merge, dtype=torch.float32)
    prior[first_merge:n] = -torch.log1p(ranks / 256.0)
    prior[tokenizer.specials().eot] = 0.0
    sim = tokenizer.tokenizer()
    for piece in (*sim.words, *sim.punct):
        prior[piece.id] += 3.0
    return prior


class Block(nn.Module):
    def __init__(self, c: TargetConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = CausalAttention(c.hidden_size, c.hidden_size, c.num_attention_heads, c.num_key_value_heads)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = MLP(c.hidden_size, c.intermediate_size)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class TinyTarget(nn.Module):
    def __init__(self, c: TargetConfig):
        super().__init__()
        self.config = c
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList(Block(c) for _ in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        self.register_buffer("prior", _prior(c.vocab_size))
        self._init_weights()
        self.requires_grad_(False)
        self.eval()

    @torch.no_grad()
    def _init_weights(self) -> None:
        c = self.config
        g = torch.Generator().manual_seed(c.seed)
        h = c.hidden_size

        def fill(t: torch.Tensor, std: float) -> None:
            t.copy_(torch.randn(t.shape, generator=g) * std)

        fill(self.embed_tokens.weight, 1.0)
        for blk in self.layers:
            a = blk.self_attn
            for lin in (a.q_proj, a.k_proj, a.v_proj):
                fill(lin.weight, 1.0 / math.sqrt(h))
            fill(a.o_proj.weight, 0.5 / math.sqrt(h))
            fill(blk.mlp.gate_proj.weight, 1.0 / math.sqrt(h))
            fill(blk.mlp.up_proj.weight, 1.0 / math.sqrt(h))
            fill(blk.mlp.down_proj.weight, 0.5 / math.sqrt(c.intermediate_size))
        fill(self.lm_head.weight, 3.0 / math.sqrt(h))

    @torch.no_grad()
    def forward(self, ids: torch.Tensor, aux_layer_ids: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
        """(aux hidden states (B, T, len(aux) × hidden), logits (B, T, vocab)) for token ids (B, T)."""
        c = self.config
        t = ids.shape[1]
        cos, sin = rope_tables(c.hidden_size // c.num_attention_heads, t, c.rope_theta, ids.device)
        x = self.embed_tokens(ids)
        aux = []
        want = set(aux_layer_ids)
        for i, blk in enumerate(self.layers):
            x = blk(x, cos, sin)
            if i in want:
                aux.append((i, x))
        by_id = dict(aux)
        logits = self.lm_head(self.norm(x)).float() + self.prior
        return torch.cat([by_id[i] for i in aux_layer_ids], dim=-1), logits
