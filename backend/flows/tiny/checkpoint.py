"""SpecForge Gen-2 checkpoint folders: ``<output_dir>/epoch_{epoch}_step_{step}/`` with ``config.json``,
``model.safetensors`` (the draft's tensors under EAGLE-3 names, ``d2t``/``t2d`` included, the embedding
left out) and ``training_state.pt`` (``epoch``, ``global_step``, ``args``, optimizer and scheduler state).

A folder is written under a hidden temporary name (``.NAME.tmp-PID``), each file and the folder flushed to
disk (fsync) before it is renamed into place and the output folder's entry flushed after, so neither a run
stopped in the middle of a save nor a power loss leaves a half checkpoint under a checkpoint's name.  A save
that fails removes its temporary folder; one left by a killed run is removed when the next run starts
(:func:`clean_temp`).  A full disk is :class:`DiskFull` ("no space left on device in OUTPUT_DIR"), whether the
write said ENOSPC or torch's writer only "unexpected pos" after a short write (then the free space tells).

``--resume`` takes the newest checkpoint that loads; a torn one (a file cut short) is skipped with a warning
naming it and the one resumed from (:func:`candidates`).
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file
from safetensors.torch import save as safetensors_bytes

_NAME = re.compile(r"^epoch_([0-9]{1,9})(?:_step_([0-9]{1,15}))?$")
_TEMP = re.compile(r"^\.(?P<name>epoch_[0-9]{1,9}(?:_step_[0-9]{1,15})?)\.(?P<kind>tmp|old)-(?P<pid>[0-9]{1,10})$")
# what torch's archive writer says after a short write (its own file, not a Python one): no errno with it
_SHORT_WRITE = ("unexpected pos", "file write failed", "failed writing file")
_SPACE_WORDS = ("no space left on device", "os error 28")
MIN_FREE_BYTES = 1 << 20  # below this, a short write is taken for a full disk whatever the save's size


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed from; the message names the file and why.  ``torn``: a file
    that cannot be read (cut short, damaged), as opposed to a whole checkpoint of another draft."""

    def __init__(self, message: str, *, torn: bool = False):
        super().__init__(message)
        self.torn = torn


class DiskFull(OSError):
    """A save that ran out of space: ``no space left on device in FOLDER`` (and which file)."""

    def __init__(self, folder: Path | str, file: str | None = None):
        super().__init__(errno.ENOSPC, os.strerror(errno.ENOSPC), str(folder))
        self.folder = str(folder)
        self.file = file

    def __str__(self) -> str:
        return f"no space left on device in {self.folder}" + (f" (writing {self.file})" if self.file else "")


def free_bytes(folder: Path | str) -> int | None:
    """Bytes an unprivileged writer may still use in ``folder``'s file system (None when it cannot be asked)."""
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def is_disk_full(exc: BaseException, folder: Path | str, need: int = 0) -> bool:
    """Whether ``exc`` (or an exception it was raised from) says the disk is full: an OSError with errno
    ENOSPC, a message with "No space left on device", or torch's short-write error ("unexpected pos …")
    while ``folder`` has less free space than ``need`` bytes (at least :data:`MIN_FREE_BYTES`)."""
    seen: set[int] = set()
    e: BaseException | None = exc
    short = False
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, DiskFull) or (isinstance(e, OSError) and e.errno == errno.ENOSPC):
            return True
        text = str(e).lower()
        if any(w in text for w in _SPACE_WORDS):
            return True
        short = short or any(w in text for w in _SHORT_WRITE)
        e = e.__cause__ or e.__context__
    if not short:
        return False
    free = free_bytes(folder)
    return free is not None and free < max(need, MIN_FREE_BYTES)


@dataclass(frozen=True)
class Saved:
    path: Path
    epoch: int
    step: int


def checkpoint_name(epoch: int, step: int) -> str:
    return f"epoch_{epoch}_step_{step}"


