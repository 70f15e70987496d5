"""Startup-phase and failure lines of an SGLang server log.

``parse_event(line)`` returns a :class:`PhaseEvent` (a startup phase, with the
progress of the step the line reports when it has one) or a :class:`FatalEvent`
(a failure, with the log's own hint), or None.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from enum import IntEnum
from typing import Any

from backend.logprefix import BadTimestamp, _TS_RE, parse_prefix


class Phase(IntEnum):
    """Startup phases in order; a server only moves forward through them."""

    LAUNCHED = 0  # process started, arguments printed
    INIT = 1  # torch distributed init
    WEIGHTS = 2  # loading weights
    KV_CACHE = 3  # KV cache / memory pool
    CUDA_GRAPH = 4  # capturing CUDA graphs
    WARMUP = 5  # HTTP server up, warmup request
    READY = 6  # "The server is fired up and ready to roll!"

    @property
    def label(self) -> str:
        return _PHASE_LABELS[self]


_PHASE_LABELS = {
    Phase.LAUNCHED: "launched", Phase.INIT: "initialising", Phase.WEIGHTS: "loading weights",
    Phase.KV_CACHE: "allocating KV cache", Phase.CUDA_GRAPH: "capturing CUDA graphs",
    Phase.WARMUP: "warming up", Phase.READY: "ready",
}


@dataclass(slots=True)
class PhaseEvent:
    ts: float | None
    ts_text: str
    phase: Phase
    detail: str
    # progress of the step the line reports: a progress counter's share done, or 0 / 100 for the
    # line that begins / ends a step (weights of one model, one set of graphs)
    percent: float | None = None
    new_run: bool = False  # the line that starts a launch (server_args=...)
    counter: str | None = None  # the progress counter the line shows ("capturing num tokens"), None for others
    done: int | None = None  # the counter's count, "13/35" -> 13 and 35
    total: int | None = None
    kind: str = "phase"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["phase"] = self.phase.name
        return d


@dataclass(slots=True)
class FatalEvent:
    ts: float | None
    ts_text: str
    code: str
    severity: str  # "fatal" (the server stops) or "warning" (it goes on)
    title: str
    message: str  # the line, without its prefix
    hint: str | None  # the log's own advice when it gives one, else ours
    context: list = field(default_factory=list)  # lines that followed (traceback, "Possible solutions")
    kind: str = "fatal"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)



# -- startup and failure lines -----------------------------------------------------

_MSG_START = re.compile(
    r"^\s*(?:\([^)]*\)\s*)?"  # Ray actor prefix
    r"(?:\[\d{4}-\d\d-\d\d[^\]]*\]\s*"  # [ts ranks]
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?\s+[A-Z]+\s+\d+\s+\[[^\]]*\]\s*)?"  # dictConfig
)

_PERCENT_RE = re.compile(r"([0-9]{1,3})%")
_COUNT_RE = re.compile(r"(?<![0-9])([0-9]{1,9})/([0-9]{1,9}) \[")  # tqdm's "13/35 [00:04<00:07, ...]"
# tqdm progress counters, by the text that starts each (several may share one line when the
# carriage returns between updates were lost): (text, phase, name shown)
_COUNTERS = (
    ("Multi-thread loading shards", "loading shards"),
    ("checkpoint shards", "loading checkpoint shards"),
    ("Compiling num tokens", "compiling num tokens"),
    ("Capturing num tokens", "capturing num tokens"),
    ("Capturing batches", "capturing batches"),
)
_EVENT_RE = re.compile(
    r"^===== specdeck: .* starting at |server_args=|Init torch distributed|Load weight|Loading \w+ checkpoint shards|"
    r"Multi-thread loading shards|KV Cache is allocated|"
    r"Using KV cache dtype|Memory pool end|[Cc]apture .*?(?:cuda|CUDA) graph|Capturing batches|"
    r"Compiling num tokens|Capturing num tokens|max_total_num_tokens=|"
    r"Uvicorn running on|Application startup complete|fired up and ready to roll|"
    r"Not enough memory|OutOfMemoryError|CUDA out of memory|Scheduler hit an exception|Received sigquit|"
    r"Watchdog timeout|Initialization failed|Health check failed|out of memory\. Try to lower|runs out of memory|"
    r"KV cache pool is full|error: (?:ambiguous option|unrecognized arguments|argument )|"
    r"No module named '?sglang|Address already in use"
)

_FATALS: list[tuple[re.Pattern, str, str, str, str | None]] = [
    # (pattern, code, severity, title, our hint when the log gives none)
    (re.compile(r"Capture (?:cuda|CUDA) graph failed"), "cuda_graph_capture_failed", "fatal",
     "CUDA graph capture failed", "Lower mem_fraction_static or cuda_graph.max_bs, or disable CUDA graph."),
    (re.compile(r"Not enough memory"), "not_enough_memory", "fatal", "Not enough GPU memory for the KV cache",
     "Increase mem_fraction_static, or free the GPU."),
    (re.compile(r"OutOfMemoryError|CUDA out of memory"), "cuda_oom", "fatal", "CUDA out of memory",
     "Lower mem_fraction_static, cuda_graph.max_bs or the running requests; check other processes on the GPUs."),
    (re.compile(r"Scheduler hit an exception"), "scheduler_exception", "fatal", "The scheduler raised an exception",
     "Read the traceback below; the last line names the error."),
    (re.compile(r"Received sigquit"), "child_failed", "fatal", "A server subprocess failed",
     "Look above this line for the subprocess's error."),
    (re.compile(r"Watchdog timeout"), "watchdog_timeout", "fatal", "A forward pass exceeded the watchdog timeout",
     "A hung GPU or NCCL; raise --watchdog-timeout only if forward passes are legitimately slow."),
    (re.compile(r"Initialization failed"), "init_failed", "fatal", "Initialisation failed",
     "See the error messages above this line."),
    (re.compile(r"error: (?:ambiguous option|unrecognized arguments|argument )"), "bad_arguments", "fatal",
     "sglang rejected the launch arguments", "Fix the flag it names (check the sglang version's flag names)."),
    (re.compile(r"No module named '?sglang"), "sglang_missing", "fatal", "sglang is not installed for this python",
     "Set python to the interpreter of the serving environment."),
    (re.compile(r"Address already in use"), "port_in_use", "fatal", "The port is already in use",
     "Stop what holds the port or choose another."),
    (re.compile(r"Health check failed"), "health_check_failed", "warning", "Health check failed",
     "The scheduler did not answer within 20 s; it may be overloaded or hung."),
    (re.compile(r"(?:Prefill|Decode) out of memory|runs out of memory"), "batch_oom", "warning",
     "A batch ran out of KV-cache memory", "Lower the batch size or concurrency."),
    (re.compile(r"KV cache pool is full"), "kv_retract", "warning", "KV cache full: requests retracted",
     "Lower concurrency or raise mem_fraction_static."),
]

_HINT_IN_LINE = re.compile(r"(Please try [^.]*\.?|Try to lower [^.]*\.?)")


def _counter_event(line: str, key: str, ts: float | None, ts_text: str) -> PhaseEvent:
    """A tqdm progress counter: the last update on the line (updates run together when the carriage
    returns between them were lost), its share done from the counts ("13/35"), else from the percent."""
    text, name = next((t, n) for t, n in _COUNTERS if t in key)
    at = line.rfind(text)
    phase = Phase.WEIGHTS if "shards" in text else Phase.CUDA_GRAPH
    done = total = None
    percent = None
    cm = _COUNT_RE.search(line, at)
    if cm is not None:
        d, t = int(cm.group(1)), int(cm.group(2))
        if 0 < t and d <= t:
            done, total, percent = d, t, 100.0 * d / t
    if percent is None:
        pm = _PERCENT_RE.search(line, at)
        if pm is not None and int(pm.group(1)) <= 100:
            percent = float(pm.group(1))
    detail = f"{name} {done}/{total}" if done is not None else name
    return PhaseEvent(ts, ts_text, phase, detail, percent, False, name, done, total)


def _strip_prefix(line: str) -> str:
    m = _MSG_START.match(line)
    return line[m.end():].rstrip() if m else line.strip()


def parse_event(line: str) -> PhaseEvent | FatalEvent | None:
    """A startup-phase or failure line, else None."""
    m = _EVENT_RE.search(line)
    if m is None:
        return None
    key = m.group(0)
    # timestamp of the line, when it has one (tqdm lines have none)
    tm = _TS_RE.search(line, 0, 60 if key[0] != "=" else len(line))
    ts, ts_text = (None, "")
    if tm:
        try:
            ts, ts_text, _, _ = parse_prefix(line[:tm.end() + 1])
        except BadTimestamp:  # the event still counts; its time is unknown
            ts, ts_text = None, ""
    msg = _strip_prefix(line)
    for pat, code, sev, title, hint in _FATALS:
        if pat.search(line):
            h = _HINT_IN_LINE.search(msg)
            return FatalEvent(ts, ts_text, code, sev, title, msg, h.group(1) if h else hint)
    if key.startswith("===== specdeck:"):
        # the supervisor's marker at the start of every run appended to the same log
        return PhaseEvent(ts, ts_text, Phase.LAUNCHED, "process started", None, True)
    if key == "server_args=":
        return PhaseEvent(ts, ts_text, Phase.LAUNCHED, "server arguments read", None, True)
    if key == "Init torch distributed":
        return PhaseEvent(ts, ts_text, Phase.INIT, msg)
    if key.startswith(("Loading ", "Multi-thread", "Compiling num", "Capturing ")):
        return _counter_event(line, key, ts, ts_text)
    if key == "Load weight":
        end = "Load weight end" in line
        return PhaseEvent(ts, ts_text, Phase.WEIGHTS, msg, 100.0 if end else 0.0)
    if key in ("KV Cache is allocated", "Using KV cache dtype", "Memory pool end"):
        return PhaseEvent(ts, ts_text, Phase.KV_CACHE, msg)
    if key.lower().startswith("capture "):
        low = line.lower()
        pct = 100.0 if " end" in low else (0.0 if " begin" in low else None)
        return PhaseEvent(ts, ts_text, Phase.CUDA_GRAPH, msg, pct)
    if key in ("max_total_num_tokens=", "Uvicorn running on", "Application startup complete"):
        return PhaseEvent(ts, ts_text, Phase.WARMUP, msg)
    if key == "fired up and ready to roll":
        return PhaseEvent(ts, ts_text, Phase.READY, msg, 100.0)
    return None

