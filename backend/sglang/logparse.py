"""Pure parsing of SGLang server log lines into typed records.

``parse_line(line)`` returns a :class:`DecodeBatch`, :class:`PrefillBatch`,
:class:`PhaseEvent` (startup progress), :class:`FatalEvent` (a failure with the
log's own hint) or None for every other line.  Batch lines of every version are
read key by key (``Decode batch.`` / ``Decode batch [N],`` / ``Decode batch,``;
with or without a trailing comma; any field order; unknown keys kept), after
any prefix that :mod:`backend.logprefix` reads.

Values of known keys must be what SGLang prints: ASCII digits (at most 18 for
a count, 20 before and after the point for a decimal), no sign, no exponent, no
``nan``/``inf``; accept len at least 1, accept rate between 0 and 1.  A line
that breaks any of these, a mangled label (``Decode batch ,``) or a timestamp
that cannot be read is rejected with its reason (:class:`BadBatchLine`), never
taken as data and never an exception of another kind.

The hot path is batch lines and HTTP access lines: a substring test rejects
everything else before any regular expression runs, and prefixes are cached.
Startup and failure lines are read by :mod:`backend.sglang.logevents`; this
module re-exports its names and the prefix reader's, so callers import from here.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from operator import itemgetter
from typing import Any, Union

from backend.sglang.logevents import (  # noqa: F401 (re-exported)
    _EVENT_RE, _FATALS, FatalEvent, Phase, PhaseEvent, parse_event,
)
from backend.logprefix import (  # noqa: F401 (re-exported)
    _TS_RE, BadTimestamp, _epoch, _ranks_of, line_time, looks_like_prefixed_line, parse_prefix, rank_label,
)


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


Record = Union[DecodeBatch, PrefillBatch, PhaseEvent, FatalEvent]


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

# what SGLang prints for each kind of value (ASCII digits only: [0-9], never \d)
INT_DIGITS = 18  # below 2**63: every count fits a 64-bit integer
FLOAT_DIGITS = 20
_INT_TEXT = "[0-9]{1,%d}" % INT_DIGITS
_FLOAT_TEXT = "[0-9]{1,%d}(?:\\.[0-9]{1,%d})?" % (FLOAT_DIGITS, FLOAT_DIGITS)
_TEXT = {"int": _INT_TEXT, "float": _FLOAT_TEXT, "pct": _FLOAT_TEXT + "%?"}
_ONE = {k: re.compile(v) for k, v in _TEXT.items()}
_COLUMN = {k: re.compile("(?:%s\n)*%s" % (v, v)) for k, v in _TEXT.items()}  # a whole column joined by "\n"
_KIND = {int: "int", float: "float", _pct: "pct"}
# fields whose range is narrower than "not negative": (low, high), both included
LIMITS = {"accept_len": (1.0, math.inf), "accept_rate": (0.0, 1.0)}
_LIMIT_WHY = {"accept_len": "an accept length counts the bonus token, so it is at least 1",
              "accept_rate": "a rate is between 0 and 1"}


def _number(kind: str, v: str) -> float | int:
    return int(v) if kind == "int" else float(v[:-1] if v[-1:] == "%" else v)


def _column(kind: str, name: str, col: tuple) -> list:
    """A column of values of one key, converted; ValueError/KeyError when any value is not valid."""
    if kind == "unknown":
        return list(map(_unknown_value, col))
    if kind == "bool":
        return list(map(_BOOL, col))
    if _COLUMN[kind].fullmatch("\n".join(col)) is None:
        raise ValueError(name)
    if kind == "int":
        vals = list(map(int, col))
    elif kind == "float":
        vals = list(map(float, col))
    else:
        vals = [_number(kind, v) for v in col]
    lim = LIMITS.get(name)
    if lim is not None and (min(vals) < lim[0] or max(vals) > lim[1]):
        raise ValueError(name)
    return vals


def _why_not(kind: str, v: str) -> str:
    """Why ``v``, which looks like a number, is not a valid value of this kind ("" when it does not)."""
    t = v.strip()
    if not t:
        return "empty"
    try:
        x = float(t)
    except ValueError:
        return ""
    if x != x or x in (math.inf, -math.inf):
        return "not a finite number"
    if x < 0 or t[:1] == "-":
        return "negative"
    if any(c.isdigit() and not c.isascii() for c in t):
        return "digits that are not ASCII"
    if "e" in t.lower():
        return "an exponent"
    if kind == "int" and "." in t:
        return "not a whole number"
    digits = sum(c.isdigit() for c in t)
    if kind == "int" and digits > INT_DIGITS:
        return f"{digits} digits, more than a 64-bit count holds"
    if digits > FLOAT_DIGITS:
        return f"{digits} digits"
    return ""


def _check_value(kind: str, name: str, key: str, v: str) -> Any:
    """One value converted, or BadBatchLine naming the field and why."""
    shown = repr(v) if len(v) <= 40 else repr(v[:37] + "...") + f" ({len(v)} characters)"
    if kind == "unknown":
        return _unknown_value(v)
    if kind == "bool":
        if v in ("True", "False"):
            return v == "True"
        raise BadBatchLine(f"field {key!r}: {shown} is not a valid value")
    if _ONE[kind].fullmatch(v) is None:
        why = _why_not(kind, v)
        raise BadBatchLine(f"field {key!r}: {shown} is not a valid value" + (f" ({why})" if why else ""))
    x = _number(kind, v)
    lim = LIMITS.get(name)
    if lim is not None and not lim[0] <= x <= lim[1]:
        raise BadBatchLine(f"field {key!r}: {shown} is out of range ({_LIMIT_WHY[name]})")
    return x


_plans: dict[tuple, tuple] = {}


def _make_plan(keys: tuple) -> tuple:
    """(names, value kinds, graph label, pickers) for a line with these keys in this order.

    Lines of one server repeat a handful of key sequences, so plans are cached
    and the per-line work is one split and one conversion per value.
    """
    names: list[str] = []
    kinds: list[str] = []
    graph_label = None
    for k in keys:
        spec = _KEYS.get(k)
        if spec is None:
            k2 = k.strip()
            if not k2:
                raise BadBatchLine("empty key")
            names.append(k2)
            kinds.append("unknown")
            continue
        name, conv = spec
        if name == "graph":
            graph_label = k
            kinds.append("bool")
        else:
            kinds.append(_KIND[conv])
        names.append(name)
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
    plan = (tuple(names), tuple(kinds), tuple(keys), graph_label, dec, pre)
    if len(_plans) > 1024:
        _plans.clear()
    _plans[keys] = plan
    return plan


def _at_message_start(line: str, p: int) -> bool:
    """True when the text before position p is empty or a log prefix (ends with ']' or ')')."""
    head = line[:p].rstrip()
    return not head or head[-1] in "])"


def _split_label(line: str, p: int, label_len: int) -> tuple[int | None, int] | None:
    """After 'Decode batch' at p: (iteration or None, start of the key/value body).

    None when the words are not a batch label: prose ('Decode batch size', 'batchsize') or
    words inside some other message.  A label that starts the message but is followed by
    anything other than '.', ',' or ' [N]' followed by one of them is a mangled batch line:
    :class:`BadBatchLine`.
    """
    i = p + label_len
    it = None
    c = line[i:i + 1]
    if c == " " and line[i + 1:i + 2] == "[":
        j = line.find("]", i + 2)
        if j < 0:
            raise BadBatchLine("unclosed '[' after the batch label")
        text = line[i + 2:j]
        if not (0 < len(text) <= INT_DIGITS and text.isascii() and text.isdigit()):
            shown = repr(text) if len(text) <= 40 else repr(text[:37] + "...") + f" ({len(text)} characters)"
            raise BadBatchLine(f"iteration {shown} is not a number")
        it = int(text)
        i = j + 1
        c = line[i:i + 1]
    if c not in (".", ","):
        if it is not None:
            raise BadBatchLine("the batch label is not followed by '.' or ','")
        if c.isalpha() or (c == " " and line[i + 1:i + 2].isalpha()) or not _at_message_start(line, p):
            return None
        raise BadBatchLine(f"the batch label is followed by {line[i:i + 3]!r}, not by '.' or ','")
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


def _convert_rows(plan: tuple, items: list, bad: list) -> tuple[list, list]:
    """(rows, items kept) for the lines of one key sequence; bad lines go to ``bad`` with their reason.

    Column by column when every value is valid (the usual case), else line by line.
    """
    names, kinds, keys = plan[0], plan[1], plan[2]
    try:
        cols = [_column(k, n, col) for k, n, col in zip(kinds, names, zip(*[it[4] for it in items]))]
        cols.append([None] * len(items))
        return list(zip(*cols)), items
    except (ValueError, KeyError):
        pass
    rows = []
    keep = []
    for item in items:
        try:
            rows.append(tuple([_check_value(k, n, key, v) for k, n, key, v in zip(kinds, names, keys, item[4])])
                        + (None,))
            keep.append(item)
        except BadBatchLine as exc:
            bad.append((item[0], str(exc)))
    return rows, keep


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
            last = parts[-1] if len(parts[-1]) <= 40 else parts[-1][:37] + "..."
            bad.append((idx, f"no 'key: value' in {last!r}" if last else "no fields after the batch label"))
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
        names, glabel, dpick, ppick = plan[0], plan[3], plan[4], plan[5]
        rows, items = _convert_rows(plan, items, bad)
        for (idx, dec, prefix, it, _), row in zip(items, rows):
            try:
                ts, ts_text, ranks, ray = parse_prefix(prefix)
            except BadTimestamp as exc:
                bad.append((idx, f"timestamp: {exc}"))
                continue
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
            ts, ts_text = line_time(line)
            return PhaseEvent(ts, ts_text, Phase.WARMUP, "HTTP server answering; warmup request")
        return None
    return parse_event(line)

