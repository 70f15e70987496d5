"""Reading regeneration inputs: JSONL or Parquet files, streamed, one row at a time.

:func:`read_rows` yields, for one file, every usable row as a :class:`~backend.regen.records.Row`
and every unusable one as a :class:`Skipped` that says why (the job writes those to
``<out>_skipped.jsonl``).  :func:`read_mix` does the same for every entry of a mix, in order.

Files
    ``.jsonl``, ``.ndjson`` and ``.json`` are JSON lines: one record per line, read as bytes line
    by line (blank lines are not rows).  A line longer than :data:`MAX_LINE_BYTES` is skipped
    without ever being held in memory.  A ``.json`` file whose first character is ``[`` is one
    JSON array (ShareGPT's dumps): it is scanned in 1 MiB chunks and each item decoded on its
    own, numbered from 1 like lines, with the same limit per item.  ``.parquet`` / ``.pq`` files
    are read in record batches of :data:`PARQUET_BATCH_ROWS` rows, pages read as they are decoded
    (never the whole file); the columns ``id``, ``conversations`` (a list of structs with
    ``role``/``content`` or ``from``/``value``), ``messages``, ``prompt`` and ``text`` are
    understood, other columns are kept in the record.  A Parquet null is an absent key.

Rows
    Any of the three input shapes of :mod:`backend.regen.records`.  A row without a usable id gets
    a stable id from a hash of its turns (:func:`~backend.regen.records.stable_id`), so the same
    content has the same id in every run.  ``line`` is the 1-based line (JSONL), row number
    (Parquet) or item number (JSON array) in its file.

Filters (applied in this order)
    ``first_turn_only``: keep the system turns before the first user turn and that user turn; the
    rest of the conversation is not asked.  ``max_prompt_chars``: a row whose prompt (every turn
    that is not the assistant's, after the first-turn filter) has more *characters* than this is
    skipped.  Then duplicates: a row whose id was already given earlier in the same read (the same
    file, or any earlier entry of the same mix) is skipped, naming where the id was first seen.
    A row *without* an id whose turns an earlier row of the same file had is not a duplicate
    (SpecForge asks every row of a file): its id is the hash id with ``-2``, ``-3``, ... for the
    second, third, ... such row, in file order, and :attr:`~backend.regen.records.Row.repeat` counts
    it, so the job can say so.  Across the entries of a mix a prompt is asked once, as an id is.
    ``limit``: how many usable rows to take; the first ``limit`` rows that pass every filter, in
    file order, so the same file and settings always give the same rows.  Reading stops there.

Skip reasons start with ``<file name>:<line>:`` (``<file name> row <n>:`` for Parquet, ``<file
name> item <n>:`` for a JSON array) and name the field when one is at fault, e.g.
``a.jsonl:7: conversations[1].role: unknown role 'robot'``.
A file that cannot be read at all raises :class:`DatasetError` naming it: a folder, a missing
file, a binary file given as JSON lines (compressed, Parquet, or with NUL bytes in its first
8 KiB), a file that is not Parquet given as Parquet.
"""

from __future__ import annotations

import json
import math
import re
import dataclasses
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import date, datetime, time as dtime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any

from backend.regen.records import Row, RowError, _given_id, to_row

if TYPE_CHECKING:
    from backend.regen.catalog import MixConfig

MAX_LINE_BYTES = 8 * 1024 * 1024  # a JSONL line over this is skipped unread
PARQUET_BATCH_ROWS = 256
PARQUET_READ_BUFFER = 1024 * 1024
RAW_PREVIEW_CHARS = 2000  # how much of an oversized line a Skipped keeps (others keep the whole text)

JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")
PARQUET_SUFFIXES = (".parquet", ".pq")


class DatasetError(ValueError):
    """A file that cannot be read at all (missing, unknown type, not Parquet); names the file."""


@dataclass(frozen=True)
class Skipped:
    """A row that will not be asked: it goes to ``<out>_skipped.jsonl`` with its reason."""

    dataset: str
    line: int | None
    reason: str
    record: Any  # the decoded object, or the raw text (a prefix of it) when it is not JSON
    id: str | None = None  # the row's id when it is known


@dataclass(frozen=True)
class RowCounts:
    """How many rows of an input will be asked (``rows``) and how many are skipped."""

    rows: int = 0
    skipped: int = 0

    @property
    def total(self) -> int:
        return self.rows + self.skipped


# -- reading ---------------------------------------------------------------------------------


def read_rows(path: Path, *, dataset: str, first_turn_only: bool = False,
              max_prompt_chars: int | None = None, limit: int | None = None) -> Iterator[Row | Skipped]:
    """Every row of ``path`` (JSON lines, a JSON array or Parquet, by suffix) as a Row or a Skipped, streamed."""
    return _read(Path(path), dataset=dataset, first_turn_only=first_turn_only,
                 max_prompt_chars=max_prompt_chars, limit=limit, seen={}, repeats={})


