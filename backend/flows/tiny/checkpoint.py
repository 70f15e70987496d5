"""SpecForge Gen-2 checkpoint folders: ``<output_dir>/epoch_{epoch}_step_{step}/`` with ``config.json``,
``model.safetensors`` (the draft's tensors under EAGLE-3 names, ``d2t``/``t2d`` included, the embedding
left out) and ``training_state.pt`` (``epoch``, ``global_step``, ``args``, optimizer and scheduler state).

A folder is written under a hidden temporary name and renamed into place when complete, so a run stopped
in the middle of a save never leaves a half checkpoint for ``--resume`` to pick up.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

_NAME = re.compile(r"^epoch_([0-9]{1,9})(?:_step_([0-9]{1,15}))?$")


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed from; the message names the file and why."""


@dataclass(frozen=True)
class Saved:
    path: Path
    epoch: int
    step: int


def checkpoint_name(epoch: int, step: int) -> str:
    return f"epoch_{epoch}_step_{step}"


def save(output_dir: Path, epoch: int, step: int, draft: torch.nn.Module, config_json: dict,
         optimizer: torch.optim.Optimizer, scheduler, args: argparse.Namespace) -> Saved:
    final = output_dir / checkpoint_name(epoch, step)
    tmp = output_dir / f".{final.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    (tmp / "config.json").write_text(json.dumps(config_json, indent=2) + "\n", encoding="utf-8")
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in draft.state_dict().items()}
    save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    torch.save({"epoch": epoch, "global_step": step, "args": args,
                "optimizer_state_dict": optimizer.state_dict(), "scheduler_state_dict": scheduler.state_dict()},
               tmp / "training_state.pt")
    old = None
    if final.exists():
        old = output_dir / f".{final.name}.old-{os.getpid()}"
        os.replace(final, old)
    os.replace(tmp, final)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return Saved(final, epoch, step)


def latest(output_dir: Path) -> Path | None:
    """The checkpoint folder with the highest (epoch, step) in ``output_dir`` (``epoch_N`` counts as step -1)."""
    best: tuple[tuple[int, int], Path] | None = None
    try:
        entries = list(output_dir.iterdir())
    except FileNotFoundError:
        return None
    for e in entries:
        m = _NAME.match(e.name)
        if not m or not e.is_dir():
            continue
        key = (int(m.group(1)), int(m.group(2)) if m.group(2) is not None else -1)
        if best is None or key > best[0]:
            best = (key, e)
    return best[1] if best else None


def load_weights(folder: Path, draft: torch.nn.Module) -> None:
    """The draft's tensors from ``folder/model.safetensors``; every name and shape must match."""
    f = folder / "model.safetensors"
    try:
        tensors = load_file(str(f))
    except FileNotFoundError:
        raise CheckpointError(f"{f}: not found") from None
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"{f}: cannot be read: {exc}") from None
    own = draft.state_dict()
    missing = sorted(set(own) - set(tensors))
    extra = sorted(k for k in set(tensors) - set(own) if "embed" not in k.lower())
    if missing or extra:
        raise CheckpointError(f"{f}: tensors do not match this draft (missing {missing or 'none'}, "
                              f"unexpected {extra or 'none'})")
    for k, v in own.items():
        if tuple(tensors[k].shape) != tuple(v.shape):
            raise CheckpointError(f"{f}: {k} has shape {list(tensors[k].shape)}, this draft's is {list(v.shape)} "
                                  "(a checkpoint of another draft config)")
    draft.load_state_dict({k: tensors[k] for k in own}, strict=True)


def load_state(folder: Path, device: torch.device | str) -> dict:
    f = folder / "training_state.pt"
    try:
        with torch.serialization.safe_globals([argparse.Namespace]):
            state = torch.load(f, map_location=device, weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{f}: not found") from None
    except Exception as exc:  # a torn or foreign file: one clear line, not a traceback
        raise CheckpointError(f"{f}: cannot be read: {type(exc).__name__}: {exc}") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{f}: holds a {type(state).__name__}, not a training state")
    for key in ("epoch", "global_step", "optimizer_state_dict", "scheduler_state_dict"):
        if key not in state:
            raise CheckpointError(f"{f}: no {key!r}")
    return state
