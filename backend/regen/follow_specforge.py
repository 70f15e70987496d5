"""Following a run of SpecForge's own ``scripts/regenerate_train_data.py``.

Its tqdm bar advances when a request is *submitted* (and for skipped rows), so it runs ahead of
the finished work by up to concurrency × servers.  The true progress is in its three output files
(``../shared/reference/specforge.md`` §3.1): ``OUT`` (``"status": "success"``),
``OUT_error.jsonl`` and ``OUT_skipped.jsonl``.  :class:`SpecForgeFollower` reads each by byte
offset (:class:`~backend.regen.follow.LineReader`): complete lines only, a torn last line waits
for the next poll, a truncated or replaced file is counted again from the start.  The total is
the input file's line count (SpecForge counts lines too), counted once, in pieces.

Each poll reads at most ``budget_bytes`` per file, so attaching to a 350 MB output does not block
a page: until it has caught up, ``catching_up`` is true and the rate is not measured (rows read
late were not written late).  Ids are kept to count distinct rows: SpecForge's count-based
``--resume`` can write a row twice, and a duplicate is not progress.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend.regen.follow import MAX_POINTS, READ_CHUNK, CutLine, Eta, LineReader, eta_band
from backend.regen.output import RunFiles

BUDGET_BYTES = 8 * 1024 * 1024  # per file per poll
# answer length in characters (SpecForge's output has no token counts)
LENGTH_EDGES = [0, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 10**9]

_CLASSES = (
    ("context_length", re.compile(r"context length|maximum context|too many tokens|prompt is too long", re.I)),
    ("timeout", re.compile(r"timed? ?out|timeout", re.I)),
    ("connection", re.compile(r"connection|connect|refused|unreachable|reset by peer", re.I)),
    ("rate_limited", re.compile(r"\b429\b|rate limit|too many requests", re.I)),
    ("server_error", re.compile(r"\b5\d\d\b|internal server error|bad gateway|service unavailable", re.I)),
    ("bad_request", re.compile(r"\b4\d\d\b|bad request|invalid", re.I)),
)


def error_class(text: str) -> str:
    """A short class for an error message (``other`` when none fits)."""
    for name, rx in _CLASSES:
        if rx.search(text):
            return name
    return "other"


@dataclass
class FileCount:
    """What one of the three files holds so far."""

    lines: int = 0  # complete lines
    ids: set[str] = field(default_factory=set)
    no_id: int = 0  # lines without an id (each counted as one row)
    bad: int = 0  # lines that are not a JSON object
    last_bad: str | None = None

    @property
    def rows(self) -> int:
        """Distinct rows: distinct ids plus lines without one."""
        return len(self.ids) + self.no_id

    @property
    def duplicates(self) -> int:
        return self.lines - self.bad - self.rows


def _last_answer(record: dict[str, Any]) -> str | None:
    conv = record.get("conversations")
    if not isinstance(conv, list):
        return None
    for t in reversed(conv):
        if isinstance(t, dict) and t.get("role", t.get("from")) in ("assistant", "gpt"):
            c = t.get("content", t.get("value"))
            return c if isinstance(c, str) else None
    return None


class SpecForgeFollower:
    """True progress of a SpecForge regeneration from its input and output paths."""

    def __init__(self, input_path: str | os.PathLike[str], output_path: str | os.PathLike[str], *,
                 budget_bytes: int = BUDGET_BYTES, clock: Callable[[], float] = time.time,
                 max_points: int = MAX_POINTS):
        self.input = Path(input_path).expanduser()
        self.paths = RunFiles.of(output_path)
        self.budget = budget_bytes
        self.max_points = max_points
        self._clock = clock
        self._lock = threading.Lock()
        self._readers = {"success": LineReader(self.paths.out), "error": LineReader(self.paths.error),
                         "skipped": LineReader(self.paths.skipped)}
        self._resets = {k: 0 for k in self._readers}
        self.files = {k: FileCount() for k in self._readers}
        self.length_counts = [0] * (len(LENGTH_EDGES) - 1)
        self.errors: dict[str, dict[str, Any]] = {}
        self.total: int | None = None  # input lines, once counted
        self._input_off = 0
        self._input_lines = 0
        self._input_last = b"\n"
        self.input_error: str | None = None
        self.points: list[tuple[float, int]] = []  # (poll time, rows completed) once caught up
        self.last_completion_t: float | None = None
        self.polled_at: float | None = None
        self.started_at = clock()
        self.resets = 0  # how many times an output file shrank or was replaced

    # -- reading -----------------------------------------------------------------------------

    def _count_input(self) -> None:
        if self.total is not None:
            return
        try:
            size = self.input.stat().st_size
            with open(self.input, "rb") as f:
                f.seek(self._input_off)
                left = self.budget * 4  # counting newlines is cheap
                while left > 0 and self._input_off < size:
                    data = f.read(min(READ_CHUNK, left))
                    if not data:
                        break
                    self._input_lines += data.count(b"\n")
                    self._input_off += len(data)
                    self._input_last = data[-1:]
                    left -= len(data)
        except OSError as exc:
            self.input_error = f"{self.input}: cannot read the input: {exc.strerror or exc}"
            return
        self.input_error = None
        if self._input_off >= size:
            self.total = self._input_lines + (0 if self._input_last == b"\n" or size == 0 else 1)

    def _take(self, kind: str, offset: int, line: bytes) -> None:
        fc = self.files[kind]
        fc.lines += 1
        reader = self._readers[kind]
        if isinstance(line, CutLine):
            fc.bad += 1
            fc.last_bad = line.note(reader.path, offset, reader.max_line)
            return
        try:
            obj = json.loads(line)
        except (ValueError, UnicodeDecodeError):
            obj = None
        if not isinstance(obj, dict):
            fc.bad += 1
            fc.last_bad = f"{reader.path} at byte {offset}: not a JSON object"
            return
        rid = obj.get("id")
        if isinstance(rid, (str, int)) and not isinstance(rid, bool) and str(rid):
            fc.ids.add(str(rid))
        else:
            fc.no_id += 1
        if kind == "success":
            answer = _last_answer(obj)
            if answer is not None:
                n = len(answer)
                for i in range(len(LENGTH_EDGES) - 1):
                    if n < LENGTH_EDGES[i + 1]:
                        self.length_counts[i] += 1
                        break
        elif kind == "error":
            text = str(obj.get("error") or "no error text")
            cls = error_class(text)
            entry = self.errors.setdefault(cls, {"count": 0, "example": text[:2000]})
            entry["count"] += 1

    def _reset(self, kind: str) -> None:
        self.files[kind] = FileCount()
        self.resets += 1
        if kind == "success":
            self.length_counts = [0] * (len(LENGTH_EDGES) - 1)
        elif kind == "error":
            self.errors = {}
        self.points = []

    def poll(self) -> "SpecForgeFollower":
        with self._lock:
            self._count_input()
            before = self.completed
            for kind, reader in self._readers.items():
                lines = reader.read(self.budget)
                if reader.resets != self._resets[kind]:
                    self._resets[kind] = reader.resets
                    self._reset(kind)
                for offset, line in lines:
                    self._take(kind, offset, line)
            now = self._clock()
            self.polled_at = now
            if not self.catching_up:
                done = self.completed
                if not self.points or done != self.points[-1][1] or now - self.points[-1][0] >= 60:
                    self.points.append((now, done))
                if len(self.points) > 2 * self.max_points:
                    self.points = self.points[::2] + ([self.points[-1]] if len(self.points) % 2 == 0 else [])
                if done > before and self._was_caught_up:
                    self.last_completion_t = now
                self._was_caught_up = True
            return self

    _was_caught_up = False

    # -- figures -----------------------------------------------------------------------------

    @property
    def catching_up(self) -> bool:
        return any(r.size - r.offset > min(self.budget, READ_CHUNK) for r in self._readers.values())

    @property
    def read_fraction(self) -> float:
        size = sum(r.size for r in self._readers.values())
        return 1.0 if size == 0 else sum(min(r.offset, r.size) for r in self._readers.values()) / size

    @property
    def done(self) -> int:
        return self.files["success"].rows

    @property
    def failed(self) -> int:
        return self.files["error"].rows

    @property
    def skipped(self) -> int:
        return self.files["skipped"].rows

    @property
    def completed(self) -> int:
        return self.done + self.failed

    @property
    def duplicates(self) -> int:
        return sum(fc.duplicates for fc in self.files.values())

    @property
    def remaining(self) -> int | None:
        if self.total is None:
            return None
        return max(0, self.total - self.done - self.failed - self.skipped)

    @property
    def exists(self) -> bool:
        return any(r.path.exists() for r in self._readers.values())

    def rate(self, window_s: float = 600.0) -> float | None:
        """Rows completed per second over the last ``window_s`` seconds of polls."""
        if len(self.points) < 2:
            return None
        now = self.points[-1][0]
        recent = [p for p in self.points if p[0] >= now - window_s] or self.points[-2:]
        if len(recent) < 2:
            recent = self.points[-2:]
        (t0, d0), (t1, d1) = recent[0], recent[-1]
        return (d1 - d0) / (t1 - t0) if t1 > t0 else None

    def eta(self, now: float | None = None) -> Eta:
        return eta_band(self.remaining, self.points, now=self._clock() if now is None else now,
                        req_s=self.rate())

    def snapshot(self) -> dict[str, Any]:
        """The same keys as a Specdeck progress snapshot, where SpecForge's files give them."""
        return {
            "t": self.polled_at, "state": "catching up" if self.catching_up else "following",
            "total": self.total, "done": self.done, "failed": self.failed, "skipped": self.skipped,
            "in_flight": None, "remaining": self.remaining, "req_s": self.rate(), "tok_s": None,
            "errors": {k: dict(v) for k, v in self.errors.items()},
            "answer_chars_hist": {"edges": LENGTH_EDGES, "counts": list(self.length_counts)},
            "duplicates": self.duplicates,
        }


_lock = threading.Lock()
_followers: dict[tuple[Path, Path], SpecForgeFollower] = {}


def specforge_follower(input_path: str | os.PathLike[str], output_path: str | os.PathLike[str]) -> SpecForgeFollower:
    """One shared follower per (input, output): every page session reads the same offsets."""
    key = (Path(input_path).expanduser().absolute(), RunFiles.of(output_path).out)
    with _lock:
        f = _followers.get(key)
        if f is None:
            f = _followers[key] = SpecForgeFollower(*key)
        return f