def read_mix(mix: "MixConfig", root: Path) -> Iterator[Row | Skipped]:
    """Every entry of ``mix`` in order (files relative to ``root``); an id is asked once per mix.

    Each entry takes its ``samples`` first usable rows; a row whose id an earlier entry already
    gave is skipped and does not count towards its entry's ``samples``.
    """
    seen: dict[str, tuple[str, int | None]] = {}
    repeats: dict[str, int] = {}
    for entry in mix.entries:
        yield from _read(entry_path(entry, root), dataset=entry.dataset,
                         first_turn_only=entry.first_turn_only, max_prompt_chars=entry.max_prompt_chars,
                         limit=entry.samples, seen=seen, repeats=repeats)


def entry_path(entry: Any, root: Path) -> Path:
    """The file of a mix entry, relative paths taken from the workspace ``root``."""
    if not entry.file:
        raise DatasetError(f"mix entry for dataset {entry.dataset!r} has no file "
                           "(give file = ... or resolve the mix against the catalog)")
    p = Path(entry.file).expanduser()
    return p if p.is_absolute() else Path(root) / p


def count_rows(path: Path, *, dataset: str, first_turn_only: bool = False,
               max_prompt_chars: int | None = None, limit: int | None = None) -> RowCounts:
    """What :func:`read_rows` would give, counted while streaming (no row is held)."""
    return _count(read_rows(path, dataset=dataset, first_turn_only=first_turn_only,
                            max_prompt_chars=max_prompt_chars, limit=limit))


def count_mix(mix: "MixConfig", root: Path) -> dict[str, RowCounts]:
    """Per dataset of ``mix`` (in mix order), what :func:`read_mix` would give, streamed."""
    out: dict[str, list[int]] = {e.dataset: [0, 0] for e in mix.entries}
    for item in read_mix(mix, root):
        out.setdefault(item.dataset, [0, 0])[isinstance(item, Skipped)] += 1
    return {name: RowCounts(rows=c[0], skipped=c[1]) for name, c in out.items()}


def _count(items: Iterable[Row | Skipped]) -> RowCounts:
    rows = skipped = 0
    for item in items:
        if isinstance(item, Skipped):
            skipped += 1
        else:
            rows += 1
    return RowCounts(rows=rows, skipped=skipped)


def _read(path: Path, *, dataset: str, first_turn_only: bool, max_prompt_chars: int | None,
          limit: int | None, seen: dict[str, tuple[str, int | None]],
          repeats: dict[str, int]) -> Iterator[Row | Skipped]:
    if limit is not None and limit <= 0:
        return
    if path.is_dir():
        raise DatasetError(f"{path}: a folder, not a file; give the JSON lines or Parquet files in it")
    suffix = path.suffix.lower()
    if suffix == ".json" and _is_json_array(path):
        source: Iterator[tuple[int, Any, str | None]] = _json_array_objects(path)
        where, unit = f"{path.name} item {{}}", "item"
    elif suffix in JSONL_SUFFIXES:
        source = _jsonl_objects(path)
        where, unit = f"{path.name}:{{}}", "line"
    elif suffix in PARQUET_SUFFIXES:
        source = _parquet_objects(path)
        where, unit = f"{path.name} row {{}}", "row"
    else:
        raise DatasetError(f"{path}: unknown input type {path.suffix or '(no suffix)'!r}; "
                           f"use JSON lines ({', '.join(JSONL_SUFFIXES)}) or Parquet ({', '.join(PARQUET_SUFFIXES)})")
    label = f"{dataset} {unit}"  # one string per file, shared by every id it gives
    taken = 0
    for line, obj, problem in source:
        at = where.format(line)
        if problem is not None:
            yield Skipped(dataset, line, f"{at}: {problem}", obj)
            continue
        try:
            row = to_row(obj, dataset=dataset, line=line)
        except RowError as exc:
            yield Skipped(dataset, line, f"{at}: {exc}", obj, _given_id(obj) if isinstance(obj, dict) else None)
            continue
        if first_turn_only:
            row = _first_turn(row)
        if max_prompt_chars is not None and row.prompt_chars > max_prompt_chars:
            yield Skipped(dataset, line, f"{at}: prompt: {row.prompt_chars:,} characters, over "
                          f"max_prompt_chars = {max_prompt_chars:,}", obj, row.id)
            continue
        first = seen.get(row.id)
        # ``is``: the label object of this read of this file, not an equal one of another entry
        if first is not None and first[0] is label and _given_id(obj) is None:
            row = _repeat(row, seen, repeats)
        elif first is not None:
            yield Skipped(dataset, line, f"{at}: id: duplicate id {row.id!r} (first in {first[0]} {first[1]})",
                          obj, row.id)
            continue
        seen[row.id] = (label, line)
        yield row
        taken += 1
        if limit is not None and taken >= limit:
            return


