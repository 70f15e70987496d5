"""Pure parsing of SGLang server log lines into typed records.

``parse_line(line)`` returns a :class:`DecodeBatch`, :class:`PrefillBatch`,
:class:`PhaseEvent` (startup progress), :class:`FatalEvent` (a failure with the
log's own hint) or None for every other line.  Batch lines of every version are
read key by key (``Decode batch.`` / ``Decode batch [N],`` / ``Decode batch,``;
with or without a trailing comma; any field order; unknown keys kept), after
any prefix: ``[ts]``, ``[ts.mmm DP0 TP0 EP0]`` (rank tags in any combination),
a Ray ``(SGLangEngine pid=N)`` actor prefix, or the dictConfig form
``2025-12-04 20:35:53 INFO 151972 [file.py:287]``.

The hot path is batch lines and HTTP access lines: a substring test rejects
everything else before any regular expression runs, and prefixes are cached.
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass, field
from enum import IntEnum
from operator import itemgetter
from typing import Any, Union


# -- records ------------------------------------------------------------------

@dataclass(slots=True)
class DecodeBatch:
    ts: float | None  # seconds since the epoch, read as local time
    ts_text: str
    ranks: tuple  # (("DP", 0), ("TP", 0)); empty when the log shows none
    ray_pid: int | None
    iter: int | None  # "[N]" after the label (0.5.4, or SGLANG_LOG_FORWARD_ITERS)
    running_req: int | None
    queue_req: int | None
    num_token: int | None  # KV-cache tokens in use (#token, or #full token for hybrid models)
    token_usage: float | None  # token usage, or full token usage for hybrid models
    accept_len: float | None
    accept_rate: float | None
    graph_label: str | None  # "cuda graph" | "cpu graph" | "npu graph" | "musa graph"
    graph: bool | None
    gen_throughput: float | None
    fields: dict  # every key: value of the line, typed where known; unknown keys kept
    kind: str = "decode"

    @property
    def rank_label(self) -> str:
        return rank_label(self.ranks)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ranks"] = dict(self.ranks)
        return d


@dataclass(slots=True)
class PrefillBatch:
    ts: float | None
    ts_text: str
    ranks: tuple
    ray_pid: int | None
    iter: int | None
    new_seq: int | None
    new_token: int | None
    cached_token: int | None
    token_usage: float | None
    running_req: int | None
    queue_req: int | None
    graph_label: str | None
    graph: bool | None
    input_throughput: float | None
    fields: dict
    kind: str = "prefill"

    @property
    def rank_label(self) -> str:
        return rank_label(self.ranks)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ranks"] = dict(self.ranks)
        return d


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
    percent: float | None = None  # progress inside the phase (weights, graph capture)
    new_run: bool = False  # the line that starts a launch (server_args=...)
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


Record = Union[DecodeBatch, PrefillBatch, PhaseEvent, FatalEvent]


# -- prefix ----------------------------------------------------------------------

_TS_RE = re.compile(r"(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d:\d\d)(?:[.,](\d{1,6}))?")
_RANK_RE = re.compile(r"(?<![A-Za-z_])(ATTN_CP|MOE_DP|DP|TP|PP|EP)(\d+)(?![\w])")
_RAY_RE = re.compile(r"^\s*\(\s*[\w.-]+ pid=(\d+)")

_prefix_cache: dict[str, tuple] = {}
_second_cache: dict[str, float | None] = {}
_CACHE_MAX = 8192


def _epoch(date: str, hms: str) -> float | None:
    key = date + " " + hms
    v = _second_cache.get(key)
    if v is None and key not in _second_cache:
        try:
            v = time.mktime(time.strptime(key, "%Y-%m-%d %H:%M:%S"))
        except (ValueError, OverflowError):
            v = None
        if len(_second_cache) > _CACHE_MAX:
            _second_cache.clear()
        _second_cache[key] = v
    return v


_rank_cache: dict[str, tuple] = {}
_ray_cache: dict[str, int | None] = {}
_label_cache: dict[tuple, str] = {}


def _ranks_of(tags: str) -> tuple:
    r = _rank_cache.get(tags)
    if r is None:
        r = tuple((n, int(i)) for n, i in _RANK_RE.findall(tags))
        if len(_rank_cache) > _CACHE_MAX:
            _rank_cache.clear()
        _rank_cache[tags] = r
    return r


def rank_label(ranks: tuple) -> str:
    """``(("DP", 0), ("TP", 0))`` → ``"DP0 TP0"`` (cached)."""
    lab = _label_cache.get(ranks)
    if lab is None:
        lab = " ".join(f"{n}{i}" for n, i in ranks)
        if len(_label_cache) > _CACHE_MAX:
            _label_cache.clear()
        _label_cache[ranks] = lab
    return lab


_rest_cache: dict[str, tuple[float, str, tuple]] = {}


def _bracket_rest(rest: str) -> tuple[float, str, tuple]:
    """What follows 'YYYY-MM-DD HH:MM:SS' in the bracket: (fraction of a second, its text, rank tags)."""
    hit = _rest_cache.get(rest)
    if hit is not None:
        return hit
    frac, frac_text, i = 0.0, "", 0
    if rest[:1] in (".", ","):
        j = 1
        while rest[j:j + 1].isdigit():
            j += 1
        if j > 1:
            frac = int(rest[1:j]) / (10 ** (j - 1))
            frac_text = rest[:j]
        i = j
    close = rest.find("]", i)
    tags = rest[i:close] if close >= 0 else rest[i:]
    out = (frac, frac_text, _ranks_of(tags) if tags.strip() else ())
    if len(_rest_cache) > _CACHE_MAX:
        _rest_cache.clear()
    _rest_cache[rest] = out
    return out


def parse_prefix(prefix: str) -> tuple[float | None, str, tuple, int | None]:
    """(epoch seconds, timestamp text, rank tags, Ray pid) of a line prefix.

    Timestamps change on every line, so the usual ``[YYYY-MM-DD HH:MM:SS...]``
    bracket is read by position, with small caches for the parts that repeat
    (the second, the milliseconds-and-tags tail, the Ray actor prefix).
    """
    b = prefix.find("[")
    if b >= 0 and prefix[b + 5:b + 6] == "-" and prefix[b + 14:b + 15] == ":" and prefix[b + 20:b + 21] in (
            "]", " ", ".", ","):
        day_sec = prefix[b + 1:b + 20]
        ts = _second_cache.get(day_sec)
        if ts is None:
            ts = _epoch(day_sec[:10], day_sec[11:])
            if ts is not None:
                _second_cache[day_sec] = ts
        rest = prefix[b + 20:]
        if rest[:1] == "." and rest[1:4].isdigit() and not rest[4:5].isdigit():
            # SGLANG_LOG_MS: three digits, different on every line; keep them out of the cache
            frac, frac_text = int(rest[1:4]) / 1000.0, rest[:4]
            ranks = _bracket_rest(rest[4:])[2]
        else:
            frac, frac_text, ranks = _bracket_rest(rest)
        if ts is not None and frac:
            ts += frac
        if not b:
            return (ts, day_sec + frac_text if frac_text else day_sec, ranks, None)
        head = prefix[:b]
        ray_pid = _ray_cache.get(head, -1)
        if ray_pid == -1:
            r = _RAY_RE.match(head)
            ray_pid = int(r.group(1)) if r else None
            if len(_ray_cache) > _CACHE_MAX:
                _ray_cache.clear()
            _ray_cache[head] = ray_pid
        return (ts, day_sec + frac_text if frac_text else day_sec, ranks, ray_pid)
    hit = _prefix_cache.get(prefix)
    if hit is None:
        hit = _parse_prefix_slow(prefix)
        if len(_prefix_cache) > _CACHE_MAX:
            _prefix_cache.clear()
        _prefix_cache[prefix] = hit
    return hit


def _parse_prefix_slow(prefix: str) -> tuple[float | None, str, tuple, int | None]:
    ts = None
    ts_text = ""
    ranks: tuple = ()
    m = _TS_RE.search(prefix)
    if m:
        ts_text = m.group(0)
        ts = _epoch(m.group(1), m.group(2))
        if ts is not None and m.group(3):
            ts += int(m.group(3)) / (10 ** len(m.group(3)))
        # rank tags live in the same bracket as the timestamp
        end = prefix.find("]", m.end())
        seg = prefix[m.end(): end if end >= 0 else len(prefix)]
        if seg.strip() and prefix[m.start() - 1: m.start()] == "[":
            ranks = _ranks_of(seg)
    r = _RAY_RE.match(prefix)
    ray_pid = int(r.group(1)) if r else None
    return (ts, ts_text, ranks, ray_pid)


# -- batch lines -------------------------------------------------------------------

def _pct(v: str) -> float:
    return float(v[:-1]) if v.endswith("%") else float(v)


# key → (normalised name, converter)
_KEYS: dict[str, tuple[str, Any]] = {
    "#running-req": ("running_req", int),
    "#queue-req": ("queue_req", int),
    "#token": ("num_token", int),
    "token usage": ("token_usage", float),
    "#full token": ("full_token", int),
    "full token usage": ("full_token_usage", float),
    "#swa token": ("swa_token", int),
    "swa token usage": ("swa_token_usage", float),
    "mamba num": ("mamba_num", int),
    "mamba usage": ("mamba_usage", float),
    "#gpu token": ("gpu_token", int),
    "gpu token usage": ("gpu_token_usage", float),
    "#cpu token": ("cpu_token", int),
    "cpu token usage": ("cpu_token_usage", float),
    "accept len": ("accept_len", float),
    "accept rate": ("accept_rate", float),
    "cap len": ("cap_len", float),
    "block accept len": ("block_accept_len", float),
    "pre-allocated usage": ("pre_allocated_usage", float),
    "#prealloc-req": ("prealloc_req", int),
    "#transfer-req": ("transfer_req", int),
    "#retracted-req": ("retracted_req", int),
    "#host-receive-req": ("host_receive_req", int),
    "cuda graph": ("graph", None),
    "cpu graph": ("graph", None),
    "npu graph": ("graph", None),
    "musa graph": ("graph", None),
    "gen throughput (token/s)": ("gen_throughput", float),
    "input throughput (token/s)": ("input_throughput", float),
    "#new-seq": ("new_seq", int),
    "#new-token": ("new_token", int),
    "#cached-token": ("cached_token", int),
    "cache hit rate": ("cache_hit_rate_pct", _pct),
    "#pending-token": ("pending_token", int),
    "#replay-token": ("replay_token", int),
    "#bootstrap-req": ("bootstrap_req", int),
    "#inflight-req": ("inflight_req", int),
    "#optimistic-req": ("optimistic_req", int),
    "#unbootstrapped-req": ("unbootstrapped_req", int),
    "#transferring-req": ("transferring_req", int),
    "est. decode TFLOPS/s (per GPU)": ("decode_tflops", float),
    "est. prefill TFLOPS/s (per GPU)": ("prefill_tflops", float),
    "est. read BW (GB/s per GPU)": ("read_bw_gbs", float),
    "est. write BW (GB/s per GPU)": ("write_bw_gbs", float),
}
_GRAPH_KEYS = frozenset(("cuda graph", "cpu graph", "npu graph", "musa graph"))


def _unknown_value(v: str) -> Any:
    if v == "True":
        return True
    if v == "False":
        return False
    try:
        return int(v)
    except ValueError:
        pass
    try:
        return float(v)
    except ValueError:
        return v


class BadBatchLine(ValueError):
    """A line that looks like a batch line but is not one we can read."""


_BOOL = {"True": True, "False": False}.__getitem__
_plans: dict[tuple, tuple] = {}


def _make_plan(keys: tuple) -> tuple:
    """(names, converters, graph label) for a line with these keys in this order.

    Lines of one server repeat a handful of key sequences, so plans are cached
    and the per-line work is one split and one conversion per value.
    """
    names: list[str] = []
    convs: list[Any] = []
    graph_label = None
    for k in keys:
        spec = _KEYS.get(k)
        if spec is None:
            k2 = k.strip()
            if not k2:
                raise BadBatchLine("empty key")
            names.append(k2)
            convs.append(_unknown_value)
            continue
        name, conv = spec
        if name == "graph":
            graph_label = k
            conv = _BOOL
        names.append(name)
        convs.append(conv)
    pos = {n: i for i, n in enumerate(names)}
    none_idx = len(names)  # rows carry one trailing None for absent fields

    def at(*alts: str) -> int:
        for a in alts:
            if a in pos:
                return pos[a]
        return none_idx

    dec = itemgetter(at("running_req"), at("queue_req"), at("num_token", "full_token"),
                     at("token_usage", "full_token_usage"), at("accept_len"), at("accept_rate"), at("graph"),
                     at("gen_throughput"))
    pre = itemgetter(at("new_seq"), at("new_token"), at("cached_token"), at("token_usage", "full_token_usage"),
                     at("running_req"), at("queue_req"), at("graph"), at("input_throughput"))
    plan = (tuple(names), tuple(convs), graph_label, dec, pre)
    if len(_plans) > 1024:
        _plans.clear()
    _plans[keys] = plan
    return plan


def _split_label(line: str, p: int, label_len: int) -> tuple[int | None, int] | None:
    """After 'Decode batch' at p: (iteration or None, start of the key/value body).

    None when the words are not a batch label (not followed by '.', ',' or ' [N]').
    """
    i = p + label_len
    it = None
    c = line[i:i + 1]
    if c == " " and line[i + 1:i + 2] == "[":
        j = line.find("]", i + 2)
        if j < 0:
            raise BadBatchLine("unclosed '[' after the batch label")
        try:
            it = int(line[i + 2:j])
        except ValueError:
            raise BadBatchLine(f"iteration {line[i + 2:j]!r} is not a number") from None
        i = j + 1
        c = line[i:i + 1]
    if c not in (".", ","):
        if it is not None:
            raise BadBatchLine("the batch label is not followed by '.' or ','")
        return None
    return it, i + 1


def parse_batch(line: str) -> DecodeBatch | PrefillBatch | None:
    """A Decode or Prefill batch line, None for any other line.

    Raises :class:`BadBatchLine` when the line carries a batch label but its
    fields cannot be read (callers count these as unparsed).
    """
    recs, bad = parse_batch_lines([line])
    if bad:
        raise BadBatchLine(bad[0][1])
    return recs[0]


def parse_batch_lines(lines: list[str]) -> tuple[list, list[tuple[int, str]]]:
    """Parse many lines at once: (records aligned with ``lines``, [(index, reason)] of bad ones).

    A record is None for a line that is not a batch line, or a bad one.  Lines
    sharing a key sequence are converted column by column, which is what makes
    bulk ingestion fast; the result is the same as parsing each line alone.
    """
    out: list = [None] * len(lines)
    bad: list[tuple[int, str]] = []
    groups: dict[tuple, list] = {}
    plans = _plans
    for idx, line in enumerate(lines):
        p = line.find("Decode batch")
        if p >= 0:
            end = p + 12
            dec = True
        else:
            p = line.find("Prefill batch")
            if p < 0:
                continue
            end = p + 13
            dec = False
        c = line[end:end + 1]
        it = None
        if c == "." or c == ",":
            start = end + 1
        else:
            try:
                lab = _split_label(line, p, end - p)
            except BadBatchLine as exc:
                bad.append((idx, str(exc)))
                continue
            if lab is None:
                continue
            it, start = lab
        parts = line[start:].strip().rstrip(",").replace(": ", ", ").split(", ")
        if len(parts) & 1:
            bad.append((idx, f"no 'key: value' in {parts[-1]!r}" if parts[-1] else "no fields after the batch label"))
            continue
        keys = tuple(parts[0::2])
        plan = plans.get(keys)
        if plan is None:
            try:
                plan = _make_plan(keys)
            except BadBatchLine as exc:
                bad.append((idx, str(exc)))
                continue
        g = groups.get(plan)
        if g is None:
            g = groups[plan] = []
        g.append((idx, dec, line[:p], it, parts[1::2]))
    for plan, items in groups.items():
        names, convs, glabel, dpick, ppick = plan
        n = len(items)
        try:
            cols = [list(map(conv, col)) for conv, col in zip(convs, zip(*[it[4] for it in items]))]
            cols.append([None] * n)
            rows = list(zip(*cols))
        except (ValueError, KeyError):
            rows = []
            keep = []
            for item in items:
                try:
                    rows.append(tuple([c(v) for c, v in zip(convs, item[4])]) + (None,))
                    keep.append(item)
                except (ValueError, KeyError):
                    for k, c, v in zip(names, convs, item[4]):
                        try:
                            c(v)
                        except (ValueError, KeyError):
                            bad.append((item[0], f"field {_key_for(k)!r}: {v!r} is not a valid value"))
                            break
            items = keep
        for (idx, dec, prefix, it, _), row in zip(items, rows):
            ts, ts_text, ranks, ray = parse_prefix(prefix)
            fields = dict(zip(names, row))
            if dec:
                run, q, tok, use, acc, rate, graph, tput = dpick(row)
                out[idx] = DecodeBatch(ts, ts_text, ranks, ray, it, run, q, tok, use, acc, rate, glabel, graph,
                                       tput, fields)
            else:
                ns, nt, ct, use, run, q, graph, itp = ppick(row)
                out[idx] = PrefillBatch(ts, ts_text, ranks, ray, it, ns, nt, ct, use, run, q, glabel, graph,
                                        itp, fields)
    if bad:
        bad.sort()
    return out, bad


_NAME_TO_KEY = {}


def _key_for(name: str) -> str:
    """The log's key for a normalised field name (for error messages)."""
    if not _NAME_TO_KEY:
        for k, (n, _) in _KEYS.items():
            _NAME_TO_KEY.setdefault(n, k)
    return _NAME_TO_KEY.get(name, name)


