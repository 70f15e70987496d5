"""The files of a regeneration run, written exactly once per row.

For an output path ``OUT`` ending in ``.jsonl`` (e.g. ``outputs/regen/code-mix.jsonl``):

- ``OUT`` — successful rows in SpecForge's format (input record, ``conversations`` replaced,
  ``"status": "success"``, ``"id"``, ``"regen": {...}``);
- ``OUT_error.jsonl`` — permanent failures (``"status": "error"``, ``"error"``);
- ``OUT_skipped.jsonl`` — rows that will not be asked (``"status": "skipped"``, ``"error"`` as SpecForge
  writes it, and the same text as ``"reason"``);
- ``OUT.progress.jsonl`` — the progress log (backend.regen.progress);
- ``OUT.job.json`` — the run's parameters; ``OUT.control`` — a request written by the page
  (``pause``).

Rows are appended in completion order by :class:`OutputWriter`, in batches that are written with
one ``write``, flushed and ``fsync``-ed; a row counts as done only once it is on disk.  A resume
(:func:`scan`) reads the *ids* already in the three files, never counts lines: whatever was in
flight or still in memory at a crash is asked again, and nothing is written twice.  A torn last
line (a crash in the middle of a batch) is cut off at the last newline and reported.

Every line we write starts with ``{"id": ..., "status": ..., "regen": {...}`` so a resume reads the
id and the accounting of an 83,288-row output from each line's first bytes without decoding the
conversations; a line in another shape is decoded in full.

Every byte written is valid UTF-8, since SpecForge's validator and pyarrow (what HF ``datasets``
reads with) refuse a whole file for one bad sequence.  Text that cannot be encoded (a lone
surrogate such as ``\ud800``, which JSON escapes and Python strings can hold) is written as
U+FFFD; the line says how many characters were replaced in ``regen.replaced_chars`` and the
writer counts them.  :func:`validate` decodes strictly and reports any lone-surrogate escape.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from backend.filemodes import make_private_dirs, open_private

BATCH_ROWS = 256      # a batch is written once it holds this many rows ...
BATCH_SECONDS = 0.5   # ... or its oldest row has waited this long

_HEAD = re.compile(rb'^\{"id": ("(?:[^"\\]|\\.)*"), "status": "(\w+)", "regen": (\{[^{}]*\})')
_SURROGATE = re.compile("[\ud800-\udfff]")
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


class OutputError(ValueError):
    """An output path or file that cannot be used; the message names it."""


@dataclass(frozen=True)
class RunFiles:
    out: Path

    @classmethod
    def of(cls, out: str | Path) -> "RunFiles":
        p = Path(out).expanduser()
        if p.suffix != ".jsonl":
            raise OutputError(f"{p}: the output must be a .jsonl file (SpecForge's format)")
        return cls(p.resolve())

    def _sibling(self, tail: str) -> Path:
        return self.out.with_name(self.out.name[: -len(".jsonl")] + tail)

    @property
    def error(self) -> Path:
        return self._sibling("_error.jsonl")

    @property
    def skipped(self) -> Path:
        return self._sibling("_skipped.jsonl")

    @property
    def progress(self) -> Path:
        return self._sibling(".progress.jsonl")

    @property
    def job(self) -> Path:
        return self._sibling(".job.json")

    @property
    def control(self) -> Path:
        return self._sibling(".control")

    def exists(self) -> bool:
        return any(p.exists() for p in (self.out, self.error, self.skipped, self.job))


# -- records ---------------------------------------------------------------------------------


def _rest(record: Any, drop: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(record, dict):
        return {"raw": record}
    return {k: v for k, v in record.items() if k not in drop}


def success_record(row_id: str, record: dict[str, Any], conversations: list[dict[str, Any]],
                   regen: dict[str, Any]) -> dict[str, Any]:
    out = {"id": row_id, "status": "success", "regen": regen}
    out.update(_rest(record, ("id", "status", "regen", "error", "reason", "conversations")))
    out["conversations"] = conversations
    return out


def error_record(row_id: str, record: dict[str, Any], error: str, regen: dict[str, Any]) -> dict[str, Any]:
    out = {"id": row_id, "status": "error", "regen": regen}
    out.update(_rest(record, ("id", "status", "regen", "error", "reason")))
    out["error"] = error
    return out


def skipped_record(row_id: str | None, record: Any, reason: str, dataset: str, line: int | None) -> dict[str, Any]:
    out: dict[str, Any] = {"id": row_id, "status": "skipped", "regen": {"dataset": dataset, "line": line}}
    out.update(_rest(record, ("id", "status", "regen", "error", "reason")))
    out["error"] = reason  # SpecForge's key for why a row was not regenerated
    out["reason"] = reason
    if row_id is None:
        del out["id"]
        out = {"status": out.pop("status"), "regen": out.pop("regen"), **out}
    return out


def skipped_key(dataset: str, line: int | None, row_id: str | None) -> str:
    """What identifies a skipped row across resumes: where it is (a duplicate shares its id)."""
    return f"{dataset}\0{line}" if line is not None else f"{dataset}\0id\0{row_id}"


def encode(obj: dict[str, Any]) -> bytes:
    """One line of valid UTF-8 (see :func:`encode_counted`)."""
    return encode_counted(obj)[0]


def encode_counted(obj: dict[str, Any]) -> tuple[bytes, int]:
    """One line of valid UTF-8 and how many characters could not be encoded and were written as
    U+FFFD (lone surrogates); when there were any, ``regen.replaced_chars`` says how many."""
    text = json.dumps(obj, ensure_ascii=False, separators=(", ", ": "))
    try:
        return (text + "\n").encode("utf-8"), 0
    except UnicodeEncodeError:
        pass
    text, n = _SURROGATE.subn("\ufffd", text)
    regen = obj.get("regen")
    if isinstance(regen, dict):
        obj = dict(obj, regen=dict(regen, replaced_chars=n))
        text = _SURROGATE.sub("\ufffd", json.dumps(obj, ensure_ascii=False, separators=(", ", ": ")))
    return (text + "\n").encode("utf-8"), n


def safe_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD, so that it encodes as UTF-8."""
    return _SURROGATE.sub("\ufffd", text)


