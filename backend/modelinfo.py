"""Read what preflight needs from model folders without loading any weights.

* ``config.json`` of the target and the draft (errors name the file, line and field);
* the draft's safetensors HEADER only: 8 bytes little-endian length, then that many
  bytes of JSON mapping tensor names to dtype, shape and offsets.  A sharded draft
  (``model.safetensors.index.json``) is read shard by shard, headers only.
"""

from __future__ import annotations

import json
import os
import re
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend.readcap import CONFIG_JSON_MAX, SAFETENSORS_HEADER_MAX, TooLarge, read_text_whole, size_text

# The header of a real checkpoint is a few hundred KB at most; refuse absurd lengths
# instead of allocating them (a corrupt or non-safetensors file).
MAX_HEADER_BYTES = SAFETENSORS_HEADER_MAX

# Targets whose MTP head SGLang loads from the target itself (draft path not needed).
MTP_ARCHITECTURES = (
    "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "Glm4MoeForCausalLM",
    "BailingMoeForCausalLM", "BailingMoeV2ForCausalLM",
)


class ModelInfoError(ValueError):
    """A model file that cannot be read; the message names file, line and field."""


def read_json_config(path: str | Path) -> dict[str, Any]:
    """The JSON object in ``path`` (a model's ``config.json``, an index, ``best_meta.json``); a file
    over :data:`~backend.readcap.CONFIG_JSON_MAX` is not read, it is an error naming the cap."""
    p = Path(path)
    try:
        text = read_text_whole(p, CONFIG_JSON_MAX, "a model config")
    except TooLarge as exc:
        raise ModelInfoError(str(exc)) from None
    except FileNotFoundError:
        raise ModelInfoError(f"{p}: file not found") from None
    except PermissionError:
        raise ModelInfoError(f"{p}: not readable (permission denied)") from None
    except UnicodeDecodeError as exc:
        raise ModelInfoError(f"{p}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise ModelInfoError(f"{p}: cannot read: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ModelInfoError(f"{p}:{exc.lineno}: JSON syntax: {exc.msg} (column {exc.colno})") from None
    if not isinstance(data, dict):
        raise ModelInfoError(f"{p}:1: expected a JSON object at the top level, found {type(data).__name__}")
    return data


def _line_of(text: str, key: str) -> int | None:
    m = re.search(r'"' + re.escape(key) + r'"\s*:', text)
    return text.count("\n", 0, m.start()) + 1 if m else None


def _int_field(cfg: dict, key: str, path: Path, *, required: bool = False) -> int | None:
    if key not in cfg or cfg[key] is None:
        if required:
            raise ModelInfoError(f"{path}: field {key!r} is missing")
        return None
    v = cfg[key]
    if isinstance(v, bool) or not isinstance(v, int):
        line = None
        try:
            line = _line_of(read_text_whole(path, CONFIG_JSON_MAX), key)
        except (OSError, ValueError):
            pass
        where = f"{path}:{line}" if line else str(path)
        raise ModelInfoError(f"{where}: field {key!r} should be an integer, found {v!r}")
    return v


@dataclass(frozen=True)
class TargetInfo:
    path: Path
    architectures: tuple[str, ...]
    model_type: str | None
    hidden_size: int
    num_hidden_layers: int
    vocab_size: int | None
    eagle_layer_ids: tuple[int, ...] | None  # an eagle_config in the TARGET's config, rare
    weight_bytes: int | None  # sum of *.safetensors / *.bin sizes on disk
    nextn_layers: int | None = None  # num_nextn_predict_layers (MTP heads), when given

    @property
    def arch(self) -> str:
        return self.architectures[0] if self.architectures else ""

    @property
    def is_mtp(self) -> bool:
        """An architecture SGLang drafts for with its own MTP layers (and it has some)."""
        if self.nextn_layers is not None and self.nextn_layers <= 0:
            return False  # e.g. Kimi-K2: DeepseekV3 architecture without MTP layers
        return any(a in MTP_ARCHITECTURES for a in self.architectures)


def _text_config(cfg: dict) -> dict:
    # Multimodal wrappers keep the language model's sizes under text_config.
    tc = cfg.get("text_config")
    if isinstance(tc, dict) and "hidden_size" not in cfg:
        merged = dict(tc)
        merged.setdefault("architectures", cfg.get("architectures"))
        return merged
    return cfg


def _eagle_ids(cfg: dict, path: Path) -> tuple[int, ...] | None:
    ec = cfg.get("eagle_config")
    if ec is None:
        return None
    if not isinstance(ec, dict):
        raise ModelInfoError(f"{path}: field 'eagle_config' should be an object, found {ec!r}")
    ids = ec.get("eagle_aux_hidden_state_layer_ids")
    if ids is None:
        return None
    if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise ModelInfoError(f"{path}: field 'eagle_config.eagle_aux_hidden_state_layer_ids' "
                             f"should be a list of integers, found {ids!r}")
    return tuple(ids)


def _weights_size(d: Path) -> int | None:
    total, found = 0, False
    try:
        for entry in os.scandir(d):
            if entry.name.endswith((".safetensors", ".bin", ".pt")) and entry.is_file():
                total += entry.stat().st_size
                found = True
    except OSError:
        return None
    return total if found else None


def read_target(model_dir: str | Path) -> TargetInfo:
    d = Path(model_dir)
    path = d / "config.json"
    cfg = _text_config(read_json_config(path))
    archs = cfg.get("architectures") or []
    if not isinstance(archs, list):
        raise ModelInfoError(f"{path}: field 'architectures' should be a list, found {archs!r}")
    return TargetInfo(
        path=d,
        architectures=tuple(str(a) for a in archs),
        model_type=cfg.get("model_type"),
        hidden_size=_int_field(cfg, "hidden_size", path, required=True),
        num_hidden_layers=_int_field(cfg, "num_hidden_layers", path, required=True),
        vocab_size=_int_field(cfg, "vocab_size", path),
        eagle_layer_ids=_eagle_ids(cfg, path),
        weight_bytes=_weights_size(d),
        nextn_layers=_int_field(cfg, "num_nextn_predict_layers", path),
    )


# -- safetensors header ---------------------------------------------------------

@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    file: str


def read_safetensors_header(path: str | Path) -> dict[str, TensorInfo]:
    """Tensor name → :class:`TensorInfo`, reading only the header of ``path``."""
    p = Path(path)
    try:
        st = p.stat()
        if not stat.S_ISREG(st.st_mode):  # a pipe would block the read
            raise ModelInfoError(f"{p}: not a regular file")
        size = st.st_size
        with open(p, "rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                raise ModelInfoError(f"{p}: only {len(head)} bytes; a safetensors file starts with an 8-byte header length")
            (n,) = struct.unpack("<Q", head)
            if n > MAX_HEADER_BYTES:
                raise ModelInfoError(f"{p}: header length field says {size_text(n)}, over the "
                                     f"{size_text(MAX_HEADER_BYTES)} read limit for a safetensors header; "
                                     "not read (not a safetensors file, or corrupt)")
            if n > size - 8:
                raise ModelInfoError(f"{p}: header length field says {n} bytes but the file has {size} bytes: "
                                     "not a safetensors file, or truncated")
            raw = fh.read(n)
    except FileNotFoundError:
        raise ModelInfoError(f"{p}: file not found") from None
    except PermissionError:
        raise ModelInfoError(f"{p}: not readable (permission denied)") from None
    except OSError as exc:
        raise ModelInfoError(f"{p}: cannot read: {exc.strerror or exc}") from None
    if len(raw) < n:
        raise ModelInfoError(f"{p}: the header should be {n} bytes but only {len(raw)} could be read: truncated")
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelInfoError(f"{p}: safetensors header is not valid JSON: {exc}") from None
    if not isinstance(header, dict):
        raise ModelInfoError(f"{p}: safetensors header should be a JSON object")
    out: dict[str, TensorInfo] = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        if not isinstance(meta, dict) or not isinstance(meta.get("shape"), list):
            raise ModelInfoError(f"{p}: header entry {name!r} has no 'shape' list")
        out[name] = TensorInfo(name=name, dtype=str(meta.get("dtype")),
                               shape=tuple(int(x) for x in meta["shape"]), file=p.name)
    return out


@dataclass(frozen=True)
class DraftInfo:
    path: Path
    architectures: tuple[str, ...]
    model_type: str | None
    hidden_size: int | None
    num_hidden_layers: int | None
    vocab_size: int | None
    draft_vocab_size: int | None
    target_hidden_size: int | None
    eagle_layer_ids: tuple[int, ...] | None
    num_aux_hidden_states: int | None  # explicit config field (0.5.23), if any
    tensors: dict[str, TensorInfo] = field(default_factory=dict)
    weight_files: tuple[str, ...] = ()
    weights_error: str | None = None  # why tensors could not be read

    @property
    def arch(self) -> str:
        return self.architectures[0] if self.architectures else ""

    @property
    def kind(self) -> str:
        """``eagle3``, ``eagle`` (EAGLE-1/2), ``mtp`` or ``model`` (a plain causal LM)."""
        archs = " ".join(self.architectures)
        if "Eagle3" in archs or "EAGLE3" in archs.upper().replace("-", ""):
            return "eagle3"
        if "Eagle" in archs:
            return "eagle"
        if any(a in MTP_ARCHITECTURES for a in self.architectures) or "NextN" in archs or "MTP" in archs:
            return "mtp"
        return "model"

    def _find(self, suffix: str) -> TensorInfo | None:
        for name, t in self.tensors.items():
            if name == suffix or name.endswith("." + suffix):
                return t
        return None

    @property
    def fc_weight(self) -> TensorInfo | None:
        return self._find("fc.weight")

    @property
    def fc_in_features(self) -> int | None:
        t = self.fc_weight
        return t.shape[1] if t is not None and len(t.shape) == 2 else None

    @property
    def d2t(self) -> TensorInfo | None:
        return self._find("d2t")

    @property
    def t2d(self) -> TensorInfo | None:
        return self._find("t2d")

    @property
    def lm_head(self) -> TensorInfo | None:
        return self._find("lm_head.weight")

    @property
    def weight_layer_count(self) -> int | None:
        """Decoder layers found in the weights (``midlayer.*`` counts as one)."""
        if not self.tensors:
            return None
        idx: set[int] = set()
        mid = False
        for name in self.tensors:
            m = re.search(r"(?:^|\.)layers\.(\d+)\.", name)
            if m:
                idx.add(int(m.group(1)))
            elif name.startswith("midlayer.") or ".midlayer." in name:
                mid = True
        return len(idx) + (1 if mid and not idx else 0)


def _draft_tensors(d: Path) -> tuple[dict[str, TensorInfo], tuple[str, ...], str | None]:
    index = d / "model.safetensors.index.json"
    files: list[Path]
    if index.exists():
        data = read_json_config(index)
        wm = data.get("weight_map")
        if not isinstance(wm, dict):
            raise ModelInfoError(f"{index}: field 'weight_map' is missing or not an object")
        files = [d / f for f in sorted(set(wm.values()))]
    else:
        files = sorted(d.glob("*.safetensors"))
    if not files:
        bins = sorted(p.name for p in d.glob("*.bin")) + sorted(p.name for p in d.glob("*.pt"))
        if bins:
            return {}, tuple(bins), (f"weights are in {', '.join(bins)} (pickle format): shapes are not "
                                     "read without loading; convert to safetensors to have them checked")
        return {}, (), f"{d}: no *.safetensors weight file"
    tensors: dict[str, TensorInfo] = {}
    for f in files:
        tensors.update(read_safetensors_header(f))
    return tensors, tuple(f.name for f in files), None


def read_draft(draft_dir: str | Path) -> DraftInfo:
    d = Path(draft_dir)
    path = d / "config.json"
    cfg = read_json_config(path)
    archs = cfg.get("architectures") or []
    if not isinstance(archs, list):
        raise ModelInfoError(f"{path}: field 'architectures' should be a list, found {archs!r}")
    ec = cfg.get("eagle_config") if isinstance(cfg.get("eagle_config"), dict) else {}
    n_aux = cfg.get("num_aux_hidden_states", ec.get("num_aux_hidden_states"))
    try:
        tensors, files, werr = _draft_tensors(d)
    except ModelInfoError as exc:
        tensors, files, werr = {}, (), str(exc)
    return DraftInfo(
        path=d,
        architectures=tuple(str(a) for a in archs),
        model_type=cfg.get("model_type"),
        hidden_size=_int_field(cfg, "hidden_size", path),
        num_hidden_layers=_int_field(cfg, "num_hidden_layers", path),
        vocab_size=_int_field(cfg, "vocab_size", path),
        draft_vocab_size=_int_field(cfg, "draft_vocab_size", path),
        target_hidden_size=_int_field(cfg, "target_hidden_size", path),
        eagle_layer_ids=_eagle_ids(cfg, path),
        num_aux_hidden_states=n_aux if isinstance(n_aux, int) and not isinstance(n_aux, bool) else None,
        tensors=tensors,
        weight_files=files,
        weights_error=werr,
    )


def default_aux_layers(num_layers: int) -> tuple[int, int, int]:
    """Layers SGLang captures before (``layers_to_capture``) when the draft names none."""
    return (2, num_layers // 2, num_layers - 3)