# -- startup and failure lines -----------------------------------------------------

_MSG_START = re.compile(
    r"^\s*(?:\([^)]*\)\s*)?"  # Ray actor prefix
    r"(?:\[\d{4}-\d\d-\d\d[^\]]*\]\s*"  # [ts ranks]
    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)?\s+[A-Z]+\s+\d+\s+\[[^\]]*\]\s*)?"  # dictConfig
)

_PERCENT_RE = re.compile(r"(\d{1,3})%")
_EVENT_RE = re.compile(
    r"^===== specdeck: .* starting at |server_args=|Init torch distributed|Load weight|Loading \w+ checkpoint shards|KV Cache is allocated|"
    r"Using KV cache dtype|Memory pool end|[Cc]apture .*?(?:cuda|CUDA) graph|Capturing batches|max_total_num_tokens=|"
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
        ts, ts_text, _, _ = parse_prefix(line[:tm.end() + 1])
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
    if key.startswith("Loading "):
        pcts = _PERCENT_RE.findall(line)
        return PhaseEvent(ts, ts_text, Phase.WEIGHTS, "loading checkpoint shards",
                          float(pcts[-1]) if pcts else None)
    if key == "Load weight":
        end = "Load weight end" in line
        return PhaseEvent(ts, ts_text, Phase.WEIGHTS, msg, 100.0 if end else 0.0)
    if key in ("KV Cache is allocated", "Using KV cache dtype", "Memory pool end"):
        return PhaseEvent(ts, ts_text, Phase.KV_CACHE, msg)
    if key == "Capturing batches":
        pcts = _PERCENT_RE.findall(line)
        return PhaseEvent(ts, ts_text, Phase.CUDA_GRAPH, "capturing batches", float(pcts[-1]) if pcts else None)
    if key.lower().startswith("capture "):
        low = line.lower()
        pct = 100.0 if " end" in low else (0.0 if " begin" in low else None)
        return PhaseEvent(ts, ts_text, Phase.CUDA_GRAPH, msg, pct)
    if key in ("max_total_num_tokens=", "Uvicorn running on", "Application startup complete"):
        return PhaseEvent(ts, ts_text, Phase.WARMUP, msg)
    if key == "fired up and ready to roll":
        return PhaseEvent(ts, ts_text, Phase.READY, msg, 100.0)
    return None


_WARMUP_PROBE = ("model_info", "/generate")


def parse_line(line: str) -> Record | None:
    """Parse one log line (without or with its newline) into a record, or None.

    Raises :class:`BadBatchLine` for a batch line whose fields cannot be read.
    """
    if "batch" in line:
        rec = parse_batch(line)
        if rec is not None:
            return rec
    if 'HTTP/1.' in line:
        # access log: only the warmup's /get_model_info poll means anything for startup
        if "model_info HTTP" in line:
            tm = _TS_RE.search(line, 0, 60)
            ts, ts_text = (parse_prefix(line[:tm.end() + 1])[:2] if tm else (None, ""))
            return PhaseEvent(ts, ts_text, Phase.WARMUP, "HTTP server answering; warmup request")
        return None
    return parse_event(line)


def looks_like_prefixed_line(line: str) -> bool:
    """True when ``line`` starts a new log record (so it ends a traceback or hint block)."""
    s = line.lstrip()
    if not s:
        return False
    c = s[0]
    if c == "[":
        return len(s) > 5 and s[1:5].isdigit()
    if c == "(":
        return " pid=" in s[:64]
    return len(s) > 19 and s[:4].isdigit() and s[4] == "-" and s[13] == ":"
