"""Startup state of a server read from its log: phase, progress inside the phase, failures.

:class:`StartupTracker` is the part of :class:`backend.sglang.ingest.LogIngester`
that turns startup-phase and failure events into :class:`StartupState`; a new
launch in the same log (``server_args=`` or the supervisor's start marker)
starts it over.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field

from backend.sglang.logparse import FatalEvent, Phase, PhaseEvent, parse_event

GENERIC_FATALS = ("scheduler_exception", "init_failed", "child_failed")


# Overall startup progress: where each phase starts and ends on a 0..1 scale.
_PHASE_SPAN = {
    Phase.LAUNCHED: (0.0, 0.02), Phase.INIT: (0.02, 0.08), Phase.WEIGHTS: (0.08, 0.55),
    Phase.KV_CACHE: (0.55, 0.62), Phase.CUDA_GRAPH: (0.62, 0.9), Phase.WARMUP: (0.9, 0.98),
    Phase.READY: (1.0, 1.0),
}


# Inside a phase, progress comes from steps: a progress counter (shards loaded, token counts or
# batch sizes captured) or a begin..end pair of lines.  A phase may hold several steps (the
# target's weights then the draft's; compiling, then capturing by token count, then by batch
# size, for the target and the draft), and how many is not known in advance.  So each step takes
# a share of what is left of the phase: the first FIRST_STEP_SHARE of it, each later one half of
# the rest.  The percent of a phase therefore only grows and moves with every counter update.
# The target's weights are nearly all of the weights phase (a draft's load takes a second), so
# they fill it; graph capture has several long steps, so the first takes half.
FIRST_STEP_SHARE = {Phase.WEIGHTS: 1.0, Phase.CUDA_GRAPH: 0.5}
LATER_STEP_SHARE = 0.5


# Graph capture's begin and end lines name what they capture: "Capture cuda graph begin" (the
# target), "Capture draft cuda graph end", "Capture draft extend cuda graph begin (step 2)", and
# from 0.5.23 "Capture target decode CUDA graph begin", "Capture draft decode CUDA graph end".
# With tensor parallelism every rank prints its own pair, in any interleaving, while only rank 0
# prints the batch counter.  So a capture is one step however many ranks report it: its first
# begin starts it, its first end finishes it, and the same lines from other ranks change nothing.
# The draft's graphs come after all of the target's, so once a draft capture has ended, a target
# line (a slower rank's) changes nothing either.  The draft's decode graph (or, after it, its
# extend graph) is the last capture SGLang makes before the memory summary: its end completes
# the phase.
_CAPTURE_RE = re.compile(
    r"[Cc]apture (?P<what>.*?)\s*(?:cuda|CUDA|npu|NPU|cpu|CPU|musa|MUSA) graph\b(?P<rest>.*)")
_STEP_IN_LINE = re.compile(r"\(step (\d+)\)")
_ADAPTIVE_STATE = re.compile(r"for adaptive state (steps=\d+, draft_tokens=\d+)")


def capture_kind(detail: str) -> str | None:
    """What a graph-capture begin/end line captures: "target", "target verify", "draft",
    "draft decode", "draft extend (step 2)", ...; None for other lines."""
    m = _CAPTURE_RE.search(detail)
    if m is None:
        return None
    what = " ".join(m.group("what").lower().split()) or "target"
    if what in ("draft decode", "draft"):
        what = "draft"
    rest = m.group("rest")
    for extra in (_STEP_IN_LINE.search(rest), _ADAPTIVE_STATE.search(rest)):
        if extra is not None:
            what += f" ({extra.group(1)})"
    return what


def capture_order(kind: str) -> int:
    """Where a capture comes in SGLang's start-up: the target's graphs, then the draft's prefill,
    decode and extend graphs."""
    if not kind.startswith("draft"):
        return 0
    if kind.startswith("draft prefill"):
        return 1
    if kind.startswith("draft extend"):
        return 3
    return 2


def phase_progress(phase: Phase, percent: float | None) -> float:
    lo, hi = _PHASE_SPAN[phase]
    if percent is None:
        return lo
    return lo + (hi - lo) * max(0.0, min(100.0, percent)) / 100.0



@dataclass
class StartupState:
    phase: Phase | None = None  # None until the log shows any startup line
    percent: float | None = None  # progress inside the phase; never goes down within a phase
    progress: float = 0.0
    detail: str = ""
    step: str = ""  # the progress counter or step now running ("capturing num tokens")
    step_percent: float | None = None  # that step's own progress
    steps: int = 0  # steps begun in this phase
    step_lo: float = 0.0  # the share of the phase the current step covers
    step_hi: float = 0.0
    step_open: bool = False  # False after a begin line: the next counter is a new step
    counter_percent: float | None = None  # the running counter's own last reading
    step_kind: str | None = None  # the graph capture the current step belongs to ("draft")
    captures_begun: set = field(default_factory=set)  # graph captures begun in this phase
    captures_ended: set = field(default_factory=set)  # and ended, by kind (capture_kind)
    launched_ts: float | None = None
    ready_ts: float | None = None  # log time of "fired up"
    run_index: int = 0  # launches seen in this log (server_args= lines)
    fatal: FatalEvent | None = None  # first fatal of the current run
    events: deque = field(default_factory=lambda: deque(maxlen=200))
    problems: deque = field(default_factory=lambda: deque(maxlen=50))  # warnings such as batch OOM



def _reset_steps(su: StartupState) -> None:
    su.step, su.step_percent, su.steps, su.step_open = "", None, 0, False
    su.counter_percent, su.step_kind = None, None
    su.captures_begun, su.captures_ended = set(), set()


class StartupTracker:
    """Startup phases and failures; the ingester sets ``startup``, ``_capture`` and ``_capture_left``."""

    startup: StartupState
    _capture: FatalEvent | None
    _capture_left: int

    def _on_phase(self, ev: PhaseEvent) -> None:
        su = self.startup
        if ev.new_run:
            if su.phase == Phase.LAUNCHED and su.ready_ts is None and su.fatal is None and su.run_index:
                # server_args= right after the supervisor's start marker: the same run
                su.events.append(ev)
                if su.launched_ts is None:
                    su.launched_ts = ev.ts
                return
            su.run_index += 1
            su.phase = Phase.LAUNCHED
            su.percent = None
            _reset_steps(su)
            su.progress = 0.0
            su.launched_ts = ev.ts
            su.ready_ts = None
            su.fatal = None
            su.detail = ev.detail
            su.events.append(ev)
            self._capture = None
            return
        if su.phase is None:
            su.phase = Phase.LAUNCHED
        if ev.phase < su.phase:
            return  # e.g. a draft's graph capture line after warmup began
        if ev.phase > su.phase:
            su.events.append(ev)
            su.phase = ev.phase
            su.percent = None
            _reset_steps(su)
        kind = capture_kind(ev.detail) if ev.phase == Phase.CUDA_GRAPH and ev.counter is None else None
        if kind is not None and ev.percent is not None:
            if not self._capture_edge(su, ev, kind):
                return  # another rank's line for a capture already counted
        elif ev.phase == Phase.READY:
            su.detail = ev.detail
            su.percent = 100.0
        else:
            su.detail = ev.detail
            if ev.percent is not None:
                self._step(su, ev)
        su.progress = max(su.progress, phase_progress(su.phase, su.percent))
        if ev.phase == Phase.READY and su.ready_ts is None:
            su.ready_ts = ev.ts

    @staticmethod
    def _capture_edge(su: StartupState, ev: PhaseEvent, kind: str) -> bool:
        """A graph capture's begin or end line (see _CAPTURE_RE); False when it changes nothing."""
        latest = max((capture_order(k) for k in su.captures_ended), default=-1)
        end = ev.percent >= 100.0
        if capture_order(kind) < latest or kind in (su.captures_ended if end else su.captures_begun):
            return False
        su.detail = ev.detail
        su.captures_begun.add(kind)
        if not end:
            su.step_open = False  # the next counter is this capture's
            su.step_kind = kind
            if su.percent is None:
                su.percent = 0.0
            return True
        su.captures_ended.add(kind)
        if su.step_open and su.step_kind is None:
            su.step_kind = kind  # a counter running with no begin line before it: this capture's
        elif not (su.step_open and su.step_kind == kind):
            # no counter of this capture was seen (rank 0's lines were cut, or it printed none)
            StartupTracker._begin_step(su, kind)
            su.step_kind = kind
        su.step_percent = 100.0
        su.percent = max(su.percent or 0.0, su.step_hi)
        if capture_order(kind) >= 2:
            su.percent = 100.0  # the draft's decode (or extend) graph: graph capture is complete
        return True

    @staticmethod
    def _step(su: StartupState, ev: PhaseEvent) -> None:
        """Move the phase's percent with a step's progress (see FIRST_STEP_SHARE)."""
        x = max(0.0, min(100.0, ev.percent))
        name = ev.counter
        if name is None:  # a line that begins (0) or ends (100) a step
            if x <= 0.0:
                su.step_open = False
                if su.percent is None:
                    su.percent = 0.0
                return
            name = su.step if su.step_open else "step"
            if not su.step_open:
                StartupTracker._begin_step(su, name)
        elif not su.step_open or name != su.step or (su.counter_percent is not None and x < su.counter_percent):
            # a new counter, or the same counter starting over (the draft's after the target's);
            # right after a capture's begin line it is that capture's, else whose is not known
            if su.step_open:
                su.step_kind = None
            StartupTracker._begin_step(su, name)
        elif su.step_percent is not None and su.step_percent >= 100.0 and x < 100.0:
            # rank 0's counter still running after another rank's end line finished the step
            su.counter_percent = x
            return
        su.counter_percent = x
        su.step_percent = x
        su.percent = max(su.percent or 0.0, su.step_lo + (su.step_hi - su.step_lo) * x / 100.0)

    @staticmethod
    def _begin_step(su: StartupState, name: str) -> None:
        lo = su.percent or 0.0
        share = FIRST_STEP_SHARE.get(su.phase, 1.0) if su.steps == 0 else LATER_STEP_SHARE
        su.step, su.step_percent, su.step_open = name, None, True
        su.counter_percent = None
        su.steps += 1
        su.step_lo, su.step_hi = lo, lo + (100.0 - lo) * share

    def _on_fatal(self, ev: FatalEvent) -> None:
        su = self.startup
        if ev.severity == "fatal":
            if su.fatal is None:
                su.fatal = ev
            self._capture = ev
            self._capture_left = 80
        else:
            su.problems.append(ev)

    def _capture_more(self, line: str) -> None:
        fe = self._capture
        assert fe is not None
        self._capture_left -= 1
        text = line.rstrip()
        fe.context.append(text)
        inner = parse_event(line)
        if isinstance(inner, FatalEvent) and fe.code in GENERIC_FATALS and inner.code not in GENERIC_FATALS:
            fe.code, fe.title = inner.code, inner.title
            fe.hint = inner.hint
        if text.startswith("Possible solutions"):
            fe.hint = text
        elif fe.hint and fe.hint.startswith("Possible solutions") and text[:2].rstrip(".").isdigit():
            fe.hint += "\n" + text.strip()
