"""The draft's configuration: read from ``--draft-model-config`` or made from the target, as SpecForge does.

A given config is checked against the target before anything trains; each problem names the file, the
line and the field.  The draft's hidden size must be the target's (the draft reads the target's own token
embedding), its vocabulary the target's, one decoder layer, and three aux layers that the target has
before its last layer.
"""

from __future__ import annotations

import json
from pathlib import Path

from backend.readcap import CONFIG_JSON_MAX, read_text_whole
from backend.modelinfo import ModelInfoError, _int_field, _line_of, read_json_config
from backend.flows.tiny import tokenizer
from backend.flows.tiny.draft import ARCHITECTURE, DraftConfig
from backend.flows.tiny.target import TargetConfig


class DraftConfigError(ValueError):
    """A draft config that does not fit the target; the message names the file, line and field."""


def default_draft_vocab(vocab_size: int) -> int:
    """A quarter of the vocabulary, at least 128 tokens (528 of 2,112 for tiny, 1,024 of 4,096 for large)."""
    return min(vocab_size, max(128, vocab_size // 4))


def auto_draft_config(target: TargetConfig, draft_vocab_size: int | None = None) -> DraftConfig:
    return DraftConfig(
        hidden_size=target.hidden_size, target_hidden_size=target.hidden_size,
        intermediate_size=target.intermediate_size, num_attention_heads=target.num_attention_heads,
        num_key_value_heads=target.num_key_value_heads, vocab_size=target.vocab_size,
        draft_vocab_size=draft_vocab_size or default_draft_vocab(target.vocab_size),
        aux_layer_ids=target.default_aux_layers(), max_position_embeddings=target.max_position_embeddings,
        rms_norm_eps=target.rms_norm_eps, rope_theta=target.rope_theta)


def draft_config_json(cfg: DraftConfig) -> dict:
    sp = tokenizer.specials()
    return cfg.to_json(pad=sp.pad, bos=sp.bos, eos=sp.eot)


def write_draft_config(cfg: DraftConfig, path: str | Path) -> Path:
    p = Path(path)
    p.write_text(json.dumps(draft_config_json(cfg), indent=2) + "\n", encoding="utf-8")
    return p


def _where(path: Path, key: str) -> str:
    try:
        line = _line_of(read_text_whole(path, CONFIG_JSON_MAX), key)
    except (OSError, ValueError):
        line = None
    return f"{path}:{line}" if line else str(path)


def _number(cfg: dict, key: str, path: Path, default: float) -> float:
    v = cfg.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        raise DraftConfigError(f"{_where(path, key)}: field {key!r} should be a positive number, found {v!r}")
    return float(v)


def read_draft_config(path: str | Path, target: TargetConfig) -> DraftConfig:
    p = Path(path)
    try:
        cfg = read_json_config(p)

        def need(key: str, default: int | None = None) -> int:
            v = _int_field(cfg, key, p, required=default is None)
            v = default if v is None else v
            if v < 1:
                raise DraftConfigError(f"{_where(p, key)}: field {key!r} should be positive, found {v}")
            return v

        hidden = need("hidden_size")
        heads = need("num_attention_heads")
        cfg_fields = dict(
            hidden_size=hidden, target_hidden_size=need("target_hidden_size", hidden),
            intermediate_size=need("intermediate_size"), num_attention_heads=heads,
            num_key_value_heads=need("num_key_value_heads", heads), vocab_size=need("vocab_size"),
            max_position_embeddings=need("max_position_embeddings", target.max_position_embeddings))
        cfg_fields["draft_vocab_size"] = need("draft_vocab_size", cfg_fields["vocab_size"])
        layers = need("num_hidden_layers", 1)
    except ModelInfoError as exc:
        raise DraftConfigError(str(exc)) from None
    archs = cfg.get("architectures")
    if archs != [ARCHITECTURE]:
        raise DraftConfigError(f"{_where(p, 'architectures')}: field 'architectures' is {archs!r}; "
                               f"an EAGLE-3 draft is [{ARCHITECTURE!r}]")
    if layers != 1:
        raise DraftConfigError(f"{_where(p, 'num_hidden_layers')}: field 'num_hidden_layers' is {layers}; "
                               "the EAGLE-3 draft has one decoder layer (midlayer)")
    for key, want in (("hidden_size", target.hidden_size), ("target_hidden_size", target.hidden_size),
                      ("vocab_size", target.vocab_size)):
        if cfg_fields[key] != want:
            why = ("the draft reads the target's token embedding" if key == "hidden_size"
                   else "fc takes the target's hidden states" if key == "target_hidden_size"
                   else "d2t/t2d map into the target's vocabulary")
            raise DraftConfigError(f"{_where(p, key)}: field {key!r} is {cfg_fields[key]} but the target's "
                                   f"is {want} ({why})")
    if cfg_fields["draft_vocab_size"] > cfg_fields["vocab_size"]:
        raise DraftConfigError(f"{_where(p, 'draft_vocab_size')}: field 'draft_vocab_size' "
                               f"{cfg_fields['draft_vocab_size']} is larger than vocab_size {cfg_fields['vocab_size']}")
    if hidden % heads or heads % cfg_fields["num_key_value_heads"]:
        raise DraftConfigError(f"{_where(p, 'num_attention_heads')}: hidden_size {hidden}, num_attention_heads "
                               f"{heads} and num_key_value_heads {cfg_fields['num_key_value_heads']} do not divide")
    ec = cfg.get("eagle_config")
    ids = ec.get("eagle_aux_hidden_state_layer_ids") if isinstance(ec, dict) else None
    if ids is None:
        aux = target.default_aux_layers()
    else:
        last = target.num_hidden_layers - 2
        if (not isinstance(ids, list) or len(ids) != 3 or len(set(ids)) != 3
                or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i <= last for i in ids)):
            raise DraftConfigError(f"{_where(p, 'eagle_aux_hidden_state_layer_ids')}: field "
                                   f"'eagle_config.eagle_aux_hidden_state_layer_ids' is {ids!r}; give three "
                                   f"different layers in 0..{last} (the target has {target.num_hidden_layers})")
        aux = tuple(ids)
    return DraftConfig(**cfg_fields, aux_layer_ids=aux,  # type: ignore[arg-type]
                       rms_norm_eps=_number(cfg, "rms_norm_eps", p, target.rms_norm_eps),
                       rope_theta=_number(cfg, "rope_theta", p, target.rope_theta))
