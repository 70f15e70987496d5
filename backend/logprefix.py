"""The prefix of an SGLang log line: timestamp, rank tags and Ray actor pid.

``[ts]``, ``[ts.mmm DP0 TP0 EP0]`` (rank tags in any combination), a Ray
``(SGLangEngine pid=N)`` actor prefix, or the dictConfig form
``2025-12-04 20:35:53 INFO 151972 [file.py:287]``.  Digits are ASCII digits
only, and every number read from a prefix is bounded, so no prefix can make a
conversion raise or run long.
"""

from __future__ import annotations

import re
import time


_TS_RE = re.compile(r"([0-9]{4}-[0-9]{2}-[0-9]{2})[ T]([0-9]{2}:[0-9]{2}:[0-9]{2})(?:[.,]([0-9]{1,6}))?")
_RANK_RE = re.compile(r"(?<![A-Za-z_])(ATTN_CP|MOE_DP|DP|TP|PP|EP)([0-9]{1,6})(?![\w])")
_RAY_RE = re.compile(r"^\s*\(\s*[\w.-]+ pid=([0-9]{1,10})(?![0-9])")
FRACTION_DIGITS = 9  # nanoseconds; SGLang prints 3 (SGLANG_LOG_MS) and dictConfig at most 6


class BadTimestamp(ValueError):
    """A line prefix whose timestamp cannot be read (a fraction of a second that is too long, or not ASCII)."""

_prefix_cache: dict[str, tuple] = {}
_second_cache: dict[str, float | None] = {}
_CACHE_MAX = 8192
_CACHE_KEY_MAX = 256  # longer texts are read but not cached, so the caches stay small


def _epoch(date: str, hms: str) -> float | None:
    key = date + " " + hms
    v = _second_cache.get(key)
    if v is None and key not in _second_cache:
        if not key.isascii():  # strptime would read other scripts' digits
            return None
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
        if len(tags) > _CACHE_KEY_MAX:
            return r
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
        if j - 1 > FRACTION_DIGITS:
            raise BadTimestamp(f"the fraction of a second has {j - 1} digits (at most {FRACTION_DIGITS})")
        if not rest[1:j].isascii():
            raise BadTimestamp(f"the fraction of a second {rest[1:j]!r} is not in ASCII digits")
        if j > 1:
            frac = int(rest[1:j]) / (10 ** (j - 1))
            frac_text = rest[:j]
        i = j
    close = rest.find("]", i)
    tags = rest[i:close] if close >= 0 else rest[i:]
    out = (frac, frac_text, _ranks_of(tags) if tags.strip() else ())
    if len(rest) > _CACHE_KEY_MAX:
        return out
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
        if rest[:1] == "." and rest[1:4].isdigit() and rest[1:4].isascii() and not rest[4:5].isdigit():
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
            if len(head) > _CACHE_KEY_MAX:
                return (ts, day_sec + frac_text if frac_text else day_sec, ranks, ray_pid)
            if len(_ray_cache) > _CACHE_MAX:
                _ray_cache.clear()
            _ray_cache[head] = ray_pid
        return (ts, day_sec + frac_text if frac_text else day_sec, ranks, ray_pid)
    hit = _prefix_cache.get(prefix)
    if hit is None:
        hit = _parse_prefix_slow(prefix)
        if len(prefix) > _CACHE_KEY_MAX:
            return hit
        if len(_prefix_cache) > _CACHE_MAX:
            _prefix_cache.clear()
        _prefix_cache[prefix] = hit
    return hit


def line_time(line: str, within: int = 60) -> tuple[float | None, str]:
    """(epoch seconds, timestamp text) of the first timestamp in the first ``within`` characters of a line;
    (None, "") when there is none or it cannot be read."""
    tm = _TS_RE.search(line, 0, within)
    if tm is None:
        return None, ""
    try:
        return parse_prefix(line[:tm.end() + 1])[:2]
    except BadTimestamp:
        return None, ""


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
