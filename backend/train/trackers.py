"""Metrics from a tracker's local files, read without the tracker installed (reference §2.4).

* TensorBoard (``--report-to tensorboard``): ``SummaryWriter(log_dir=<output_dir>/runs)`` writes
  ``events.out.tfevents.*`` files: TFRecord framing (``uint64 length``, masked CRC-32C of the length,
  the bytes, masked CRC-32C of the bytes) around ``Event`` protocol buffers.  :class:`TensorboardReader`
  decodes the few fields it needs (``wall_time`` 1, ``step`` 2, ``summary`` 5 → ``value`` 1 → ``tag`` 1,
  ``simple_value`` 2, or a scalar ``tensor`` 8) by hand, incrementally by byte offset per file; a record
  still being written waits for the next poll, a record whose CRC does not match is counted and the
  file's reading stops there.
* MLflow file store (``./mlruns`` when no tracking URI is set): ``<run>/metrics/<key>`` holds one
  ``timestamp_ms value step`` line per logged value; :func:`read_mlflow_run` reads them.

Not read: W&B offline runs (``run-*.wandb`` is W&B's own binary record log; only its final
``wandb-summary.json`` is plain JSON) and SwanLab's ``swanlog`` folder.  Their runs still have the
console log, which :mod:`backend.train.reader` parses.

Tags map to the console's names: ``train/acc_0`` → split ``train``, metric ``acc_0``; ``eval/avg_loss`` →
``eval``, ``loss``.
"""

from __future__ import annotations

import os
import struct
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from backend.readcap import METRICS_FILE_MAX, cut_note, read_text_capped
from backend.train.logparse import TrainRecord, check_value

_EVAL_NAMES = {"avg_loss": "loss", "avg_acc": "acc"}
MAX_RECORD = 16 * 1024 * 1024  # a scalar event is ~100 bytes; a longer length field means a broken file


