"""The Training page's data, without Streamlit: one shared follower per training log, the accept length
predicted from its records, and the benchmarks measured on a run's checkpoints (the curves built from
the records are in :mod:`ui.train.series`).

A :class:`LogFollower` wraps :class:`backend.train.reader.TrainLogReader` (incremental by byte offset)
and keeps every record read so far, with a time for each: the line's own timestamp where it has one,
else the run's start (the supervisor's ``===== specdeck: … starting at`` line, or for a log started
elsewhere the file's modification time less the elapsed time read) plus the elapsed time tqdm printed
(bars closed before the current one summed, evaluation bars included), or for Gen-3's ``step N: {…}``
lines the optimizer step times logged.  The page's sessions share one follower per log, so a log is read
once however many look at it.

A long log is read in the background: the first poll reads :data:`POLL_BYTES` at a time for up to
:data:`POLL_S` (most logs whole: the page is drawn once) and a thread reads the rest in slices; a poll while
it reads returns at once the first poll's snapshot with how far the reading has got (same version: nothing is
built or drawn again while it reads, which would take the CPU from the reading), and the first poll after it
ends builds the whole snapshot, a new version.  What is built from a snapshot (curves, predictions, figures)
is kept per version (:meth:`LogFollower.memo`), so a refresh with nothing appended builds nothing.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from backend.train.accept import Prediction, metric_for, predictions
from backend.train.gcpin import pin
from backend.train.logparse import TrainRecord
from backend.train.reader import Progress, ReadStats, TrainLogReader, UnparsedLine
from backend.train.trackers import TensorboardReader, find_tracker_files


POLL_BYTES = 1024 * 1024  # read at a time by a poll
POLL_S = 1.0  # a poll reads more slices of POLL_BYTES while it has taken less than this; the rest in the background
SLICE_BYTES = 1024 * 1024  # what the background reading reads at a time (between two takes of the lock)
TRACKER_LOOK_S = 10.0  # how often an output folder without TensorBoard files is looked at again
MEMO_ENTRIES = 32  # results kept per follower (each for its snapshot's version)


@dataclass(frozen=True)
class RunRef:
    """A training run the page can show: its log and the folder its checkpoints go to."""

    name: str
    log: Path | None
    output_dir: Path | None
    run_id: str | None = None  # Gen-3: checkpoints are {run_id}-step{N}
    draft_config: str | None = None  # for the export command of Gen-3 runtime checkpoints
    process: str | None = None  # the supervisor's process name, when it runs under the dashboard
    target: str | None = None  # the target model path
    source: str = "workspace"  # workspace | followed


@dataclass(frozen=True)
class Snapshot:
    """What a follower has read, as of ``read_at``."""

    path: Path
    records: tuple[TrainRecord, ...]
    times: tuple[float | None, ...]  # one per record: epoch seconds, or None when nothing tells
    progress: Progress
    stats: ReadStats
    unparsed: tuple[UnparsedLine, ...]
    generation: int | None
    read_at: float
    written_at: float | None  # the log's modification time; None when the file is missing
    exists: bool
    tracker_records: tuple[TrainRecord, ...] = ()
    tracker_note: str | None = None
    size: int = 0  # the log's size in bytes
    offset: int = 0  # how far it has been read
    version: int = 0  # changes whenever what was read changes (records, a reset, tracker records)

    @property
    def catching_up(self) -> bool:
        return self.offset < self.size


class LogFollower:
    """Follows one training log (thread-safe; the page's sessions share it)."""

    def __init__(self, path: str | os.PathLike[str], output_dir: str | os.PathLike[str] | None = None):
        self.path = Path(path)
        self.output_dir = Path(output_dir) if output_dir else None
        self._lock = threading.Lock()
        self._reader = TrainLogReader(self.path)
        self._records: list[TrainRecord] = []
        self._rel: list[float | None] = []  # seconds since the start of the record's run, estimated
        self._own: list[float | None] = []  # the record's own timestamp
        self._seg: list[int] = []  # index of the run (segment) the record belongs to
        self._anchor: list[float | None] = [None]  # per segment: the run's start time when the log says it
        self._first_read: tuple[float, float] | None = None  # (mtime, rel) when the log was first read
        self._times_cache: tuple[tuple, tuple[float | None, ...]] | None = None
        self._reset_time_state()
        self._tb: TensorboardReader | None = None
        self._tb_records: list[TrainRecord] = []
        self._tb_next_look = 0.0
        self.version = 0
        self._snap: Snapshot | None = None
        self._snap_key: tuple | None = None
        self._memo: dict[object, tuple[int, object]] = {}
        self._memo_lock = threading.Lock()
        self._catching_up: threading.Thread | None = None

    def _reset_time_state(self) -> None:
        self._closed_s = 0.0  # elapsed time of the bars already closed in this run
        self._bar_key: tuple | None = None
        self._bar_elapsed = 0.0
        self._last_rel: float | None = None
        self._last_step3: int | None = None  # Gen-3: step of the previous dict line

    def poll(self, max_bytes: int | None = None) -> Snapshot:
        """Read what was appended, at most ``max_bytes`` of it; without ``max_bytes`` :data:`POLL_BYTES` at a
        time for up to :data:`POLL_S`, the rest read by a background thread (a poll while it reads answers at
        once)."""
        if max_bytes is None:
            t = self._catching_up
            if t is not None and t.is_alive():
                return self._reading()
        with self._lock:
            self._read(max_bytes or POLL_BYTES)
            if max_bytes is None:
                until = time.monotonic() + POLL_S
                while self._size > self._reader.offset and time.monotonic() < until:
                    before = self._reader.offset
                    self._read(POLL_BYTES)
                    if self._reader.offset == before:
                        break
            snap = self._snapshot()
        if max_bytes is None and snap.catching_up:
            self._start_catching_up()
        return snap

    def _reading(self) -> Snapshot:
        """While the background thread reads: the last snapshot with how far the reading has got, at once and
        without building anything (its version stays, so nothing is drawn again until the reading ends and
        the next poll builds the whole snapshot once)."""
        snap = self._snap
        if snap is None:
            with self._lock:
                return self._snapshot()
        return replace(snap, offset=self._reader.offset, size=max(getattr(self, "_size", 0), snap.size),
                       read_at=time.time())

    def _start_catching_up(self) -> None:
        with self._memo_lock:
            t = self._catching_up
            if t is not None and t.is_alive():
                return
            t = self._catching_up = threading.Thread(target=self._catch_up, name=f"train-log {self.path.name}",
                                                     daemon=True)
            t.start()

    def _catch_up(self) -> None:
        """Read the rest of a long log a slice at a time (the page shows each slice as it comes)."""
        while True:
            with self._lock:
                before = self._reader.offset
                self._read(SLICE_BYTES)
                behind = self._size > self._reader.offset
                moved = self._reader.offset != before
            if not behind or not moved:
                return

    def _read(self, max_bytes: int) -> None:
        try:
            st = self.path.stat()
            self._mtime: float | None = st.st_mtime
            self._size = st.st_size
        except OSError:
            self._mtime, self._size = None, 0
        mtime = self._mtime
        if mtime is not None:
            chunk = self._reader.poll(max_bytes)
            if chunk.reset:
                self._records.clear()
                self._rel.clear()
                self._own.clear()
                self._seg.clear()
                self._anchor = [None]
                self._first_read = None
                self._reset_time_state()
                self.version += 1
            if chunk.records:
                self.version += 1
            for r in chunk.records:
                self._add(r)
            if self._first_read is None and self._records:
                self._first_read = (mtime, self._last_rel or 0.0)
            if chunk.records:
                pin()  # what was read stays: out of the full collections (backend.train.gcpin)
        if self._poll_tracker():
            self.version += 1
            pin()

    def _snapshot(self) -> Snapshot:
        """The snapshot of what is read now: the same object while nothing changed but the clock."""
        key = (self.version, getattr(self, "_mtime", None), getattr(self, "_size", 0), self._reader.offset,
               self._reader.stats.lines)
        if self._snap is not None and self._snap_key == key:
            return replace(self._snap, read_at=time.time())
        mtime = getattr(self, "_mtime", None)
        self._snap = Snapshot(
            path=self.path, records=tuple(self._records), times=self._times(),
            progress=self._reader.progress(), stats=replace(self._reader.stats),
            unparsed=tuple(self._reader.unparsed), generation=self._reader.generation, read_at=time.time(),
            written_at=mtime, exists=mtime is not None, tracker_records=tuple(self._tb_records),
            tracker_note=self._tracker_note(), size=getattr(self, "_size", 0), offset=self._reader.offset,
            version=self.version)
        self._snap_key = key
        return self._snap

    def memo(self, snap: Snapshot, key: object, make):
        """``make()``, computed once per version of what was read (``snap``'s) and ``key``: a refresh with
        nothing appended builds nothing again."""
        with self._memo_lock:
            hit = self._memo.get(key)
            if hit is not None and hit[0] == snap.version:
                return hit[1]
        value = make()
        pin()  # kept until the next version: out of the full collections
        with self._memo_lock:
            if key not in self._memo and len(self._memo) >= MEMO_ENTRIES:
                self._memo.pop(next(iter(self._memo)))
            self._memo[key] = (snap.version, value)
        return value

    def _add(self, r: TrainRecord) -> None:
        if r.kind == "run_start":
            self._anchor.append(r.wall_time)
            self._reset_time_state()
        rel = self._last_rel
        if r.source == "bar" and r.elapsed_s is not None:
            key = (r.info.get("desc"), r.epoch)
            if key != self._bar_key:
                if self._bar_key is not None:
                    self._closed_s += self._bar_elapsed
                self._bar_key = key
            self._bar_elapsed = r.elapsed_s
            rel = self._closed_s + r.elapsed_s
        elif r.source == "step_dict" and r.step is not None:
            dt = r.metrics.get("step_time_s")
            if dt is not None:
                steps = r.step - self._last_step3 if self._last_step3 is not None else r.step
                rel = (self._last_rel or 0.0) + max(0, steps) * dt
            self._last_step3 = r.step
        self._last_rel = rel
        self._records.append(r)
        self._rel.append(rel)
        self._own.append(r.wall_time)
        self._seg.append(len(self._anchor) - 1)

    def _times(self) -> tuple[float | None, ...]:
        key = (len(self._records), self._first_read)
        if self._times_cache is not None and self._times_cache[0] == key:
            return self._times_cache[1]
        anchors = list(self._anchor)
        if anchors[0] is None and self._first_read is not None:
            mtime, rel = self._first_read
            anchors[0] = mtime - rel
        spread = self._spread()
        # a run's bars before its first timestamped line are placed from that line too (tqdm's clock starts
        # with the bar, after the start-up the run's start line counts)
        first: dict[int, float] = {}
        done: set[int] = set()
        bar_open = False  # the newest bar is still counting (the line was printed in the middle of it)
        for r, own, rel, seg in zip(self._records, self._own, spread, self._seg):
            if r.source == "bar":
                n, total = r.info.get("n"), r.info.get("total")
                bar_open = total is None or (n is not None and n < total)
            elif own is not None and rel is not None and seg not in done:
                done.add(seg)
                if bar_open:  # after a finished bar the gap may be evaluation or saving: left as it is
                    first[seg] = own - rel
        out: list[float | None] = []
        cur_seg, anchor = -1, None
        for own, rel, seg in zip(self._own, spread, self._seg):
            if seg != cur_seg:
                cur_seg, anchor = seg, first.get(seg, anchors[seg])
            if own is not None:
                out.append(own)
                if rel is not None:  # a line with its own clock: later bars are placed from it (tqdm's
                    anchor = own - rel  # elapsed time leaves out evaluation and saving between bars)
            elif rel is not None and anchor is not None:
                out.append(anchor + rel)
            else:
                out.append(anchor)
        times = tuple(out)
        self._times_cache = (key, times)
        return times

    def _spread(self) -> list[float | None]:
        """tqdm prints whole seconds, so several steps of a fast run share one: their redraws are spread evenly
        over that second (up to the next one shown), and the lines printed after a redraw take its time."""
        rel = self._rel
        adj: list[float | None] = list(rel)
        bars = [k for k, r in enumerate(self._records) if r.source == "bar" and rel[k] is not None]
        j = 0
        while j < len(bars):
            k = j
            first = bars[j]
            while k + 1 < len(bars) and rel[bars[k + 1]] == rel[first] and self._seg[bars[k + 1]] == self._seg[first]:
                k += 1
            nxt = bars[k + 1] if k + 1 < len(bars) and self._seg[bars[k + 1]] == self._seg[first] else None
            width = 1.0 if nxt is None else max(0.0, min(1.0, rel[nxt] - rel[first]))
            count = k - j + 1
            for p in range(count):
                adj[bars[j + p]] = rel[first] + width * p / count
            j = k + 1
        last: tuple[float | None, float | None] = (None, None)
        for i, r in enumerate(self._records):
            if r.source == "bar" and rel[i] is not None:
                last = (rel[i], adj[i])
            elif rel[i] is not None and rel[i] == last[0]:
                adj[i] = last[1]
        return adj

    def _poll_tracker(self) -> bool:
        """Read what the run's TensorBoard files gained; whether they gave records."""
        if self.output_dir is None:
            return False
        if self._tb is None:
            now = time.monotonic()
            if now < self._tb_next_look:
                return False
            self._tb_next_look = now + TRACKER_LOOK_S  # a folder without tracker files is not walked each refresh
            found = [t for t in find_tracker_files(self.output_dir) if t.kind == "tensorboard"]
            if not found:
                return False
            self._tb = TensorboardReader(found[0].path)
        new = self._tb.poll()
        self._tb_records.extend(new)
        return bool(new)

    def _tracker_note(self) -> str | None:
        if self._tb is None:
            return None
        s = self._tb.stats
        note = f"TensorBoard files under `{self._tb.log_dir}`: {s.records:,} records"
        if s.broken_files:
            note += f", {s.broken_files} file(s) damaged (read up to the damage)"
        return note


_followers: dict[tuple[Path, Path | None], LogFollower] = {}
_lock = threading.Lock()


def follower(path: str | os.PathLike[str], output_dir: str | os.PathLike[str] | None = None) -> LogFollower:
    """The shared follower of ``path`` (its tracker files looked for under ``output_dir``)."""
    key = (Path(path).expanduser().resolve(), Path(output_dir).expanduser().resolve() if output_dir else None)
    with _lock:
        f = _followers.get(key)
        if f is None:
            f = _followers[key] = LogFollower(key[0], key[1])
        return f


# -- predicted and measured accept length ----------------------------------------------------------

@dataclass(frozen=True)
class AcceptView:
    metric: str  # the per-position metric used as a_i
    why: str
    history: tuple[Prediction, ...]

    @property
    def latest(self) -> Prediction | None:
        return self.history[-1] if self.history else None

    @property
    def previous(self) -> Prediction | None:
        return self.history[-2] if len(self.history) > 1 else None


def predicted(records: Sequence[TrainRecord], generation: int | None, *, temperature: float = 0.0,
              num_steps: int | None = None) -> AcceptView:
    """The predicted accept length at each logged step (training split), from ``acc_i`` for greedy
    serving or ``acceptance_rate_i`` for sampling (see :func:`backend.train.accept.metric_for`)."""
    seen = {name for r in records if r.kind == "metrics" for name in r.metrics}
    metric, why = metric_for(generation, temperature, seen=seen)
    return AcceptView(metric, why, tuple(predictions(records, metric, split="train", num_steps=num_steps)))


@dataclass(frozen=True)
class Measured:
    checkpoint: str
    step: float | None
    accept_len: float
    result_id: int | None
    server: str | None
    concurrency: int | None
    started_at: float | None


def norm_path(p: str | os.PathLike[str]) -> str:
    """A path as one string per file: ``~`` expanded, resolved (links followed); as given where that fails."""
    try:
        return str(Path(p).expanduser().resolve())
    except (OSError, RuntimeError):
        return str(p)


def measured(results: Iterable, checkpoints: Iterable) -> list[Measured]:
    """Benchmarks whose draft is one of ``checkpoints`` (a result's ``config.draft_model`` names the
    checkpoint folder, compared as resolved paths), oldest first; results without an accept length are
    left out (N/A is not a measurement)."""
    by_path = {norm_path(c.path): c for c in checkpoints}
    out = []
    for r in results:
        draft = r.config.draft_model
        if not draft or r.accept_len is None:
            continue
        c = by_path.get(norm_path(draft))
        if c is None:
            continue
        x = c.step if c.step is not None else c.epoch
        out.append(Measured(c.name, float(x) if x is not None else None, float(r.accept_len), r.id, r.server,
                            r.load.concurrency, r.started_at or r.created_at))
    return out
