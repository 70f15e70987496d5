"""Read the small fields of a ``training_state.pt`` (epoch, step, args) without loading it.

``torch.save`` writes a zip: ``<name>/data.pkl`` (the pickled structure) and one ``<name>/data/<key>``
entry per tensor storage.  Only ``data.pkl`` is read here, by a restricted unpickler:

* every class or function the pickle names becomes an inert stand-in that records its arguments
  (no code from the file runs: not ``torch``, not ``argparse``, not anything else);
* tensor storages (pickle persistent ids) become placeholders, so the optimizer state — gigabytes for a
  large draft — is never read.

This is used instead of ``torch.load(weights_only=True)`` because that reads every storage (the optimizer
state with them) and refuses any class outside its allow-list, such as an ``argparse.Namespace`` saved as
``args``.  The legacy (pre-zip) format is reported as not readable rather than loaded.
"""

from __future__ import annotations

import io
import pickle
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend.readcap import TORCH_PICKLE_MAX, too_large_message

MAX_PICKLE_BYTES = TORCH_PICKLE_MAX  # the structure of a training state is kilobytes; refuse absurd ones
_SAFE = {("collections", "OrderedDict"): dict, ("builtins", "set"): set, ("builtins", "frozenset"): frozenset}


class StateReadError(ValueError):
    """A training_state.pt that cannot be read; the message names the file and why.

    ``damaged``: the file is cut short or broken (a torn write), not merely in a format this reader leaves
    alone (the legacy pre-zip format)."""

    def __init__(self, message: str, *, damaged: bool = True):
        super().__init__(message)
        self.damaged = damaged


_ZIP_LOCAL = b"PK\x03\x04"


def _bad_zip(p: Path) -> StateReadError:
    """Why ``p`` is not an archive zipfile can open: cut short (a zip's start without its end), empty, or
    another format."""
    try:
        size = p.stat().st_size
        with open(p, "rb") as fh:
            head = fh.read(4)
    except OSError as exc:
        return StateReadError(f"{p}: cannot read: {exc.strerror or exc}")
    if size == 0:
        return StateReadError(f"{p}: empty (0 bytes): the write never finished")
    if head == _ZIP_LOCAL:
        return StateReadError(f"{p}: a zip archive cut short ({size:,} bytes, its end record is missing): "
                              "truncated, a torn write")
    return StateReadError(f"{p}: not a zip archive: written by torch.save in the legacy format (or not a "
                          "torch file); its fields are not read without loading it", damaged=False)


def check_archive(path: str | Path) -> str | None:
    """Whether a torch.save archive (a per-rank training state) is whole: its end record and member
    directory are read, and every member must lie within the file.  None when whole, else why not."""
    p = Path(path)
    try:
        size = p.stat().st_size
        with zipfile.ZipFile(p) as zf:
            for info in zf.infolist():
                if info.header_offset + info.compress_size > size:
                    return f"{p}: member {info.filename} runs past the end of the file: truncated"
    except zipfile.BadZipFile:
        err = _bad_zip(p)
        return str(err) if err.damaged else None
    except OSError as exc:
        return f"{p}: cannot read: {exc.strerror or exc}"
    return None


class Opaque:
    """Stand-in for an object of a class named in the pickle."""

    qualname = "?"

    def __init__(self, *args: Any, **kwargs: Any):
        self.args = args
        self.state: Any = None

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def __repr__(self) -> str:
        return f"<{self.qualname}>"


@dataclass(frozen=True)
class StoragePlaceholder:
    """A tensor storage that was not read."""

    key: str
    numel: int | None


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes):
        super().__init__(io.BytesIO(data))
        self._classes: dict[tuple[str, str], type] = {}

    def find_class(self, module: str, name: str) -> Any:  # noqa: D401 (pickle's name)
        safe = _SAFE.get((module, name))
        if safe is not None:
            return safe
        key = (module, name)
        cls = self._classes.get(key)
        if cls is None:
            cls = type(name, (Opaque,), {"qualname": f"{module}.{name}"})
            self._classes[key] = cls
        return cls

    def persistent_load(self, pid: Any) -> Any:
        if isinstance(pid, tuple) and len(pid) >= 5 and pid[0] == "storage":
            numel = pid[4] if isinstance(pid[4], int) else None
            return StoragePlaceholder(str(pid[2]), numel)
        return StoragePlaceholder(str(pid)[:80], None)


@dataclass(frozen=True)
class TrainingState:
    path: Path
    epoch: int | None
    step: int | None
    keys: tuple[str, ...]  # top-level keys of the saved dict
    args: dict[str, Any] = field(default_factory=dict)  # simple values of the saved args, when present


def _plain(v: Any) -> bool:
    return v is None or isinstance(v, (bool, int, float, str))


def _int_of(d: dict, *names: str) -> int | None:
    for n in names:
        v = d.get(n)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


def read_training_state(path: str | Path) -> TrainingState:
    """Epoch, step and args of a ``training_state.pt`` (Gen-2 keys ``epoch`` / ``global_step``; ``step``
    also read), reading only its pickle."""
    p = Path(path)
    try:
        zf = zipfile.ZipFile(p)
    except FileNotFoundError:
        raise StateReadError(f"{p}: file not found") from None
    except zipfile.BadZipFile:
        raise _bad_zip(p) from None
    except OSError as exc:
        raise StateReadError(f"{p}: cannot read: {exc.strerror or exc}") from None
    with zf:
        names = [i for i in zf.infolist() if i.filename == "data.pkl" or i.filename.endswith("/data.pkl")]
        if not names:
            raise StateReadError(f"{p}: no data.pkl inside: not a torch.save archive")
        info = min(names, key=lambda i: i.filename.count("/"))
        where, what = f"{p} ({info.filename})", "a training state's pickle"
        if info.file_size > MAX_PICKLE_BYTES:
            raise StateReadError(too_large_message(where, info.file_size, MAX_PICKLE_BYTES, what), damaged=False)
        try:
            # the size in the zip directory is the archive's word for it: read one byte past the cap to
            # know, whatever it says
            with zf.open(info) as member:
                data = member.read(MAX_PICKLE_BYTES + 1)
        except (zipfile.BadZipFile, OSError, EOFError) as exc:
            raise StateReadError(f"{p}: data.pkl cannot be read: {exc}") from None
        if len(data) > MAX_PICKLE_BYTES:
            raise StateReadError(too_large_message(where, None, MAX_PICKLE_BYTES, what), damaged=False)
    try:
        obj = _Unpickler(data).load()
    except Exception as exc:  # any malformed pickle: a clear error, never a crash of the caller
        raise StateReadError(f"{p}: data.pkl is not a readable pickle: {type(exc).__name__}: {exc}") from None
    if not isinstance(obj, dict):
        raise StateReadError(f"{p}: holds a {type(obj).__name__}, not the dict SpecForge saves")
    args_obj = obj.get("args")
    args: dict[str, Any] = {}
    raw = args_obj.state if isinstance(args_obj, Opaque) else args_obj
    if isinstance(raw, dict):
        args = {str(k): v for k, v in raw.items() if _plain(v)}
    return TrainingState(path=p, epoch=_int_of(obj, "epoch"), step=_int_of(obj, "global_step", "step"),
                         keys=tuple(str(k) for k in obj), args=args)