def _repeat(row: Row, seen: dict[str, tuple[str, int | None]], repeats: dict[str, int]) -> Row:
    """A row without an id whose turns an earlier row had, with the next free ``<hash id>-N``."""
    n = repeats.get(row.id, 1)
    while True:
        n += 1
        rid = f"{row.id}-{n}"
        if rid not in seen:
            break
    repeats[row.id] = n
    return dataclasses.replace(row, id=rid, repeat=n - 1)


def _first_turn(row: Row) -> Row:
    kept = []
    for m in row.messages:
        if m.role == "user":
            kept.append(m)
            break
        if m.role == "system":
            kept.append(m)
    return dataclasses.replace(row, messages=tuple(kept))


# -- JSON lines --------------------------------------------------------------------------------


def _jsonl_objects(path: Path) -> Iterator[tuple[int, Any, str | None]]:
    """(line, decoded object or raw text, problem or None) for every non-blank line."""
    try:
        f = open(path, "rb")
    except IsADirectoryError:
        raise DatasetError(f"{path}: a folder, not a file; give the JSON lines or Parquet files in it") from None
    except OSError as exc:
        raise DatasetError(f"{path}: cannot open: {exc.strerror or exc}") from None
    with f:
        kind = _binary_kind(f.read(BINARY_SNIFF_BYTES))
        if kind is not None:
            raise DatasetError(f"{path}: {kind}, not JSON lines (a JSON lines file is UTF-8 text, one "
                               "record per line)")
        f.seek(0)
        line = 0
        while True:
            raw = f.readline(MAX_LINE_BYTES + 1)
            if not raw:
                return
            line += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                size = len(raw) + _skip_rest_of_line(f)
                preview = raw[:RAW_PREVIEW_CHARS].decode("utf-8", "replace")
                del raw
                yield line, preview, f"line is {size:,} bytes, over the limit of {_limit_text()} for one row (not read)"
                continue
            if line == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            raw = raw.rstrip(b"\r\n")
            if not raw.strip():
                continue
            yield (line, *_decode(raw))


BINARY_SNIFF_BYTES = 8192
_MAGIC = ((b"\x1f\x8b", "a gzip-compressed file (decompress it first)"),
          (b"\x28\xb5\x2f\xfd", "a zstd-compressed file (decompress it first)"),
          (b"BZh", "a bzip2-compressed file (decompress it first)"),
          (b"\xfd7zXZ\x00", "an xz-compressed file (decompress it first)"),
          (b"PK\x03\x04", "a zip archive (unpack it first)"),
          (b"PAR1", "a Parquet file (name it .parquet)"))


def _binary_kind(head: bytes) -> str | None:
    """What a file starting with ``head`` is when it is binary, not text; None for text."""
    for magic, kind in _MAGIC:
        if head.startswith(magic):
            return kind
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "UTF-16 text (convert it to UTF-8)"
    nul = head.find(b"\x00")
    if nul >= 0:
        return f"a binary file (a NUL byte at byte {nul + 1})"
    return None


def _limit_text() -> str:
    mib = 1024 * 1024
    return f"{MAX_LINE_BYTES // mib} MiB" if MAX_LINE_BYTES % mib == 0 else f"{MAX_LINE_BYTES:,} bytes"


def _skip_rest_of_line(f: Any) -> int:
    """Read past the end of the current line in 1 MiB pieces; the number of bytes passed."""
    n = 0
    while True:
        chunk = f.readline(1024 * 1024)
        n += len(chunk)
        if not chunk or chunk.endswith(b"\n"):
            return n


# -- a JSON array (.json) ----------------------------------------------------------------------

_OUTSIDE = re.compile(rb'["\[\]{},]')  # what matters outside a string
ARRAY_READ_CHUNK = 1024 * 1024


def _is_json_array(path: Path) -> bool:
    """Whether the first thing in the file (after a BOM and whitespace) is ``[``."""
    try:
        with open(path, "rb") as f:
            head = f.read(3).removeprefix(b"\xef\xbb\xbf")
            while True:
                head = head.lstrip()
                if head:
                    return head[:1] == b"["
                head = f.read(4096)
                if not head:
                    return False
    except OSError:
        return False  # the JSON lines reader reports it


