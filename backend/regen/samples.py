"""The sample viewer's reads: one output row at a byte offset, and its original input record.

Nothing here reads a whole output: :func:`row_at`, :func:`row_before` and :func:`last_row` read
one line around a byte offset; :func:`find_row` and :func:`find_original` search for an id with a
byte search over a memory map, decoding only the lines that hold it.  A line longer than
:data:`~backend.readcap.JSONL_ROW_MAX` is not read: its :class:`RowAt` has no record and an error
that says so (the viewer shows it and can step past it).
"""

from __future__ import annotations

import json
import mmap
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.readcap import CONFIG_JSON_MAX, JSONL_ROW_MAX, load_json_capped, readline_capped, size_text, skip_line
from backend.regen.output import RunFiles

# -- one output row by offset (the sample viewer) -------------------------------------------------


@dataclass(frozen=True)
class RowAt:
    start: int  # byte offset of the line
    end: int  # byte offset just after its newline
    record: dict[str, Any] | None
    error: str | None = None  # why ``record`` is None


def _too_long(path: Path, start: int, end: int) -> RowAt:
    """The row in [start, end) (its newline included), not read."""
    return RowAt(start, end, None, f"{path} at byte {start}: a row of {size_text(end - start - 1)}, over the "
                                   f"{size_text(JSONL_ROW_MAX)} read limit; not shown")


def _decode_at(path: Path, start: int, line: bytes) -> RowAt:
    end = start + len(line)
    text = line.rstrip(b"\n")
    try:
        obj = json.loads(text)
    except (ValueError, UnicodeDecodeError) as exc:
        return RowAt(start, end, None, f"{path} at byte {start}: not valid JSON ({exc})")
    if not isinstance(obj, dict):
        return RowAt(start, end, None, f"{path} at byte {start}: not a JSON object")
    return RowAt(start, end, obj)


def row_at(path: str | os.PathLike[str], offset: int) -> RowAt | None:
    """The first complete line starting at or after ``offset`` (None past the last one)."""
    path = Path(path)
    try:
        f = open(path, "rb")
    except OSError:
        return None
    with f:
        if offset > 0:
            f.seek(offset - 1)
            if f.read(1) != b"\n":
                skip_line(f)  # the middle of a line: on to the next one (never held)
        start = f.tell()
        line, size, ended = readline_capped(f, JSONL_ROW_MAX)
    if not ended:
        return None  # nothing, or a torn line still being written
    if size > len(line):
        return _too_long(path, start, start + size)
    return _decode_at(path, start, line)


def row_before(path: str | os.PathLike[str], offset: int) -> RowAt | None:
    """The complete line that ends at ``offset`` (the one before the line starting there)."""
    path = Path(path)
    if offset <= 0:
        return None
    with open(path, "rb") as f:
        pos = offset - 1  # the newline of the wanted line
        start = 0
        while pos > 0:
            lo = max(0, pos - 64 * 1024)
            f.seek(lo)
            chunk = f.read(pos - lo)
            nl = chunk.rfind(b"\n")
            if nl >= 0:
                start = lo + nl + 1
                break
            pos = lo
        if offset - start > JSONL_ROW_MAX:
            return _too_long(path, start, offset)
        f.seek(start)
        line = f.read(offset - start)
    return _decode_at(path, start, line)


def last_row(path: str | os.PathLike[str]) -> RowAt | None:
    """The last complete line of ``path`` (a torn line after it is ignored)."""
    path = Path(path)
    try:
        size = path.stat().st_size
    except OSError:
        return None
    with open(path, "rb") as f:
        pos = size
        while pos > 0:
            lo = max(0, pos - 64 * 1024)
            f.seek(lo)
            nl = f.read(pos - lo).rfind(b"\n")
            if nl >= 0:
                return row_before(path, lo + nl + 1)
            pos = lo
    return None