def _crc32c_table() -> list[int]:
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    c = 0xFFFFFFFF
    t = _TABLE
    for b in data:
        c = t[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


# -- protocol buffer wire format (only what scalar events need) -----------------------------------

class WireError(ValueError):
    pass


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if i >= len(buf) or shift > 63:
            raise WireError("truncated or overlong varint")
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7


def fields(buf: bytes):
    """(field number, wire type, value) of each field of a message; value is int, float bytes or bytes."""
    i = 0
    n = len(buf)
    while i < n:
        key, i = _varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(buf, i)
        elif wt == 1:
            if i + 8 > n:
                raise WireError("truncated fixed64")
            v, i = buf[i:i + 8], i + 8
        elif wt == 2:
            ln, i = _varint(buf, i)
            if i + ln > n:
                raise WireError("truncated length-delimited field")
            v, i = buf[i:i + ln], i + ln
        elif wt == 5:
            if i + 4 > n:
                raise WireError("truncated fixed32")
            v, i = buf[i:i + 4], i + 4
        else:
            raise WireError(f"unsupported wire type {wt}")
        yield num, wt, v


def _tensor_scalar(buf: bytes) -> float | None:
    dtype = None
    content = None
    floats: list[float] = []
    for num, wt, v in fields(buf):
        if num == 1 and wt == 0:
            dtype = v
        elif num == 4 and wt == 2:
            content = v
        elif num == 5:  # float_val (packed or not)
            floats.extend(struct.unpack(f"<{len(v) // 4}f", v) if wt == 2 else struct.unpack("<f", v))
        elif num == 6:  # double_val
            floats.extend(struct.unpack(f"<{len(v) // 8}d", v) if wt == 2 else struct.unpack("<d", v))
    if floats:
        return floats[0] if len(floats) == 1 else None
    if content is not None:
        if dtype == 1 and len(content) == 4:
            return struct.unpack("<f", content)[0]
        if dtype == 2 and len(content) == 8:
            return struct.unpack("<d", content)[0]
    return None


def parse_event(buf: bytes) -> tuple[float | None, int | None, list[tuple[str, float]]]:
    """(wall time, step, [(tag, value)]) of one serialized ``Event``; values that are not scalars are left out."""
    wall = None
    step = None
    values: list[tuple[str, float]] = []
    for num, wt, v in fields(buf):
        if num == 1 and wt == 1:
            wall = struct.unpack("<d", v)[0]
        elif num == 2 and wt == 0:
            step = v - (1 << 64) if v >= 1 << 63 else v
        elif num == 5 and wt == 2:
            for vn, vwt, val in fields(v):
                if vn != 1 or vwt != 2:
                    continue
                tag = None
                x = None
                for fn, fwt, fv in fields(val):
                    if fn == 1 and fwt == 2:
                        tag = fv.decode("utf-8", "replace")
                    elif fn == 2 and fwt == 5:
                        x = struct.unpack("<f", fv)[0]
                    elif fn == 8 and fwt == 2:
                        x = _tensor_scalar(fv)
                if tag is not None and x is not None:
                    values.append((tag, x))
    return wall, step, values


def split_tag(tag: str) -> tuple[str | None, str]:
    if tag.startswith("train/"):
        return "train", tag[6:]
    if tag.startswith("eval/"):
        name = tag[5:]
        return "eval", _EVAL_NAMES.get(name, name)
    return None, tag


@dataclass
class _FileState:
    offset: int = 0
    inode: int | None = None
    broken: str | None = None


@dataclass
class TrackerStats:
    events: int = 0
    records: int = 0
    values_rejected: int = 0
    broken_files: int = 0
    problems: Counter = field(default_factory=Counter)


class TensorboardReader:
    """Follow every ``events.out.tfevents.*`` file under ``log_dir`` (``<output_dir>/runs``)."""

    def __init__(self, log_dir: str | os.PathLike[str], *, max_bytes: int = 8 * 1024 * 1024):
        self.log_dir = Path(log_dir)
        self.max_bytes = max_bytes
        self.files: dict[Path, _FileState] = {}
        self.stats = TrackerStats()

    def poll(self) -> list[TrainRecord]:
        out: list[TrainRecord] = []
        if not self.log_dir.is_dir():
            return out
        for path in sorted(self.log_dir.rglob("events.out.tfevents.*")):
            st = self.files.setdefault(path, _FileState())
            self._read(path, st, out)
        return out

    def _problem(self, path: Path, st: _FileState, why: str) -> None:
        st.broken = why
        self.stats.broken_files += 1
        self.stats.problems[f"{path.name}: {why}"] += 1

    def _read(self, path: Path, st: _FileState, out: list[TrainRecord]) -> None:
        try:
            fst = os.stat(path)
        except OSError:
            return
        if st.inode is not None and (fst.st_ino != st.inode or fst.st_size < st.offset):
            st.offset, st.broken = 0, None  # replaced or truncated: read again
        st.inode = fst.st_ino
        if st.broken or fst.st_size <= st.offset:
            return
        with open(path, "rb") as f:
            f.seek(st.offset)
            data = f.read(self.max_bytes)
        i = 0
        while i + 12 <= len(data):
            (length,), lcrc = struct.unpack("<Q", data[i:i + 8]), struct.unpack("<I", data[i + 8:i + 12])[0]
            if masked_crc(data[i:i + 8]) != lcrc:
                self._problem(path, st, f"record length CRC mismatch at byte {st.offset + i}")
                break
            if length > MAX_RECORD:
                self._problem(path, st, f"record of {length:,} bytes at byte {st.offset + i}")
                break
            end = i + 12 + length + 4
            if end > len(data):
                if i == 0 and 12 + length + 4 > self.max_bytes:  # would never fit in one read
                    self._problem(path, st, f"record of {length:,} bytes at byte {st.offset}, over the "
                                            f"{self.max_bytes:,}-byte read size")
                break  # still being written: next poll
            body = data[i + 12:i + 12 + length]
            if masked_crc(body) != struct.unpack("<I", data[end - 4:end])[0]:
                self._problem(path, st, f"record data CRC mismatch at byte {st.offset + i}")
                break
            i = end
            self._event(body, out)
        st.offset += i

    def _event(self, body: bytes, out: list[TrainRecord]) -> None:
        self.stats.events += 1
        try:
            wall, step, values = parse_event(body)
        except (WireError, struct.error) as exc:
            self.stats.problems[f"undecodable event: {exc}"] += 1
            return
        by_split: dict[str | None, TrainRecord] = {}
        for tag, x in values:
            split, name = split_tag(tag)
            rec = by_split.get(split)
            if rec is None:
                rec = TrainRecord("metrics", "tensorboard", step=step, split=split, wall_time=wall)
                by_split[split] = rec
            try:
                rec.metrics[name] = check_value(name, x)
            except ValueError as exc:
                rec.rejected += (str(exc),)
                self.stats.values_rejected += 1
        for rec in by_split.values():
            if rec.metrics:
                self.stats.records += 1
                out.append(rec)


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def read_mlflow_run(run_dir: str | os.PathLike[str]) -> tuple[list[TrainRecord], list[str]]:
    """Records of an MLflow file-store run folder (``mlruns/<experiment>/<run>``) and the lines it could not
    read (``file:line: why``).  One record per (split, step), values merged, ordered by step."""
    root = Path(run_dir) / "metrics"
    merged: dict[tuple[str | None, int], TrainRecord] = {}
    problems: list[str] = []
    if not root.is_dir():
        return [], [f"{root}: no metrics folder"]
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        tag = f.relative_to(root).as_posix()
        split, name = split_tag(tag)
        try:
            text, cut = read_text_capped(f, METRICS_FILE_MAX)
        except OSError as exc:
            problems.append(f"{f}: cannot read: {exc.strerror or exc}")
            continue
        lines = text.splitlines()
        if cut:
            lines = lines[:-1]  # the line the cap fell in
            problems.append(cut_note(f, _size(f), METRICS_FILE_MAX) + "; the later steps are not shown")
        for n, line in enumerate(lines, 1):
            parts = line.split()
            if not parts:
                continue
            if len(parts) != 3 or not parts[0].isdigit() or not parts[2].lstrip("-").isdigit():
                problems.append(f"{f}:{n}: expected 'timestamp value step', found {line[:80]!r}")
                continue
            try:
                value = check_value(name, parts[1])
            except ValueError as exc:
                problems.append(f"{f}:{n}: {exc}")
                continue
            step = int(parts[2])
            rec = merged.get((split, step))
            if rec is None:
                rec = TrainRecord("metrics", "mlflow", step=step, split=split, wall_time=int(parts[0]) / 1000.0)
                merged[(split, step)] = rec
            rec.metrics[name] = value
    recs = sorted(merged.values(), key=lambda r: (r.step, r.split or ""))
    return recs, problems


@dataclass(frozen=True)
class TrackerFiles:
    kind: str  # tensorboard | mlflow | wandb | swanlab
    path: Path
    readable: bool  # this module reads it
    note: str


def find_tracker_files(output_dir: str | os.PathLike[str],
                       cwd: str | os.PathLike[str] | None = None) -> list[TrackerFiles]:
    """The trackers' local files of a run, where SpecForge puts them: TensorBoard under ``<output_dir>/runs``,
    SwanLab under ``<output_dir>/swanlog``, MLflow's ``./mlruns`` and W&B's ``wandb/`` relative to the
    training's working folder ``cwd`` (the default W&B dir is the SpecForge checkout's ``wandb``)."""
    out: list[TrackerFiles] = []
    d = Path(output_dir)
    runs = d / "runs"
    if runs.is_dir() and any(runs.rglob("events.out.tfevents.*")):
        out.append(TrackerFiles("tensorboard", runs, True, "TensorBoard event files"))
    if (d / "swanlog").is_dir():
        out.append(TrackerFiles("swanlab", d / "swanlog", False,
                                "SwanLab's own format is not read; the console log is used"))
    if cwd is not None:
        c = Path(cwd)
        ml = c / "mlruns"
        if ml.is_dir():
            for run in sorted(p.parent for p in ml.glob("*/*/metrics")):
                out.append(TrackerFiles("mlflow", run, True, f"MLflow run {run.name}"))
        wb = c / "wandb"
        if wb.is_dir():
            for run in sorted(wb.glob("offline-run-*")) + sorted(wb.glob("run-*")):
                if run.is_dir():
                    out.append(TrackerFiles("wandb", run, False, "W&B's run-*.wandb record log is not read "
                                                                 "(files/wandb-summary.json holds only the last "
                                                                 "values); the console log is used"))
    return out