def _json_array_objects(path: Path) -> Iterator[tuple[int, Any, str | None]]:
    """(item number, decoded item or raw text, problem) for every item of a top-level array.

    The file is scanned in 1 MiB chunks for the commas and brackets that separate items (strings
    and escapes respected); each item is decoded on its own, so a bad item is skipped and the
    rest are read, and an item over MAX_LINE_BYTES is skipped without being held.
    """
    item = 0
    parts: list[bytes] = []  # the current item's bytes from earlier chunks
    size, depth, in_str, backslashes = 0, 0, False, 0  # backslashes: a run ending the last chunk

    def finish(tail: bytes) -> tuple[int, Any, str | None] | None:
        nonlocal item, parts, size
        over = size + len(tail) > MAX_LINE_BYTES
        raw = b"" if over else b"".join(parts) + tail
        head = (parts[0] if parts else tail)[:RAW_PREVIEW_CHARS]
        total = size + len(tail)
        parts, size = [], 0
        if not over and not raw.strip():
            return None  # "[]" or a trailing comma: no item
        item += 1
        if over:
            return item, head.decode("utf-8", "replace").strip(), (
                f"item is {total:,} bytes, over the limit of {_limit_text()} for one row (not read)")
        return (item, *_decode(raw.strip()))

    with open(path, "rb") as f:
        while True:
            chunk = f.read(ARRAY_READ_CHUNK)
            if not chunk:
                break
            i, start, n = 0, 0, len(chunk)
            while i < n:
                if in_str:  # find the closing quote: one not escaped by an odd run of backslashes
                    j = chunk.find(b'"', i)
                    k = n if j < 0 else j
                    while k > i and chunk[k - 1] == 0x5C:
                        k -= 1
                    run = (n if j < 0 else j) - k + (backslashes if k == 0 else 0)
                    if j < 0:
                        backslashes = run  # the string goes on in the next chunk
                        break
                    backslashes, i = 0, j + 1
                    if run % 2 == 0:
                        in_str = False
                    continue
                m = _OUTSIDE.search(chunk, i)
                if m is None:
                    break
                j, c = m.start(), chunk[m.start()]
                i = j + 1
                if c == 0x22:  # "
                    in_str = True
                elif c in (0x5B, 0x7B):  # [ {
                    depth += 1
                    if depth == 1:
                        start = i  # the array opens: its first item starts here
                elif c in (0x5D, 0x7D):  # ] }
                    depth -= 1
                    if depth == 0:
                        got = finish(chunk[start:j])
                        if got:
                            yield got
                        return
                elif depth == 1:  # a comma between items
                    got = finish(chunk[start:j])
                    if got:
                        yield got
                    start = i
            if depth >= 1:  # the current item goes on in the next chunk
                piece = chunk[start:]
                if size + len(piece) <= MAX_LINE_BYTES:
                    parts.append(piece)
                else:
                    parts = parts[:1] or [piece[:RAW_PREVIEW_CHARS]]  # keep a preview, drop the rest
                size += len(piece)
    if depth >= 1 and (size or any(p.strip() for p in parts)):
        item += 1
        yield item, b"".join(parts)[:RAW_PREVIEW_CHARS].decode("utf-8", "replace"), (
            "the file ends inside this item (cut off?)")


def _decode(raw: bytes) -> tuple[Any, str | None]:
    """(object, None) for valid UTF-8 JSON, else (the whole raw text, the problem) so that the
    skipped file keeps the row as it was, to be fixed and fed again."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return raw.decode("utf-8", "replace"), (
            f"not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})")
    try:
        return json.loads(text), None
    except json.JSONDecodeError as exc:
        return text, f"not valid JSON: {exc.msg} (column {exc.colno})"
    except (ValueError, RecursionError) as exc:
        return text, f"not valid JSON: {exc}"


# -- Parquet -------------------------------------------------------------------------------------


def _parquet_objects(path: Path) -> Iterator[tuple[int, Any, str | None]]:
    """(row number, record, None) for every row, read PARQUET_BATCH_ROWS rows at a time."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        # pre_buffer=False + a read buffer: pages are read as they are decoded.  With Arrow's
        # default pre-buffering, iter_batches holds every row group it will read (the whole file).
        pf = pq.ParquetFile(path, pre_buffer=False, buffer_size=PARQUET_READ_BUFFER)
    except FileNotFoundError:
        raise DatasetError(f"{path}: cannot open: no such file") from None
    except (OSError, pa.ArrowException) as exc:
        raise DatasetError(f"{path}: not a readable Parquet file: {exc}") from None
    n = 0
    with pf:
        try:
            for batch in pf.iter_batches(batch_size=PARQUET_BATCH_ROWS, use_threads=False):
                for rec in batch.to_pylist():
                    n += 1
                    yield n, _clean(rec), None
        except (OSError, pa.ArrowException) as exc:
            raise DatasetError(f"{path}: unreadable after row {n}: {exc}") from None


def _clean(value: Any) -> Any:
    """A Parquet value as plain JSON: nulls in structs dropped, other types made JSON-safe."""
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, datetime | date | dtime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal):
        return float(value)
    return str(value)