def find_row(path: str | os.PathLike[str], row_id: str) -> RowAt | None:
    """The output line whose ``id`` is ``row_id`` (a byte search, then each hit decoded)."""
    path = Path(path)
    try:
        f = open(path, "rb")
    except OSError:
        return None
    with f:
        if os.fstat(f.fileno()).st_size == 0:
            return None
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            needle = json.dumps(str(row_id), ensure_ascii=False).encode()
            pos = mm.find(needle)
            while pos >= 0:
                start = mm.rfind(b"\n", 0, pos) + 1
                end = mm.find(b"\n", pos)
                if end < 0:
                    return None
                if end + 1 - start > JSONL_ROW_MAX:  # cannot be decoded to check its id: on to the next hit
                    pos = mm.find(needle, end)
                    continue
                got = _decode_at(path, start, mm[start:end + 1])
                if got.record is not None and str(got.record.get("id")) == str(row_id):
                    return got
                pos = mm.find(needle, end)
    return None


# -- the original input record of a row ----------------------------------------------------------


def input_entries(job: dict[str, Any]) -> list[dict[str, Any]]:
    """``[{dataset, file, first_turn_only, max_prompt_chars}]`` of a run's ``.job.json``."""
    root = Path(job.get("root") or ".")
    mix = job.get("mix")
    out = []
    if isinstance(mix, dict):
        for e in mix.get("entries") or []:
            if isinstance(e, dict) and e.get("file"):
                p = Path(e["file"]).expanduser()
                out.append({"dataset": e.get("dataset"), "file": p if p.is_absolute() else root / p,
                            "first_turn_only": bool(e.get("first_turn_only")),
                            "max_prompt_chars": e.get("max_prompt_chars")})
    for p in job.get("inputs") or []:
        out.append({"dataset": None, "file": Path(p).expanduser(), "first_turn_only": False,
                    "max_prompt_chars": None})
    return out


def read_job(paths: RunFiles) -> dict[str, Any] | None:
    try:
        obj = load_json_capped(paths.job, CONFIG_JSON_MAX, "a job file")
    except (OSError, ValueError):
        return None
    return obj if isinstance(obj, dict) else None


def find_original(inputs: Iterable[dict[str, Any]], row_id: str, dataset: str | None = None, *,
                  budget_s: float = 3.0) -> dict[str, Any] | None:
    """The input record whose row id is ``row_id``, from the run's input files.

    The dataset's own file is searched first.  JSONL files: a byte search for the id, each hit
    decoded and checked.  Rows whose id is a content hash (no id in the record) and Parquet files
    are read row by row with the run's filters, for at most ``budget_s`` seconds.
    """
    from backend.regen.datasets import Skipped, read_rows

    entries = sorted(inputs, key=lambda e: e.get("dataset") != dataset)
    for e in entries:
        path = Path(e["file"])
        if path.suffix in (".jsonl", ".ndjson", ".json"):
            hit = find_row(path, row_id)
            if hit is not None and hit.record is not None:
                return hit.record
    deadline = time.monotonic() + budget_s
    for e in entries:
        path = Path(e["file"])
        if not path.exists():
            continue
        try:
            for row in read_rows(path, dataset=e.get("dataset") or "input",
                                 first_turn_only=e.get("first_turn_only", False),
                                 max_prompt_chars=e.get("max_prompt_chars")):
                if time.monotonic() > deadline:
                    return None
                if not isinstance(row, Skipped) and row.id == row_id:
                    return row.record
        except (ValueError, OSError):  # an unreadable file: the next one may hold it
            continue
    return None


# -- conversations, for the viewer -------------------------------------------------------------------


def turns(record: dict[str, Any] | None) -> list[dict[str, str]]:
    """``[{role, content}]`` of a record in any input shape (``[]`` when it has none)."""
    if not isinstance(record, dict):
        return []
    from backend.regen.records import ROLE_NAMES

    conv = record.get("conversations", record.get("messages"))
    if isinstance(conv, list):
        out = []
        for t in conv:
            if isinstance(t, dict):
                role = t.get("role", t.get("from"))
                content = t.get("content", t.get("value"))
                out.append({"role": ROLE_NAMES.get(str(role).lower(), str(role)),
                            "content": content if isinstance(content, str) else json.dumps(content)})
        return out
    for k in ("prompt", "text"):
        if isinstance(record.get(k), str):
            return [{"role": "user", "content": record[k]}]
    return []
