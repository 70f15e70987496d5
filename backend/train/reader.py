"""Follow a training log by byte offset: each :meth:`TrainLogReader.poll` parses only what was appended.

Reading goes through :func:`backend.supervisor.logtail.read_tail` (offset and inode remembered, truncation
and replacement detected, UTF-8 never split).  Lines end at ``\\n`` or at a carriage return, so every
redraw of a tqdm bar is a segment of its own; an unfinished last segment waits for the next poll (or
:meth:`TrainLogReader.flush` at the end of a file).  A segment longer than :data:`MAX_LINE` is counted
and skipped up to its end.

The reader adds what one line cannot know: the generation (from the first line that only SpecForge's
generation prints; a progress bar never tells, see :func:`trainer_label`), the global
step of a bar (``epoch × steps per epoch + position in the bar``, marked ``info["step_derived"]``),
whether Gen-2's ``Eval - Step`` lines follow an evaluation bar (split ``eval``) or not (``train``), and
the run's progress (:meth:`TrainLogReader.progress`).  The supervisor's ``===== specdeck: … starting at``
line begins a new run in the same log: a ``run_start`` record, and the progress and derived state start
over (charts break their lines there).  A file that is truncated or replaced starts a new
read: counts and state are cleared and :attr:`TrainChunk.reset` tells the caller.
"""

from __future__ import annotations

import os
import re
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path

from backend.supervisor.logtail import read_tail
from backend.train.logparse import BadTrainLine, TrainRecord, parse_line

MAX_LINE = 64 * 1024
READ_BYTES = 4 * 1024 * 1024  # per read_tail call
POLL_LIMIT = 64 * 1024 * 1024  # at most this much per poll; the rest on the next one
MAX_REASONS = 100  # distinct reasons counted; the rest are counted together
_EOL = re.compile(r"\r\n|\r|\n")


@dataclass
class UnparsedLine:
    line_no: int
    reason: str
    text: str


@dataclass
class ReadStats:
    bytes_read: int = 0
    lines: int = 0  # non-empty lines and bar segments
    records: int = 0
    parsed: int = 0  # lines that gave at least one record
    ignored: int = 0  # lines that are no training line (library warnings, args, tracebacks)
    unparsed: int = 0  # lines with a known shape that could not be read (or too long)
    values_rejected: int = 0  # bad values dropped from otherwise good lines
    resets: int = 0
    reasons: Counter = field(default_factory=Counter)


@dataclass
class TrainChunk:
    records: list[TrainRecord]
    reset: bool = False  # the file was truncated or replaced: earlier records belong to another run


@dataclass(frozen=True)
class Progress:
    step: int | None
    total_steps: int | None
    epoch: int | None
    num_epochs: int | None
    s_per_step: float | None
    eta_s: float | None  # to the end of the run, from the bar's rate; None when unknown
    generation: int | None
    ended: str | None = None  # how the run ended (the supervisor's end line), None while it runs


def trainer_label(generation: int | None) -> str:
    """What wrote a log, as far as its lines tell: ``SpecForge Gen-N`` only from a line that SpecForge's
    generation N alone prints (a progress bar is not one), else ``unknown trainer``."""
    return f"SpecForge Gen-{generation}" if generation else "unknown trainer"


