"""Incremental ingestion of a server log into bounded time series.

:class:`LogIngester` remembers its byte offset: each :meth:`LogIngester.poll`
reads only the bytes added since the last one (an unchanged file costs one
``stat``), keeps a partial last line for the next poll, follows a rotated log
(the file moved aside to its end, then the new one, nothing read twice or
missed), and starts over when the file is truncated or replaced.  Memory is bounded: series are ring buffers of
``max_points``, the log is read in chunks, and at most ``MAX_LINE`` of one line
is kept (a longer line is cut, counted and skipped up to its newline).

Large reads (a log opened mid-run, a file given to the CLI) go through the
vectorised parser of :mod:`backend.sglang.bulkparse` (polars), two pieces at a
time; small appends, pieces it refuses and every line it does not accept go
through the per-line parser, which stays the reference: both give the same
series, counts, unparsed lines and startup state.  A vectorised piece is
prepared before any state changes; if that fails, the piece is read line by
line, so no line whose bytes were read is ever lost.

Start-up state comes from :mod:`backend.sglang.startup`; :class:`FileWatcher`
(:mod:`backend.sglang.logwatch`, re-exported here) turns watchdog file events on
the log's directory into a wake-up signal; without it (or if watchdog cannot
watch) polling on a timer gives the same result.
"""

from __future__ import annotations

import bisect
import os
import threading
from collections import deque
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import Any, Callable

from backend.sglang import bulkparse
from backend.sglang.logparse import (
    _EVENT_RE, DecodeBatch, FatalEvent, Phase, PhaseEvent, PrefillBatch, line_time, looks_like_prefixed_line,
    parse_batch_lines, parse_event, rank_label,
)
from backend.sglang.logwatch import FileWatcher  # noqa: F401 (re-exported)
from backend.sglang.startup import (  # noqa: F401 (re-exported)
    FIRST_STEP_SHARE, GENERIC_FATALS, StartupState, StartupTracker, phase_progress,
)
from backend.sglang.version import ACCEPT_RATE_DESCRIPTIONS, Capabilities
from backend.supervisor.logtail import open_source

CHUNK_BYTES = 8 * 1024 * 1024
BULK_MIN_BYTES = 256 * 1024  # smaller reads (a live tail) go through the per-line parser
PARALLEL_PIECES = 2  # pieces parsed side by side (polars releases the GIL)
HEAD_BYTES = 256  # compared on growth to notice a file rewritten in place
# The most kept of one line: a longer line is cut (counted, shown cut in the tail, not parsed) and
# the rest of it skipped up to the next newline, so a line without one cannot fill the memory.  A
# line still incomplete at the end of a read is measured in bytes, a complete one in characters.
MAX_LINE = 64 * 1024
MAX_FILES_PER_POLL = 16  # files of a rotated log read in one poll (the moved ones, then the live one)

_pool = None
_pool_lock = threading.Lock()


def _executor():
    global _pool
    with _pool_lock:
        if _pool is None:
            from concurrent.futures import ThreadPoolExecutor
            _pool = ThreadPoolExecutor(max_workers=PARALLEL_PIECES, thread_name_prefix="specdeck-ingest")
        return _pool


def _parse_piece(body: bytes, shapes: "bulkparse.Shapes"):
    """The vectorised parse of a piece, or None when the piece must go through the per-line parser."""
    try:
        return bulkparse.parse_piece(body, shapes, _EVENT_RE.pattern)
    except Exception:  # a regex the engine refuses, an unexpected polars error: the per-line path decides
        return None


DECODE_COLUMNS = ("ts", "accept_len", "accept_rate", "gen_throughput", "running_req", "queue_req",
                  "token_usage", "graph", "rank")
PREFILL_COLUMNS = ("ts", "new_seq", "new_token", "cached_token", "input_throughput", "running_req",
                   "queue_req", "token_usage", "rank")


