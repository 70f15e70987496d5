"""Following a regeneration while it runs: incremental readers by byte offset, never rescanning.

Two kinds of run are followed:

- **Specdeck's own** (:class:`ProgressFollower`): the job appends one JSON snapshot per line to
  ``OUT.progress.jsonl`` (see ``backend/regen/progress.py``).  The last complete line is the
  current state; the earlier ones are the history the charts draw.  A long log (50 hours at one
  line per 2 s is 90,000 lines) is not read whole when first opened: :data:`MAX_POINTS` lines
  are read at evenly spaced offsets, then only what is appended.  The history never holds more
  than about ``2 × MAX_POINTS`` points (every other point is dropped when it fills up).
- **SpecForge's ``regenerate_train_data.py``** (:class:`SpecForgeFollower`, in
  :mod:`backend.regen.follow_specforge`): its tqdm bar runs ahead of the work, so progress
  comes from its three output files instead.

Both readers keep a byte offset per file (:class:`LineReader`): a poll reads only the bytes
appended since the last one, a torn last line (a writer in the middle of a line) is left for the
next poll, and a file that shrank or was replaced is read again from the start (its counts
reset, the follower says so).

:func:`eta_band` turns remaining rows, the recent rate and the spread of answer lengths into an
ETA with a band; :func:`stall_alert` says when a running job has completed nothing for a while.
The sample viewer's reads (one output row at a byte offset, the original input record by id)
are in :mod:`backend.regen.samples`.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend.readcap import JSONL_ROW_MAX, readline_capped, size_text, skip_line
from backend.regen.output import RunFiles
from specdeck_types.eta import Eta

MAX_POINTS = 2000  # history points kept per run (about; see ProgressFollower)
SAMPLE_ABOVE_BYTES = 4 * 1024 * 1024  # a progress log larger than this is sampled when first opened
READ_CHUNK = 4 * 1024 * 1024
MAX_READ_BYTES = 16 * 1024 * 1024  # what one LineReader.read() holds at most, when not told
CATCH_UP_READS = 64  # reads per ProgressFollower.poll at most (the next poll goes on)
CUT_KEEP = 4096  # bytes kept of a line over the cap, to show where it starts
RECENT_S = 1800.0  # the window the recent rate and its spread are measured over
MIN_WINDOWS = 4  # rate windows needed before the band comes from the rate spread
WINDOW_S = 60.0  # a rate window is at least this long
STALL_AFTER_S = 600.0  # default: a running job with no completion for this long is stalled



# -- complete lines by byte offset ------------------------------------------------------------


class CutLine(bytes):
    """The first bytes of a line longer than the reader's cap; ``size`` is the whole line's length.

    Nothing past the cap was kept: the line cannot be decoded, only reported."""

    size: int

    def __new__(cls, head: bytes, size: int) -> "CutLine":
        obj = super().__new__(cls, head)
        obj.size = size
        return obj

    def note(self, path: str | os.PathLike[str], offset: int, limit: int = JSONL_ROW_MAX) -> str:
        return (f"{path} at byte {offset}: a line of {size_text(self.size)}, over the {size_text(limit)} read limit; "
                "not read")


class LineReader:
    """The complete lines appended to a file since the last call, by byte offset.

    ``read()`` returns ``(offset, line)`` pairs (``line`` without its newline).  Bytes after the
    last newline are a torn line still being written: they are read again next time.  When the
    file is shorter than the offset or is another file (inode changed), reading starts over at 0
    and ``resets`` counts it, so the caller can drop what it had counted.

    One call reads about ``max_bytes`` (default :data:`MAX_READ_BYTES`), so a file that grew by a
    gigabyte since the last call is caught up with over several calls, never held at once.  A line
    longer than ``max_line`` is returned as a :class:`CutLine` (its first bytes and its length) and
    the rest of it is read past without being kept, even while it is still being written.
    """

    def __init__(self, path: str | os.PathLike[str], *, offset: int = 0, max_line: int = JSONL_ROW_MAX):
        self.path = Path(path)
        self.offset = offset
        self.max_line = max_line
        self.resets = 0
        self.size = 0  # the file's size at the last read
        self._ino: int | None = None
        self._long: tuple[int, bytes, int] | None = None  # (start, first bytes, bytes so far) of a line passed over

    def _check(self) -> os.stat_result | None:
        try:
            st = self.path.stat()
        except OSError:
            return None
        if self._ino is not None and (st.st_ino != self._ino or st.st_size < self.offset):
            self.offset = 0
            self.resets += 1
            self._long = None
        self._ino = st.st_ino
        self.size = st.st_size
        return st

    def _pass_long(self, f: Any, out: list[tuple[int, bytes]]) -> bool:
        """Read on past the over-long line being passed over; True once its newline is reached."""
        start, head, size = self._long  # type: ignore[misc]
        passed, ended = skip_line(f)
        size += passed
        self.offset = start + size
        if not ended:
            self._long = (start, head, size)
            return False
        self._long = None
        out.append((start, CutLine(head, size - 1)))
        return True

    def read(self, max_bytes: int | None = None) -> list[tuple[int, bytes]]:
        st = self._check()
        if st is None or st.st_size <= self.offset:
            return []
        budget = max(1, MAX_READ_BYTES if max_bytes is None else max_bytes)
        out: list[tuple[int, bytes]] = []
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            if self._long is not None and not self._pass_long(f, out):
                return out
            data = f.read(budget)
            cut = data.rfind(b"\n")
            if cut < 0:
                # one line longer than the budget, or a torn line: that line alone, up to the cap
                del data
                f.seek(self.offset)
                line, size, ended = readline_capped(f, self.max_line)
                if size <= self.max_line:
                    if ended:
                        if size > 1:
                            out.append((self.offset, line[:-1]))
                        self.offset += size
                    return out  # else: torn, wait for its end
                self._long = (self.offset, line[:CUT_KEEP], size)
                if ended:
                    self._long = None
                    out.append((self.offset, CutLine(line[:CUT_KEEP], size - 1)))
                self.offset += size
                return out
        pos, base = 0, self.offset
        while pos <= cut:
            end = data.index(b"\n", pos)
            if end - pos > self.max_line:
                out.append((base + pos, CutLine(data[pos:pos + CUT_KEEP], end - pos)))
            elif end > pos:
                out.append((base + pos, data[pos:end]))
            pos = end + 1
        self.offset = base + cut + 1
        return out


# -- ETA -----------------------------------------------------------------------------------------


def quantile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated quantile of ``values`` (None when empty)."""
    xs = sorted(values)
    if not xs:
        return None
    pos = (len(xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def hist_quantile(edges: Sequence[float], counts: Sequence[int], q: float) -> float | None:
    """Quantile of a histogram (``len(edges) == len(counts) + 1``), linear inside a bin."""
    total = sum(counts)
    if total <= 0 or len(edges) != len(counts) + 1:
        return None
    target = q * total
    seen = 0.0
    for i, c in enumerate(counts):
        if c and seen + c >= target:
            frac = (target - seen) / c
            return edges[i] + (edges[i + 1] - edges[i]) * frac
        seen += c
    return float(edges[-1])


def rate_windows(points: Sequence[tuple[float, int]], *, now: float, recent_s: float = RECENT_S,
                 min_window_s: float = WINDOW_S) -> list[float]:
    """Rows per second over consecutive windows of at least ``min_window_s`` seconds, from the
    ``(t, done)`` points of the last ``recent_s`` seconds.  (Snapshots 2 s apart hold 0, 1 or 2
    rows each at 0.5 rows/s: their spread would say nothing about the rate's.)"""
    recent = [(t, d) for t, d in points if t >= now - recent_s]
    rates = []
    if not recent:
        return rates
    t0, d0 = recent[0]
    for t1, d1 in recent[1:]:
        if d1 < d0:  # counts went down (a requeue): start a new window here
            t0, d0 = t1, d1
            continue
        if t1 - t0 >= min_window_s:
            rates.append((d1 - d0) / (t1 - t0))
            t0, d0 = t1, d1
    return rates


def eta_band(remaining: int | None, points: Sequence[tuple[float, int]], *, now: float,
             req_s: float | None = None, tok_s: float | None = None,
             length_hist: tuple[Sequence[float], Sequence[int]] | None = None,
             recent_s: float = RECENT_S) -> Eta:
    """The time left for ``remaining`` rows, as a point and a p10-p90 band.

    ``points`` are ``(t, rows completed)`` of the current run.  The point estimate is remaining ÷
    the rate over the last ``recent_s`` seconds (else ``req_s``).  The band: with at least
    :data:`MIN_WINDOWS` rate windows, remaining ÷ the p90 and p10 of the windows' rates (their
    spread comes from how long the answers in each window were); before that, the token model:
    remaining × the p10 and p90 answer length (``length_hist``) ÷ ``tok_s``, as wide as the
    lengths are spread.
    """
    if remaining is None:
        return Eta(None, None, None, "the number of rows left is not known yet")
    if remaining <= 0:
        return Eta(0.0, 0.0, 0.0, "nothing left")
    recent = [(t, d) for t, d in points if t >= now - recent_s]
    rate = None
    if len(recent) >= 2 and recent[-1][0] > recent[0][0] and recent[-1][1] > recent[0][1]:
        rate = (recent[-1][1] - recent[0][1]) / (recent[-1][0] - recent[0][0])
    elif req_s:
        rate = req_s
    if not rate:
        return Eta(None, None, None, "no row completed recently: no rate to go by")
    point = remaining / rate
    windows = rate_windows(points, now=now, recent_s=recent_s)
    if len(windows) >= MIN_WINDOWS:
        lo_r, hi_r = quantile(windows, 0.1), quantile(windows, 0.9)
        low = remaining / hi_r if hi_r else point
        high = remaining / lo_r if lo_r else None
        if high is None:  # some windows completed nothing: the slow end is open
            high = max(point, remaining / max(quantile(windows, 0.25) or rate, 1e-9))
        minutes = recent_s / 60
        return Eta(point, min(low, point), max(high, point),
                   f"remaining ÷ the rate of the last {minutes:.0f} min ({rate:,.2f} rows/s); band: "
                   f"p10-p90 of the rate over {len(windows)} windows of {WINDOW_S:.0f} s or more")
    if length_hist is not None and tok_s:
        edges, counts = length_hist
        p10, p90 = hist_quantile(edges, counts, 0.1), hist_quantile(edges, counts, 0.9)
        if p10 is not None and p90 is not None:
            low, high = remaining * p10 / tok_s, remaining * p90 / tok_s
            return Eta(point, min(low, point), max(high, point),
                       f"remaining ÷ {rate:,.2f} rows/s; band: remaining × the p10-p90 answer length "
                       f"({p10:,.0f}-{p90:,.0f} tokens) ÷ {tok_s:,.1f} tok/s, until the rate has history")
    return Eta(point, point, point, f"remaining ÷ {rate:,.2f} rows/s (no spread known yet)")


# -- stall -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StallAlert:
    """Shaped like the runtime's other alerts (severity, code, title, message, causes, since)."""

    severity: str
    code: str
    title: str
    message: str
    causes: tuple[str, ...]
    since: float | None


def stall_alert(name: str, *, running: bool, last_completion_t: float | None, started_t: float | None,
                now: float, after_s: float = STALL_AFTER_S, message: str | None = None) -> StallAlert | None:
    """A warning when a RUNNING job has completed no row for ``after_s`` seconds.

    ``last_completion_t``: when a row last completed (or failed), None if none has in this run;
    then the time counts from ``started_t``.
    """
    if not running:
        return None
    since = last_completion_t if last_completion_t is not None else started_t
    if since is None or now - since < after_s:
        return None
    minutes = (now - since) / 60
    causes = ("the servers are down or overloaded (see the Servers page)",
              "every request is waiting on a very long answer")
    if message:
        causes = (message,) + causes
    return StallAlert("warning", "regen-stalled", f"{name}: no row completed for {minutes:.0f} min",
                      f"The regeneration {name} is running but has completed no row since "
                      f"{time.strftime('%H:%M:%S', time.localtime(since))}.", causes, since)


# -- Specdeck's progress log ----------------------------------------------------------------------

_POINT_KEYS = ("done", "failed", "skipped", "in_flight", "req_s", "tok_s", "completion_tokens")


@dataclass
class History:
    """Chart series of a run's snapshots (plain lists of equal length)."""

    t: list[float] = field(default_factory=list)
    started_at: list[float | None] = field(default_factory=list)
    values: dict[str, list[float | None]] = field(default_factory=lambda: {k: [] for k in _POINT_KEYS})
    stride: int = 1  # every how many appended snapshots one is kept

    def __len__(self) -> int:
        return len(self.t)

    def add(self, snap: dict[str, Any]) -> None:
        t = snap.get("t")
        if not isinstance(t, (int, float)):
            return
        self.t.append(float(t))
        self.started_at.append(snap.get("started_at"))
        for k in _POINT_KEYS:
            v = snap.get(k)
            self.values[k].append(float(v) if isinstance(v, (int, float)) else None)

    def thin(self, limit: int) -> None:
        """Drop every other point (never the last) while more than ``limit`` are held."""
        while len(self.t) > limit:
            keep = list(range(0, len(self.t) - 1, 2)) + [len(self.t) - 1]
            self.t = [self.t[i] for i in keep]
            self.started_at = [self.started_at[i] for i in keep]
            self.values = {k: [v[i] for i in keep] for k, v in self.values.items()}
            self.stride *= 2

    def run_starts(self) -> list[float]:
        """``started_at`` of every run after the first (a resume): chart lines break there."""
        out, prev = [], None
        for s in self.started_at:
            if s is not None and prev is not None and s != prev:
                out.append(float(s))
            prev = s if s is not None else prev
        return out

    def completed_points(self) -> list[tuple[float, int]]:
        """``(t, done + failed)`` of the current run (since the last resume)."""
        starts = self.run_starts()
        since = starts[-1] if starts else None
        done, failed = self.values["done"], self.values["failed"]
        return [(t, int((d or 0) + (f or 0))) for t, d, f in zip(self.t, done, failed)
                if d is not None and (since is None or t >= since)]


def _loads(line: bytes) -> dict[str, Any] | None:
    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return None
    return obj if isinstance(obj, dict) else None


class ProgressFollower:
    """The current snapshot and the history of one Specdeck run, from its progress log.

    ``poll()`` reads what was appended (cheap when nothing was); ``latest`` is the last complete
    snapshot.  ``last_completion_t`` is when done + failed last went up, for the stall alert.
    """

    def __init__(self, out: str | os.PathLike[str], *, max_points: int = MAX_POINTS,
                 clock: Callable[[], float] = time.time):
        self.paths = RunFiles.of(out)
        self.max_points = max_points
        self._clock = clock
        self._reader = LineReader(self.paths.progress)
        self._lock = threading.Lock()
        self._seen_resets = 0
        self._opened = False
        self.latest: dict[str, Any] | None = None
        self.history = History()
        self.bad_lines = 0  # lines that were not a JSON object (reported, skipped)
        self.last_bad: str | None = None
        self.last_completion_t: float | None = None
        self.polled_at: float | None = None
        self._completed: int | None = None

    def _reset(self) -> None:
        self.latest, self.history = None, History()
        self.bad_lines, self.last_bad = 0, None
        self.last_completion_t, self._completed = None, None

    def _take(self, offset: int, line: bytes) -> None:
        snap = None if isinstance(line, CutLine) else _loads(line)
        if snap is None:
            self.bad_lines += 1
            self.last_bad = (line.note(self.paths.progress, offset, self._reader.max_line) if isinstance(line, CutLine)
                             else f"{self.paths.progress} at byte {offset}: not a JSON object")
            return
        self.latest = snap
        self.history.add(snap)
        completed = int((snap.get("done") or 0) + (snap.get("failed") or 0))
        if self._completed is None or completed > self._completed:
            if self._completed is not None or completed > 0:
                t = snap.get("t")
                self.last_completion_t = float(t) if isinstance(t, (int, float)) else self._clock()
        if self._completed is None or completed != self._completed:
            self._completed = completed

    def _open_sampled(self, size: int) -> None:
        """First read of a large log: about ``max_points`` lines at evenly spaced offsets; the
        ordinary reader goes on after the last of them (at most one step of bytes)."""
        step = max(1, size // self.max_points)
        last_end = 0
        with open(self.paths.progress, "rb") as f:
            for k in range(self.max_points):
                pos = max(k * step, last_end)
                if pos > 0:
                    f.seek(pos - 1)
                    if f.read(1) != b"\n":
                        skip_line(f)  # the middle of a line: on to the next one
                else:
                    f.seek(0)
                start = f.tell()
                line, n, ended = readline_capped(f, self._reader.max_line)
                if not ended:
                    break
                last_end = start + n
                self._take(start, line[:-1] if n == len(line) else CutLine(line[:CUT_KEEP], n - 1))
        self._reader.offset = last_end

    def poll(self) -> "ProgressFollower":
        with self._lock:
            if not self._opened:
                st = self._reader._check()
                if st is not None:
                    self._opened = True
                    self._seen_resets = self._reader.resets
                    if st.st_size > SAMPLE_ABOVE_BYTES:
                        self._open_sampled(st.st_size)
            for _ in range(CATCH_UP_READS):  # a read holds MAX_READ_BYTES at most; a big append takes several
                before = self._reader.offset
                lines = self._reader.read()
                for offset, line in lines:
                    if self._reader.resets != self._seen_resets:
                        self._seen_resets = self._reader.resets
                        self._reset()
                    self._take(offset, line)
                del lines
                if len(self.history) > 2 * self.max_points:
                    self.history.thin(self.max_points)
                if self._reader.offset == before or self._reader.offset >= self._reader.size:
                    break
            if self._reader.resets != self._seen_resets:  # shrank to nothing new yet
                self._seen_resets = self._reader.resets
                self._reset()
            self.polled_at = self._clock()
            return self

    def eta(self, now: float | None = None) -> Eta:
        snap = self.latest or {}
        hist = snap.get("completion_tokens_hist") or {}
        length = (hist.get("edges") or [], hist.get("counts") or []) if hist else None
        return eta_band(snap.get("remaining"), self.history.completed_points(),
                        now=self._clock() if now is None else now, req_s=snap.get("req_s"),
                        tok_s=snap.get("tok_s"), length_hist=length)

    def stall(self, name: str, *, running: bool, after_s: float = STALL_AFTER_S,
              now: float | None = None) -> StallAlert | None:
        snap = self.latest or {}
        if snap.get("state") in ("paused", "done", "failed", "pausing", "stopping"):
            return None
        return stall_alert(name, running=running, last_completion_t=self.last_completion_t,
                           started_t=snap.get("started_at"), now=self._clock() if now is None else now,
                           after_s=after_s, message=snap.get("message"))


_lock = threading.Lock()
_followers: dict[Path, ProgressFollower] = {}


def progress_follower(out: str | os.PathLike[str]) -> ProgressFollower:
    """One shared follower per output path: the page's sessions and the sidebar's stall check
    read the same offsets, so the log is read once however many look at it."""
    key = RunFiles.of(out).out
    with _lock:
        f = _followers.get(key)
        if f is None:
            f = _followers[key] = ProgressFollower(key)
        return f