# -- reading back ----------------------------------------------------------------------------


@dataclass
class Existing:
    """What the three output files already hold (a resume skips these rows)."""

    done: dict[str, dict[str, Any]] = field(default_factory=dict)    # id -> its regen dict
    failed: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> regen + error
    skipped: set[str] = field(default_factory=set)                  # skipped_key()s
    repaired: list[str] = field(default_factory=list)               # torn lines cut off
    bad_lines: list[str] = field(default_factory=list)              # unreadable lines kept in place

    def seen(self, row_id: str) -> bool:
        return row_id in self.done or row_id in self.failed


def repair_torn_tail(path: Path) -> int:
    """Cut ``path`` after its last newline; the number of bytes removed (0 when it was whole)."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0
    if size == 0:
        return 0
    with open(path, "rb+") as f:
        pos = size
        chunk = 65536
        keep = 0
        while pos > 0:
            start = max(0, pos - chunk)
            f.seek(start)
            buf = f.read(pos - start)
            i = buf.rfind(b"\n")
            if i >= 0:
                keep = start + i + 1
                break
            pos = start
        if keep == size:
            return 0
        f.truncate(keep)
        f.flush()
        os.fsync(f.fileno())
    return size - keep


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return
    with f:
        for n, line in enumerate(f, 1):
            if line.strip():
                yield n, line


def _head(line: bytes) -> tuple[str, str, dict[str, Any]] | None:
    m = _HEAD.match(line)
    if m is not None:
        try:
            return json.loads(m.group(1)), m.group(2).decode(), json.loads(m.group(3))
        except ValueError:
            pass
    try:
        obj = json.loads(line)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    rid = obj.get("id")
    regen = obj.get("regen") if isinstance(obj.get("regen"), dict) else {}
    return (str(rid) if rid is not None else None), str(obj.get("status", "")), regen  # type: ignore[return-value]


def scan(files: RunFiles) -> Existing:
    """Repair torn tails, then read the ids (and accounting) of every row already written."""
    ex = Existing()
    for path in (files.out, files.error, files.skipped):
        cut = repair_torn_tail(path)
        if cut:
            ex.repaired.append(f"{path}: a torn last line ({cut} bytes) was cut off; that row is asked again")
    for n, line in _lines(files.out):
        head = _head(line)
        if head is None or not head[0]:
            ex.bad_lines.append(f"{files.out}:{n}: not a JSON row with an id; left in place")
            continue
        ex.done[head[0]] = head[2]
    for n, line in _lines(files.error):
        try:
            obj = json.loads(line)
            rid = obj["id"]
        except (ValueError, KeyError, TypeError):
            ex.bad_lines.append(f"{files.error}:{n}: not a JSON row with an id; left in place")
            continue
        regen = dict(obj.get("regen") or {})
        regen["error"] = str(obj.get("error", ""))
        ex.failed[str(rid)] = regen
    for n, line in _lines(files.skipped):
        try:
            obj = json.loads(line)
            regen = obj.get("regen") or {}
            ex.skipped.add(skipped_key(str(regen["dataset"]), regen.get("line"), obj.get("id")))
        except (ValueError, KeyError, TypeError, AttributeError):
            ex.bad_lines.append(f"{files.skipped}:{n}: not a skipped row with regen.dataset; left in place")
    # A row in both files (an error requeued by hand and then done) counts as done.
    for rid in ex.done.keys() & ex.failed.keys():
        del ex.failed[rid]
    return ex


# -- writing ---------------------------------------------------------------------------------


class OutputWriter:
    """Appends rows to the three files in batches: one write per file, flush, fsync."""

    def __init__(self, files: RunFiles, *, batch_rows: int = BATCH_ROWS, batch_seconds: float = BATCH_SECONDS,
                 clock=time.monotonic) -> None:
        self.files = files
        make_private_dirs(files.out.parent)
        # 0600: the answers are training data, the errors quote prompts
        self._fh: dict[str, BinaryIO] = {"success": open_private(files.out, "ab"),
                                         "error": open_private(files.error, "ab"),
                                         "skipped": open_private(files.skipped, "ab")}
        self._buf: dict[str, list[bytes]] = {k: [] for k in self._fh}
        self._pending = 0
        self._oldest: float | None = None
        self.batch_rows = batch_rows
        self.batch_seconds = batch_seconds
        self._clock = clock
        self.written = 0
        self.replaced = 0  # characters written as U+FFFD (lone surrogates), over every row added

    def add(self, kind: str, obj: dict[str, Any]) -> int:
        """Buffer one row; how many of its characters had to be written as U+FFFD."""
        line, n = encode_counted(obj)
        self._buf[kind].append(line)
        self.replaced += n
        self._pending += 1
        if self._oldest is None:
            self._oldest = self._clock()
        return n

    @property
    def pending(self) -> int:
        return self._pending

    def due(self) -> bool:
        return self._pending >= self.batch_rows or (
            self._oldest is not None and self._clock() - self._oldest >= self.batch_seconds)

    def flush(self) -> int:
        """Write, flush and fsync what is buffered; the number of rows made durable."""
        if not self._pending:
            return 0
        for kind, lines in self._buf.items():
            if lines:
                fh = self._fh[kind]
                try:
                    fh.write(b"".join(lines))
                    fh.flush()
                    os.fsync(fh.fileno())
                except OSError as exc:  # a full disk, say: name the file (rows already on disk stay)
                    raise OSError(exc.errno, exc.strerror or str(exc), str(self._path(kind))) from exc
                lines.clear()
        n, self._pending, self._oldest = self._pending, 0, None
        self.written += n
        return n

    def _path(self, kind: str) -> Path:
        return {"success": self.files.out, "error": self.files.error, "skipped": self.files.skipped}[kind]

    def close(self) -> None:
        try:
            self.flush()
        finally:
            for kind, fh in self._fh.items():
                try:
                    fh.close()
                except OSError:
                    pass  # only after flush() failed, which raised the error with the file named


def requeue(files: RunFiles, error_class: str | None = None) -> int:
    """Move failed rows back to the queue: rewrite the error file without them, atomically.

    Every failed row, or only those whose ``regen.class`` is ``error_class``.  The next
    ``regen run`` on the same output asks them again.  Returns how many rows were moved.
    """
    if not files.error.exists():
        return 0
    repair_torn_tail(files.error)
    moved = 0
    fd, tmp = tempfile.mkstemp(prefix=files.error.name + ".", suffix=".tmp", dir=files.error.parent)
    try:
        with os.fdopen(fd, "wb") as dst:
            for _, line in _lines(files.error):
                if error_class is not None:
                    try:
                        cls = (json.loads(line).get("regen") or {}).get("class")
                    except (ValueError, AttributeError):
                        cls = None
                    if cls != error_class:
                        dst.write(line)
                        continue
                moved += 1
            dst.flush()
            os.fsync(dst.fileno())
        os.replace(tmp, files.error)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dfd = os.open(files.error.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return moved


# -- validation ------------------------------------------------------------------------------


@dataclass
class Validation:
    rows: int = 0
    assistant_messages: int = 0
    problems: list[str] = field(default_factory=list)
    problem_count: int = 0
    duplicates: int = 0
    errors: int = 0
    skipped: int = 0
    missing: list[str] = field(default_factory=list)   # input ids in none of the files
    unknown: list[str] = field(default_factory=list)   # output ids not in the inputs
    inputs_checked: bool = False

    @property
    def ok(self) -> bool:
        return not self.problem_count and not self.duplicates and not self.missing and not self.unknown

    def problem(self, text: str) -> None:
        self.problem_count += 1
        if len(self.problems) < 20:
            self.problems.append(text)


def _strict(v: Validation, where: str, line: bytes) -> dict[str, Any] | None:
    """The JSON object on ``line`` as every consumer reads it (strict UTF-8, no lone surrogate);
    None, with the problem recorded, when one of them would refuse it."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError as exc:
        v.problem(f"{where}: not valid UTF-8 (byte 0x{line[exc.start]:02x} at byte {exc.start + 1}); "
                  "SpecForge and pyarrow refuse the whole file")
        return None
    try:
        obj = json.loads(text)
    except ValueError as exc:
        v.problem(f"{where}: not JSON ({exc})")
        return None
    if not isinstance(obj, dict):
        v.problem(f"{where}: not a JSON object")
        return None
    if _SURROGATE_ESCAPE.search(line):
        field_ = _surrogate_at(obj)
        if field_ is not None:
            v.problem(f"{where}: {field_}: a lone surrogate escape (\\ud800-\\udfff), which pyarrow refuses")
            return None
    return obj