class _Ring:
    """Parallel bounded columns; ``append`` takes one value per column."""

    def __init__(self, columns: tuple[str, ...], maxlen: int):
        self.columns = columns
        self.data = {c: deque(maxlen=maxlen) for c in columns}
        self._appenders = tuple(self.data[c].append for c in columns)

    def append(self, *values: Any) -> None:
        for a, v in zip(self._appenders, values):
            a(v)

    def __len__(self) -> int:
        return len(self.data[self.columns[0]])

    def clear(self) -> None:
        for d in self.data.values():
            d.clear()

    def as_lists(self) -> dict[str, list]:
        return {c: list(d) for c, d in self.data.items()}


@dataclass
class UnparsedLine:
    line_no: int
    reason: str
    text: str


@dataclass(frozen=True)
class _Cut:
    """An over-long line: its first MAX_LINE bytes and its whole length."""

    head: bytes
    size: int


def _first_eol(data: bytes) -> int:
    """Index of the first line end (\n or \r, the pair \r\n as its \n), -1 when there is none."""
    n, r = data.find(b"\n"), data.find(b"\r")
    if r < 0:
        return n
    if n < 0 or r < n:
        return r + 1 if data[r + 1:r + 2] == b"\n" else r
    return n


@dataclass
class IngestStats:
    bytes_read: int = 0
    lines: int = 0
    decode_lines: int = 0
    prefill_lines: int = 0
    http_lines: int = 0
    event_lines: int = 0
    unparsed_lines: int = 0  # lines rejected with a reason (bad batch lines, cut lines)
    cut_lines: int = 0  # lines longer than MAX_LINE (also counted as unparsed)
    resets: int = 0  # truncations / replacements seen