def _write(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """``write(fh)`` into a new file at ``path``, flushed to disk before it returns."""
    with open(path, "wb") as fh:
        write(fh)
        fh.flush()
        os.fsync(fh.fileno())


def fsync_dir(folder: Path) -> None:
    """Flush a folder's entries (a rename into it, a file made in it) to disk."""
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save(output_dir: Path, epoch: int, step: int, draft: torch.nn.Module, config_json: dict,
         optimizer: torch.optim.Optimizer, scheduler, args: argparse.Namespace) -> Saved:
    """Write ``epoch_{epoch}_step_{step}`` whole or not at all; :class:`DiskFull` when the disk filled."""
    final = output_dir / checkpoint_name(epoch, step)
    tmp = output_dir / f".{final.name}.tmp-{os.getpid()}"
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in draft.state_dict().items()}
    need = 3 * sum(t.numel() * t.element_size() for t in tensors.values())  # weights and two AdamW moments
    doing = "config.json"
    try:
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
        text = (json.dumps(config_json, indent=2) + "\n").encode("utf-8")
        _write(tmp / "config.json", lambda fh: fh.write(text))
        doing = "model.safetensors"
        data = safetensors_bytes(tensors, metadata={"format": "pt"})
        _write(tmp / "model.safetensors", lambda fh: fh.write(data))
        del data
        doing = "training_state.pt"
        state = {"epoch": epoch, "global_step": step, "args": args,
                 "optimizer_state_dict": optimizer.state_dict(), "scheduler_state_dict": scheduler.state_dict()}
        _write(tmp / "training_state.pt", lambda fh: torch.save(state, fh))
        doing = "the folder"
        fsync_dir(tmp)
    except Exception as exc:
        shutil.rmtree(tmp, ignore_errors=True)  # a failed save leaves nothing behind
        if is_disk_full(exc, output_dir, need):
            raise DiskFull(output_dir, f"{final.name}/{doing}" if doing != "the folder" else final.name) from exc
        raise
    old = None
    if final.exists():
        old = output_dir / f".{final.name}.old-{os.getpid()}"
        os.replace(final, old)
    os.replace(tmp, final)
    fsync_dir(output_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return Saved(final, epoch, step)


def _ours_running(pid: int) -> bool:
    """Whether ``pid`` is a live trainer (this one excluded) that may still be writing its temp folder."""
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return False
    try:  # a pid reused by another program does not keep a dead run's folder
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True
    return b"backend.flows.tiny" in cmd


def clean_temp(output_dir: Path, log: logging.Logger) -> list[str]:
    """Remove the temporary folders a killed or failed save left in ``output_dir`` (``.NAME.tmp-PID``); a
    ``.NAME.old-PID`` (the previous copy of a checkpoint being re-saved) is put back when NAME is gone, else
    removed.  Folders of a trainer still running are left.  Returns what was done, one line each."""
    done: list[str] = []
    try:
        entries = sorted(output_dir.iterdir())
    except FileNotFoundError:
        return done
    for e in entries:
        m = _TEMP.match(e.name)
        if not m or e.is_symlink() or not e.is_dir():
            continue
        if _ours_running(int(m.group("pid"))):
            log.warning(f"{e} belongs to trainer pid {m.group('pid')}, still running: left in place")
            continue
        final = output_dir / m.group("name")
        try:
            if m.group("kind") == "old" and not final.exists():
                os.replace(e, final)
                fsync_dir(output_dir)
                done.append(f"put back {final} from {e.name} (a re-save was cut short)")
            else:
                shutil.rmtree(e)
                done.append(f"removed {e} (an unfinished save of an earlier run)")
        except OSError as exc:
            log.warning(f"{e}: could not be removed: {exc.strerror or exc}")
            continue
        log.info(done[-1][0].upper() + done[-1][1:])
    return done


def candidates(output_dir: Path) -> list[Path]:
    """The checkpoint folders in ``output_dir``, newest (highest (epoch, step); ``epoch_N`` counts as step -1)
    first."""
    found: list[tuple[tuple[int, int], Path]] = []
    try:
        entries = list(output_dir.iterdir())
    except FileNotFoundError:
        return []
    for e in entries:
        m = _NAME.match(e.name)
        if not m or e.is_symlink() or not e.is_dir():
            continue
        found.append(((int(m.group(1)), int(m.group(2)) if m.group(2) is not None else -1), e))
    return [p for _, p in sorted(found, key=lambda x: x[0], reverse=True)]


def latest(output_dir: Path) -> Path | None:
    """The checkpoint folder with the highest (epoch, step) in ``output_dir`` (``epoch_N`` counts as step -1)."""
    found = candidates(output_dir)
    return found[0] if found else None


def load_weights(folder: Path, draft: torch.nn.Module) -> None:
    """The draft's tensors from ``folder/model.safetensors``; every name and shape must match."""
    f = folder / "model.safetensors"
    try:
        tensors = load_file(str(f))
    except FileNotFoundError:
        raise CheckpointError(f"{f}: not found", torn=True) from None
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"{f}: cannot be read: {exc}", torn=True) from None
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
        raise CheckpointError(f"{f}: not found", torn=True) from None
    except Exception as exc:  # a torn or foreign file: one clear line, not a traceback
        raise CheckpointError(f"{f}: cannot be read: {type(exc).__name__}: {exc}", torn=True) from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{f}: holds a {type(state).__name__}, not a training state")
    for key in ("epoch", "global_step", "optimizer_state_dict", "scheduler_state_dict"):
        if key not in state:
            raise CheckpointError(f"{f}: no {key!r}")
    return state