class TrainLogReader:
    """Incremental reader of one training log (not thread-safe: one owner)."""

    def __init__(self, path: str | os.PathLike[str], *, keep_unparsed: int = 50):
        self.path = Path(path)
        self.unparsed: deque[UnparsedLine] = deque(maxlen=keep_unparsed)
        self.stats = ReadStats()
        self._clear()

    def _clear(self) -> None:
        self._offset = 0
        self._inode: int | None = None
        self._pending = ""
        self._cutting = False
        self._line_no = 1
        self._new_run()
        self.run_id: str | None = None
        self.unparsed.clear()

    def _new_run(self) -> None:
        """Forget what belonged to the previous run appended to the same log."""
        self._in_eval = False
        self.generation: int | None = None
        self.total_steps: int | None = None
        self.num_epochs: int | None = None
        self.max_steps: int | None = None  # --max-num-steps: the run stops there, whatever total_steps says
        self.ended: str | None = None
        self.steps_per_epoch: int | None = None
        self.last_bar: TrainRecord | None = None
        self.last_step: int | None = None
        self.last_epoch: int | None = None
        self.start: TrainRecord | None = None  # the latest start or resume line
        self._postfix: dict[str, float] = {}  # metrics of the last training bar redraw
        self._early = ""  # an unfinished tqdm redraw already parsed (see _early_bar)

    @property
    def offset(self) -> int:
        return self._offset

    def poll(self, max_bytes: int = POLL_LIMIT) -> TrainChunk:
        """Parse what was appended since the last poll, about ``max_bytes`` at most (the rest is read by the
        next polls, so a caller with a time budget can catch up on a long log in steps)."""
        out: list[TrainRecord] = []
        reset = False
        read = 0
        while read < max_bytes:
            size = max(1, min(READ_BYTES, max_bytes - read))
            chunk = read_tail(self.path, self._offset, size, inode=self._inode, skip_ahead=False, partial=True)
            if chunk.reset:  # read_tail has already read this chunk from byte 0
                resets = self.stats.resets + 1
                self._clear()
                self.stats = ReadStats(resets=resets)
                out.clear()
                reset = True
            self._inode = chunk.inode
            # from the start of the file read now after a rotation (followed) or a reset; else the growth
            n = chunk.offset if (chunk.followed or chunk.reset) else chunk.offset - self._offset
            self._offset = chunk.offset
            if not chunk.text:
                break
            read += n
            self.stats.bytes_read += n
            self._feed(chunk.text, out)
        self._early_bar(out)
        return TrainChunk(out, reset)

    def flush(self) -> list[TrainRecord]:
        """Treat an unfinished last segment as complete (the end of a file that is not growing)."""
        out: list[TrainRecord] = []
        if self._pending and not self._cutting:
            text, self._pending = self._pending, ""
            if self._early and text.startswith(self._early):
                text = text[len(self._early):]
            self._segment(text, out)
        self._pending, self._cutting, self._early = "", False, ""
        return out

    def read_all(self) -> list[TrainRecord]:
        """Every record of the file as it is now (polls until nothing is new, then flushes)."""
        out: list[TrainRecord] = []
        while True:
            before = self.stats.bytes_read
            chunk = self.poll()
            if chunk.reset:
                out = []
            out.extend(chunk.records)
            if self.stats.bytes_read == before and not chunk.reset:
                break
        out.extend(self.flush())
        return out

    # -- segments ---------------------------------------------------------------------------------

    def _feed(self, text: str, out: list[TrainRecord]) -> None:
        buf = self._pending + text if self._pending else text
        pos = 0
        for m in _EOL.finditer(buf):
            seg = buf[pos:m.start()]
            pos = m.end()
            if self._cutting:
                self._cutting = False
            elif self._early and seg.startswith(self._early):
                # parsed early, while it was the unfinished last redraw; a log line may have been glued on
                rest = seg[len(self._early):]
                if rest.strip():
                    self._segment(rest, out)
            else:
                self._segment(seg, out)
            self._early = ""
            if m.group(0) != "\r":
                self._line_no += 1
        rest = buf[pos:]
        if self._cutting:
            rest = ""
        elif len(rest) > MAX_LINE:
            self._reject(rest[:400], f"line longer than {MAX_LINE:,} characters: cut and not parsed")
            self.stats.lines += 1
            rest = ""
            self._cutting = True
        self._pending = rest

    def _early_bar(self, out: list[TrainRecord]) -> None:
        """tqdm writes ``\\r`` before each redraw, so the newest bar is the unfinished last segment until
        the next redraw: parse it now when it is a whole bar (ends with ``]``), once."""
        rest = self._pending
        if not rest or rest == self._early or self._cutting or not rest.rstrip().endswith("]") or "|" not in rest:
            return
        try:
            recs = parse_line(rest)
        except Exception:
            return  # judged when the line is complete
        if len(recs) == 1 and recs[0].source == "bar":
            self._segment(rest, out)
            self._early = rest

    def _reject(self, text: str, reason: str) -> None:
        st = self.stats
        st.unparsed += 1
        key = reason if len(reason) <= 80 else reason.split(":")[0]
        if key in st.reasons or len(st.reasons) < MAX_REASONS:
            st.reasons[key] += 1
        else:
            st.reasons["other reasons"] += 1
        self.unparsed.append(UnparsedLine(self._line_no, reason, text[:400]))

    def _segment(self, seg: str, out: list[TrainRecord]) -> None:
        if not seg.strip():
            return
        st = self.stats
        st.lines += 1
        if len(seg) > MAX_LINE:
            self._reject(seg[:400], f"line longer than {MAX_LINE:,} characters: cut and not parsed")
            return
        try:
            recs = parse_line(seg)
        except BadTrainLine as exc:
            self._reject(seg, str(exc))
            return
        except Exception as exc:  # a parser bug must not stop the reading; it is counted and shown
            self._reject(seg, f"parser error: {type(exc).__name__}: {exc}")
            return
        if not recs:
            st.ignored += 1
            return
        st.parsed += 1
        for r in recs:
            r.line_no = self._line_no
            if r.rejected:
                st.values_rejected += len(r.rejected)
                for why in r.rejected:
                    self.unparsed.append(UnparsedLine(self._line_no, f"value dropped: {why}", seg[:400]))
            self._annotate(r)
            st.records += 1
            out.append(r)

    def _annotate(self, r: TrainRecord) -> None:
        if r.kind == "run_start":
            self._new_run()
            self.run_id = r.info["run_id"]
            return
        if r.generation is not None and self.generation is None:
            self.generation = r.generation
        elif r.generation is None and r.source == "bar" and self.generation is not None:
            r.generation = self.generation
        if r.kind == "total_steps":
            self.total_steps = r.info["total_steps"]
            self.num_epochs = r.info["num_epochs"]
            self.steps_per_epoch = r.info["steps_per_epoch"]
        elif r.kind == "arg":
            if r.info["key"] == "num_epochs" and r.info["value"].isdigit() and self.num_epochs is None:
                self.num_epochs = int(r.info["value"])
            elif r.info["key"] == "max_num_steps" and r.info["value"].isdigit() and int(r.info["value"]) > 0:
                self.max_steps = int(r.info["value"])
        elif r.kind == "run_end":
            self.ended = str(r.info.get("how") or "ended")
        elif r.kind in ("start", "resume"):
            self.start = r
        if r.source == "bar":
            self._in_eval = r.split == "eval"
            if r.split == "train":
                self._train_bar(r)
        elif r.source == "step_line":
            r.split = "eval" if self._in_eval else "train"
        elif r.source == "step_dict" and r.split == "train":
            self._in_eval = False
        elif r.source == "epoch_line" and r.info.get("num_epochs") and self.num_epochs is None:
            self.num_epochs = r.info["num_epochs"]
        if r.step is not None and r.split != "eval":
            self.last_step = r.step if self.last_step is None else max(self.last_step, r.step)
        if r.epoch is not None:
            self.last_epoch = r.epoch

    def _train_bar(self, r: TrainRecord) -> None:
        """Step of a training bar redraw, and its postfix kept once per step.

        The loop body calls ``set_postfix`` (which always redraws) while the bar still shows the iterations
        completed before it, ``n``: that redraw's metrics belong to iteration ``n + 1``.  The next
        iteration's redraw shows ``n + 1`` with the same postfix: the same step again, so it is kept as
        progress only, as is a refresh that changes nothing (the bar's close).  A redraw with a new postfix
        and a higher count (the postfix redraw was not seen) is taken at its count.  Two steps whose whole
        postfix is the same to the printed digits show as one point."""
        prev = self.last_bar if self.last_bar is not None and self.last_bar.epoch == r.epoch \
            and self.last_bar.info.get("desc") == r.info.get("desc") else None
        self.last_bar = r
        n, total = r.info["n"], r.info["total"]
        shown = dict(r.metrics)
        offset = 0
        if r.metrics:
            same = prev is not None and shown == self._postfix
            if same and n in (prev.info["n"], prev.info["n"] + 1):
                # the increment redraw after a postfix redraw, or a plain refresh (the bar's close)
                r.kind = "progress"
                r.info["repeats_previous_postfix"] = True
                r.metrics = {}
            elif (prev is not None and n == prev.info["n"] or prev is None and n == 0) and (total is None or n < total):
                offset = 1
        self._postfix = shown
        if r.epoch is None:  # Gen-3's bar counts optimizer steps of the whole run
            r.step = n + offset
            if total:
                self.total_steps = total
        else:
            spe = self.steps_per_epoch or total
            if spe:
                r.step = r.epoch * spe + n + offset
                r.info["step_derived"] = True

    def progress(self) -> Progress:
        """Where the run is: step of total, seconds per step and the time left, from what was read."""
        bar = self.last_bar
        s_per = bar.info.get("s_per_it") if bar else None
        total = self.total_steps
        if total is None and bar is not None and bar.epoch is not None and bar.info.get("total") and self.num_epochs:
            total = bar.info["total"] * self.num_epochs
        if total is not None and self.max_steps is not None:
            total = min(total, self.max_steps)
        step = self.last_step
        eta = None
        if s_per is not None and total is not None and step is not None and self.ended is None:
            eta = max(0, total - step) * s_per
        return Progress(step, total, self.last_epoch, self.num_epochs, s_per, eta, self.generation, self.ended)