def _surrogate_at(value: Any, path: str = "") -> str | None:
    """Where in ``value`` a string holds a lone surrogate (json.loads joins escaped pairs)."""
    if isinstance(value, str):
        return (path or "(value)") if _SURROGATE.search(value) else None
    if isinstance(value, dict):
        for k, item in value.items():
            found = _surrogate_at(k, path or "(key)") if _SURROGATE.search(k) else _surrogate_at(
                item, f"{path}.{k}" if path else k)
            if found is not None:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = _surrogate_at(item, f"{path}[{i}]")
            if found is not None:
                return found
    return None


def validate(files: RunFiles, expected: set[str] | None = None, expected_skipped: int | None = None) -> Validation:
    """Check an output as SpecForge's validator does (a non-empty string ``id``, ``status ==
    "success"``, a conversation of role/content messages ending with the assistant's) and that no
    id is there twice; with ``expected`` (the input ids that are asked), also that every one of
    them is in the output or the error file and nothing else is."""
    v = Validation()
    ids: set[str] = set()
    for n, line in _lines(files.out):
        where = f"{files.out}:{n}"
        obj = _strict(v, where, line)
        if obj is None:
            continue
        v.rows += 1
        rid = obj.get("id")
        if not isinstance(rid, str) or not rid:
            v.problem(f"{where}: id: not a non-empty string")
        elif rid in ids:
            v.duplicates += 1
            v.problem(f"{where}: id: {rid!r} is there twice")
        else:
            ids.add(rid)
        if obj.get("status") != "success":
            v.problem(f"{where}: status: {obj.get('status')!r}, not 'success'")
        conv = obj.get("conversations")
        if not isinstance(conv, list) or not conv:
            v.problem(f"{where}: conversations: not a non-empty list")
            continue
        bad = next((i for i, m in enumerate(conv) if not isinstance(m, dict)
                    or m.get("role") not in ("system", "user", "assistant") or not isinstance(m.get("content"), str)),
                   None)
        if bad is not None:
            v.problem(f"{where}: conversations[{bad}]: not a role/content message")
            continue
        v.assistant_messages += sum(1 for m in conv if m["role"] == "assistant")
        if conv[-1]["role"] != "assistant":
            v.problem(f"{where}: conversations: the last message is the {conv[-1]['role']}'s, not the assistant's")
    err_ids: set[str] = set()
    for n, line in _lines(files.error):
        v.errors += 1
        obj = _strict(v, f"{files.error}:{n}", line)
        if obj is None:
            continue
        rid = obj.get("id")
        if isinstance(rid, str):
            if rid in ids or rid in err_ids:
                v.duplicates += 1
                v.problem(f"{files.error}:{n}: id: {rid!r} is already in the output or the error file")
            err_ids.add(rid)
    for n, line in _lines(files.skipped):
        v.skipped += 1
        _strict(v, f"{files.skipped}:{n}", line)
    if expected is not None:
        v.inputs_checked = True
        seen = ids | err_ids
        v.missing = sorted(expected - seen)
        v.unknown = sorted(seen - expected)
        if expected_skipped is not None and expected_skipped != v.skipped:
            v.problem(f"{files.skipped}: {v.skipped} rows, the inputs have {expected_skipped} to skip")
    return v