class LogIngester(StartupTracker):
    """Reads a server log incrementally into series, counts and startup state.

    Not thread-safe by itself; :class:`backend.sglang.monitor.ServerMonitor`
    calls it under its lock.
    """

    def __init__(self, path: str | Path, *, caps: Capabilities | None = None, max_points: int = 20000,
                 tail_lines: int = 200, chunk_bytes: int = CHUNK_BYTES, bulk: bool = True):
        self.path = Path(path)
        self.caps = caps
        self.max_points = max_points
        self.chunk_bytes = chunk_bytes
        # vectorised reading of large pieces (polars), same results as the per-line parser
        self.bulk = bulk and bulkparse.AVAILABLE
        self.bulk_min_bytes = BULK_MIN_BYTES
        self.parallel_pieces = PARALLEL_PIECES
        self._shapes = bulkparse.Shapes()
        self._series_pending: tuple[list, list] = ([], [])  # decode, prefill frames not yet in the rings
        self.bulk_pieces = 0  # pieces read through the vectorised path
        self.decode = _Ring(DECODE_COLUMNS, max_points)
        self.prefill = _Ring(PREFILL_COLUMNS, max_points)
        self.tail: deque[str] = deque(maxlen=tail_lines)
        self.unparsed: deque[UnparsedLine] = deque(maxlen=20)
        self.stats = IngestStats()
        self.startup = StartupState()
        self.ranks_seen: set[tuple] = set()  # rank tags as parsed, e.g. (("DP", 0), ("TP", 0))
        self.spec_seen = False  # a decode line carried accept len
        self.rate_seen = False
        self.last_decode: DecodeBatch | None = None
        self.last_prefill: PrefillBatch | None = None
        self._offset = 0
        self._pending = b""
        self._cutting: _Cut | None = None  # an over-long line being skipped up to its newline
        self._sig: tuple | None = None  # (ino, size, mtime_ns) of the file at the name at the last poll
        self._ino: int | None = None  # the file being read (the name's, or one moved aside and not yet read out)
        self._head = b""
        self._capture: FatalEvent | None = None
        self._capture_left = 0
        self._listeners: list[Callable[[Any], None]] = []

    # -- reading ----------------------------------------------------------

    @property
    def offset(self) -> int:
        return self._offset

    def _reset(self) -> None:
        for pending in self._series_pending:
            pending.clear()
        self.decode.clear()
        self.prefill.clear()
        self.tail.clear()
        self.unparsed.clear()
        resets = self.stats.resets + 1
        self.stats = IngestStats(resets=resets)
        self.startup = StartupState()
        self.ranks_seen.clear()
        self.spec_seen = self.rate_seen = False
        self.last_decode = self.last_prefill = None
        self._offset = 0
        self._pending = b""
        self._cutting = None
        self._head = b""
        self._capture = None

    def poll(self, max_bytes: int | None = None) -> int:
        """Read what was appended since the last poll; return the number of bytes read.

        A missing file reads as nothing.  A file that shrank, was replaced (new
        inode, the old file gone) or whose first bytes changed is read again from
        the start.  A rotated log is followed (:func:`backend.supervisor.logtail.open_source`):
        the file moved aside is read to its end, also while its writer still
        writes there (a ``create``-style rotation under a program that keeps
        its file open), then the file after it from its start, without
        starting the series over.
        """
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            if self._ino is None:
                return 0
            st = None
        sig = (st.st_ino, st.st_size, st.st_mtime_ns) if st is not None else None
        if sig is not None and sig == self._sig and st.st_ino == self._ino:
            return 0
        self._sig = sig
        read = 0
        limit = max_bytes if max_bytes is not None else float("inf")
        inflight: deque = deque()  # (complete lines, future of their vectorised parse or None), in file order
        try:
            for _ in range(MAX_FILES_PER_POLL):
                src = open_source(self.path, self._offset, self._ino)
                if src.missing:
                    break
                with src.file as fh:
                    if src.truncated or src.rotated:
                        while inflight:
                            self._apply(*inflight.popleft())
                        self._reset()
                    elif src.followed:
                        self._offset = 0  # the next file continues the text: pending bytes stay
                        self._head = b""
                    self._ino = src.inode
                    if self._head and src.size >= len(self._head):
                        if fh.read(len(self._head)) != self._head:
                            while inflight:
                                self._apply(*inflight.popleft())
                            self._reset()
                    fh.seek(self._offset)
                    while read < limit:
                        chunk = fh.read(self.chunk_bytes)
                        if not chunk:
                            break
                        if len(self._head) < HEAD_BYTES and self._offset < HEAD_BYTES:
                            self._head = (self._head + chunk)[:HEAD_BYTES]
                        self._offset += len(chunk)
                        read += len(chunk)
                        for body in self._complete_lines(chunk):
                            inflight.append((body, self._submit(body)))
                        # the next piece is read and parsed while this one is still being parsed
                        while len(inflight) > self.parallel_pieces:
                            self._apply(*inflight.popleft())
                # a file moved aside and read to its end: the next one may be waiting
                if read >= limit or st is None or src.inode == st.st_ino or not (src.final or src.followed):
                    break
        finally:
            while inflight:
                self._apply(*inflight.popleft())
            self._flush_series()
        if read and max_bytes is not None and read >= max_bytes:
            self._sig = None  # more to read: do not treat the file as unchanged
        self.stats.bytes_read += read
        return read

    def _complete_lines(self, chunk: bytes) -> list:
        """The complete lines of pending + chunk, as pieces of bytes (and :class:`_Cut` for an over-long
        line), in file order; keeps the partial rest (at most MAX_LINE bytes of it)."""
        out: list = []
        if self._cutting is not None:
            eol = _first_eol(chunk)
            if eol < 0:
                self._cutting = _Cut(self._cutting.head, self._cutting.size + len(chunk))
                return out
            cut = self._cutting
            out.append(_Cut(cut.head, cut.size + eol - (chunk[eol:eol + 1] == b"\n" and eol > 0
                                                        and chunk[eol - 1:eol] == b"\r")))
            self._cutting = None
            chunk = chunk[eol + 1:]
            if not chunk:
                return out
        cut = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
        if cut < 0:
            self._pending += chunk
        else:
            if cut == len(chunk) - 1:
                body = self._pending + chunk if self._pending else chunk
                self._pending = b""
            else:
                body = self._pending + memoryview(chunk)[:cut + 1]
                self._pending = chunk[cut + 1:]
            out.append(body)
        if len(self._pending) > MAX_LINE:
            self._cutting = _Cut(self._pending[:MAX_LINE], len(self._pending))
            self._pending = b""
        return out

    def _submit(self, body):
        if isinstance(body, _Cut) or not (self.bulk and not self._listeners and len(body) >= self.bulk_min_bytes):
            return None
        return _executor().submit(_parse_piece, body, self._shapes)

    def _apply(self, body, fut) -> None:
        if isinstance(body, _Cut):
            self._record_cut(body.head.decode("utf-8", "replace"), body.size, "bytes")
            return
        piece = fut.result() if fut is not None else None
        if piece is not None:
            try:
                ready = self._prepare_piece(piece)
            except Exception:  # anything the columns cannot hold: the per-line path decides, line by line
                ready = None
            if ready is not None:
                self._feed_piece(piece, ready)
                return
        self.feed_lines(body.decode("utf-8", "replace").splitlines())

    def _feed(self, chunk: bytes) -> None:
        for body in self._complete_lines(chunk):
            self._apply(body, self._submit(body))
        self._flush_series()

    def flush(self) -> None:
        """Treat a pending partial last line as complete (used at end of file by the CLI)."""
        if self._cutting is not None:
            cut, self._cutting = self._cutting, None
            self._record_cut(cut.head.decode("utf-8", "replace"), cut.size, "bytes")
        if self._pending:
            text = self._pending.decode("utf-8", "replace")
            self._pending = b""
            self.feed_lines(text.splitlines())

    def _record_cut(self, head: str, size: int, unit: str) -> None:
        """Count an over-long line: unparsed, with its start in the tail and in the unparsed list."""
        st = self.stats
        st.lines += 1
        st.unparsed_lines += 1
        st.cut_lines += 1
        self.unparsed.append(UnparsedLine(st.lines, f"line of {size:,} {unit} is longer than {MAX_LINE:,}: "
                                                    f"cut and not parsed", head[:400]))
        self.tail.append(head[:400] + f" … [cut: {size:,} {unit}]")
        self._capture = None

    # -- lines ----------------------------------------------------------------

    def feed_lines(self, lines: list[str]) -> None:
        """Ingest complete lines (also the entry point for tests and the CLI)."""
        self._flush_series()
        if lines and max(map(len, lines)) > MAX_LINE:
            run: list[str] = []
            for line in lines:
                if len(line) > MAX_LINE:
                    if run:
                        self._feed_lines(run)
                        run = []
                    self._record_cut(line[:MAX_LINE], len(line), "characters")
                else:
                    run.append(line)
            if run:
                self._feed_lines(run)
            return
        self._feed_lines(lines)

    def _feed_lines(self, lines: list[str]) -> None:
        st = self.stats
        base = st.lines
        st.lines += len(lines)
        cand = [i for i, line in enumerate(lines) if "batch" in line]
        recs, bad = parse_batch_lines([lines[i] for i in cand]) if cand else ([], [])
        for j, reason in bad:
            st.unparsed_lines += 1
            self.unparsed.append(UnparsedLine(base + cand[j] + 1, reason, lines[cand[j]][:400]))
        if recs:
            self._add_records(recs)
        # every other line: access log, startup and failure lines, in order
        if len(cand) == len(lines) and not bad and all(r is not None for r in recs):
            others: list[int] = []
        elif cand:
            done = {cand[j] for j, r in enumerate(recs) if r is not None}
            done.update(cand[j] for j, _ in bad)
            others = [i for i in range(len(lines)) if i not in done]
        else:
            others = range(len(lines))
        listeners = self._listeners
        emitted: list[tuple[int, Any]] = []
        for i in others:
            ev = self._other_line(lines[i])
            if ev is not None and listeners:
                emitted.append((i, ev))
        if listeners:
            emitted.extend((cand[j], r) for j, r in enumerate(recs) if r is not None)
            emitted.sort(key=lambda x: x[0])
            for _, rec in emitted:
                for cb in listeners:
                    cb(rec)
        if lines:
            self.tail.extend(lines[-self.tail.maxlen:])

    def _prepare_piece(self, piece: "bulkparse.Piece") -> tuple:
        """Everything of a vectorised piece that may fail, before any state changes: the lines it handed
        back read by the per-line parser, merged into its columns, and the latest records."""
        if piece.n_lines and piece.lines.str.len_chars().max() > MAX_LINE:
            return None  # an over-long line: cut by the per-line path
        dec, pre = piece.decode.frame, piece.prefill.frame
        others = piece.others
        bad: list[tuple[int, str, str]] = []
        if piece.fallback:
            fb = piece.fallback
            recs, rejected = parse_batch_lines([line for _, line in fb])
            bad = [(fb[j][0], reason, fb[j][1]) for j, reason in rejected]
            badset = {j for j, _ in rejected}
            more_dec = [(fb[j][0], r) for j, r in enumerate(recs) if r is not None and r.kind == "decode"]
            more_pre = [(fb[j][0], r) for j, r in enumerate(recs) if r is not None and r.kind == "prefill"]
            if more_dec:
                dec = bulkparse.pl.concat([dec, bulkparse.records_frame("decode", more_dec)]).sort("line")
            if more_pre:
                pre = bulkparse.pl.concat([pre, bulkparse.records_frame("prefill", more_pre)]).sort("line")
            rest = [fb[j] for j, r in enumerate(recs) if r is None and j not in badset]
            if rest:
                others = sorted(others + rest)
        last_dec = piece.record(dec.get_column("line")[-1]) if dec.height else None
        last_pre = piece.record(pre.get_column("line")[-1]) if pre.height else None
        ranks = {self._rank_tuple(lab) for cols in (dec, pre) if cols.height
                 for lab in cols.get_column("rank").unique().to_list()}
        return (bulkparse.BatchColumns("decode", dec), bulkparse.BatchColumns("prefill", pre), others, bad,
                last_dec, last_pre, ranks)

    def _feed_piece(self, piece: "bulkparse.Piece", ready: tuple) -> None:
        """Ingest a piece of complete lines that the vectorised parser read (see :meth:`_prepare_piece`)."""
        dec, pre, others, bad, last_dec, last_pre, ranks = ready
        self.bulk_pieces += 1
        st = self.stats
        base = st.lines
        st.lines += piece.n_lines
        for i, reason, line in bad:
            st.unparsed_lines += 1
            self.unparsed.append(UnparsedLine(base + i + 1, reason, line[:400]))
        self._add_columns(dec, pre, last_dec, last_pre, ranks)
        st.http_lines += piece.http_skipped
        skipped = piece.prefixed_skipped
        prev = -1
        for i, line in others:
            if self._capture is not None and skipped:
                # a plain prefixed line between the last one looked at and this one ends the capture
                k = bisect.bisect_right(skipped, prev)
                if k < len(skipped) and skipped[k] < i:
                    self._capture = None
            prev = i
            self._other_line(line)
        if self._capture is not None and skipped and skipped[-1] > prev:
            self._capture = None
        n = self.tail.maxlen
        if n:
            self.tail.extend(piece.lines.tail(n).to_list())

    def _other_line(self, line: str) -> Any:
        """One line that is not a batch record, as the per-line loop handles it; the event or None."""
        st = self.stats
        if 'HTTP/1.' in line:
            st.http_lines += 1
            if "model_info HTTP" in line and self.startup.phase is not None \
                    and self.startup.phase < Phase.WARMUP:
                ts, ts_text = line_time(line)
                self._on_phase(PhaseEvent(ts, ts_text, Phase.WARMUP, "HTTP server answering; warmup request"))
            return None
        if self._capture is not None:
            if self._capture_left > 0 and line.strip() and not looks_like_prefixed_line(line):
                self._capture_more(line)
                return None
            if looks_like_prefixed_line(line):
                self._capture = None
        ev = parse_event(line)
        if ev is None:
            return None
        st.event_lines += 1
        if ev.kind == "phase":
            self._on_phase(ev)
        else:
            self._on_fatal(ev)
        return ev

    def _add_columns(self, dec: "bulkparse.BatchColumns", pre: "bulkparse.BatchColumns", last_dec, last_pre,
                     ranks: set) -> None:
        """Series, counts and latest records from typed columns (only the last max_points rows are kept)."""
        st = self.stats
        keep = self.max_points
        st.decode_lines += len(dec)
        st.prefill_lines += len(pre)
        for cols, pending in ((dec, self._series_pending[0]), (pre, self._series_pending[1])):
            if not len(cols):
                continue
            # the rings keep only the last max_points rows: later pieces of this read may replace these
            frame = cols.frame.tail(keep)
            pending.append(frame)
            while len(pending) > 1 and sum(f.height for f in pending[1:]) >= keep:
                pending.pop(0)
            if cols.kind == "decode":
                self.last_decode = last_dec
            else:
                self.last_prefill = last_pre
        self.ranks_seen.update(ranks)
        if not self.spec_seen and dec.any_not_null("accept_len"):
            self.spec_seen = True
        if not self.rate_seen and dec.any_not_null("accept_rate"):
            self.rate_seen = True

    def _flush_series(self) -> None:
        """Move the rows of vectorised pieces waiting for the series into the rings."""
        for pending, ring, names in ((self._series_pending[0], self.decode, DECODE_COLUMNS),
                                     (self._series_pending[1], self.prefill, PREFILL_COLUMNS)):
            if not pending:
                continue
            frame = pending[0] if len(pending) == 1 else bulkparse.pl.concat(pending)
            pending.clear()
            frame = frame.tail(self.max_points)
            for c in names:
                ring.data[c].extend(frame.get_column(c).to_list())

    @staticmethod
    def _rank_tuple(label: str) -> tuple:
        return tuple((t.rstrip("0123456789"), int(t[len(t.rstrip("0123456789")):])) for t in label.split())

    def _add_records(self, recs: list) -> None:
        st = self.stats
        decs = [r for r in recs if r is not None and r.kind == "decode"]
        pres = [r for r in recs if r is not None and r.kind == "prefill"]
        st.decode_lines += len(decs)
        st.prefill_lines += len(pres)
        keep = self.max_points
        if decs:
            self.last_decode = decs[-1]
            tail = decs[-keep:]
            d = self.decode.data
            for col in DECODE_COLUMNS[:-1]:
                d[col].extend(map(attrgetter(col), tail))
            d["rank"].extend([rank_label(r.ranks) if r.ranks else "" for r in tail])
            if not self.spec_seen and any(r.accept_len is not None for r in decs):
                self.spec_seen = True
            if not self.rate_seen and any(r.accept_rate is not None for r in decs):
                self.rate_seen = True
        if pres:
            self.last_prefill = pres[-1]
            tail = pres[-keep:]
            d = self.prefill.data
            for col in PREFILL_COLUMNS[:-1]:
                d[col].extend(map(attrgetter(col), tail))
            d["rank"].extend([rank_label(r.ranks) if r.ranks else "" for r in tail])
        self.ranks_seen.update({r.ranks for r in decs} | {r.ranks for r in pres})

    # -- views -------------------------------------------------------------------

    def add_listener(self, cb: Callable[[Any], None]) -> None:
        """Call ``cb(record)`` for every batch record and event (for the CLI)."""
        self._listeners.append(cb)

    @property
    def accept_rate_meaning(self) -> str:
        meaning = self.caps.accept_rate_meaning if self.caps else "none"
        if meaning == "none" and self.rate_seen:
            meaning = "with_bonus"  # builds between 0.5.3 and 0.5.4 printed it with the bonus token
        return meaning

    @property
    def accept_rate_description(self) -> str:
        return ACCEPT_RATE_DESCRIPTIONS[self.accept_rate_meaning]
