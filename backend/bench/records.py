"""What an import yields: results, and problems that name the file, line and field."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass, field

from specdeck_types.bench import BenchResult


class BenchImportError(ValueError):
    """A file that could not be imported at all; the message names the file and line."""

    def __init__(self, path: str, line: int, message: str, field: str | None = None):
        self.path, self.line, self.field = path, line, field
        where = f"{path}:{line}: " + (f"{field}: " if field else "")
        super().__init__(where + message)
        self.message = message


class NotABenchmark(BenchImportError):
    """The file holds nothing Specdeck recognises as a benchmark result."""


@dataclass(frozen=True)
class Problem:
    """One part of a file that was skipped; the rest of the file was imported."""

    path: str
    line: int
    message: str
    field: str | None = None

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: " + (f"{self.field}: " if self.field else "") + self.message


@dataclass
class Parsed:
    """Results found in one file, in file order, and the parts that were skipped."""

    format: str
    results: list[BenchResult] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


RAW_LIMIT = 64 * 1024


def audit_raw(raw: str, record: dict) -> str:
    """The record as stored for audit.  A record of ``--output-details`` carries every
    request's lists (texts, latencies), megabytes per run: past :data:`RAW_LIMIT` the
    list-valued fields are left out, and the text says which."""
    if len(raw) <= RAW_LIMIT:
        return raw
    dropped = sorted(k for k, v in record.items() if isinstance(v, list))
    kept = {k: v for k, v in record.items() if k not in dropped}
    return json.dumps(kept) + f"\n(per-request lists left out of this copy: {', '.join(dropped)};" \
        f" the record was {len(raw):,} characters)"


# Past these a figure is not a measurement but a broken or hostile file (1e308 tok/s,
# a concurrency that does not fit SQLite's 64-bit integers).
MAX_FIGURE = 1e12
MAX_COUNT = 10**12

_PLAIN_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_GROUPED_NUMBER = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d+)?")  # 1,234.5 (thousands separators)
_NO_VALUE = ("", "n/a", "na", "none", "null", "-", "not set")
_INF = ("inf", "infinity", "+inf", "+infinity")


class BadValue(ValueError):
    """A value that is not a usable figure; the message names the field."""

    def __init__(self, field: str, shown: str, why: str):
        super().__init__(f"{field} is {shown}, {why}")
        self.field = field


def _parse_text_number(text: str, field: str, shown) -> float:
    if len(text) > 64:
        raise BadValue(field, _short(shown), "not a number")
    if _PLAIN_NUMBER.fullmatch(text):
        return float(text)
    if _GROUPED_NUMBER.fullmatch(text):
        return float(text.replace(",", ""))
    raise BadValue(field, _short(shown), "not a number")


def _short(value) -> str:
    r = repr(value)
    return r if len(r) <= 40 else r[:37] + "...'"


def num(value, *, field: str = "value", allow_inf: bool = False, nan_ok: bool = False,
        sentinel: bool = False, **_ignored) -> float | None:
    """A figure from a JSON value or report text, or None where the file gives none
    (null, "", "n/a", "not set").

    Raises :class:`BadValue` naming ``field`` for what cannot be a measurement:
    text that is not a number, infinity (unless ``allow_inf``: an unlimited request
    rate), NaN (unless ``nan_ok``: bench_serving's value of a statistic without a
    sample, read as None), a negative number (unless ``sentinel``: SGLang's -1 for
    "no reading", which the caller turns into None) and anything past
    :data:`MAX_FIGURE`.  Thousands separators ("1,234.5") are read."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        if abs(value) > MAX_COUNT:
            raise BadValue(field, _short(value), "too large to be a measurement")
        f = float(value)
    elif isinstance(value, float):
        f = value
    else:
        text = str(value).strip()
        if text.endswith("%"):
            text = text[:-1].strip()
        low = text.lower()
        if low in _NO_VALUE:
            return None
        if low in _INF:
            f = math.inf
        elif low in ("-inf", "-infinity"):
            f = -math.inf
        elif low == "nan":
            f = math.nan
        else:
            f = _parse_text_number(text, field, value)
    if math.isnan(f):
        if nan_ok:
            return None
        raise BadValue(field, "NaN", "not a measurement")
    if math.isinf(f):
        if f > 0 and allow_inf:
            return f
        raise BadValue(field, f"{'-' if f < 0 else ''}infinity", "not a finite number")
    if f < 0 and not (sentinel and f >= -1):
        raise BadValue(field, _short(value), "negative")
    if f > MAX_FIGURE:
        raise BadValue(field, _short(value), f"too large to be a measurement (over {MAX_FIGURE:g})")
    return f


def integer(value, *, field: str = "value", **kw) -> int | None:
    """A whole number (a count, a length, a concurrency); the same refusals as :func:`num`."""
    f = num(value, field=field, **{k: v for k, v in kw.items() if k in ("nan_ok", "sentinel")})
    if f is None:
        return None
    if f != int(f):
        raise BadValue(field, _short(value), "not a whole number")
    return int(f)


def positive(value: float | None) -> float | None:
    """SGLang writes -1 (or 0) where it has no reading: that is N/A."""
    return value if value is not None and value > 0 else None


def sentinel_positive(value, *, field: str) -> float | None:
    """An accept length as SGLang writes it: -1 or 0 for "no reading" is None."""
    return positive(num(value, field=field, sentinel=True))


# -- the last check before a result is stored ------------------------------------

def _figures(r: BenchResult):
    """(field name, value) of every number a result carries."""
    for part, obj in (("config", r.config), ("load", r.load), ("results", r.results)):
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            if dataclasses.is_dataclass(v):
                for g in dataclasses.fields(v):
                    yield f"{f.name}.{g.name}", getattr(v, g.name)
            else:
                yield f.name, v
    for name in ("source_line", "started_at", "ended_at", "created_at"):
        yield name, getattr(r, name)


def check_result(r: BenchResult) -> None:
    """Raise :class:`BadValue` for the first figure of ``r`` that must not be stored:
    non-finite (but an unlimited request rate), negative, or past the limits."""
    for name, v in _figures(r):
        if v is None or isinstance(v, (bool, str)):
            continue
        if isinstance(v, int):
            if abs(v) > MAX_COUNT and name not in ("source_line",):
                raise BadValue(name, repr(v), "too large to be a measurement")
            if v < 0:
                raise BadValue(name, repr(v), "negative")
            continue
        if isinstance(v, float):
            if name == "request_rate" and v == math.inf:
                continue
            if not math.isfinite(v):
                raise BadValue(name, repr(v), "not a finite number")
            if v < 0:
                raise BadValue(name, repr(v), "negative")
            if v > MAX_FIGURE and name not in ("started_at", "ended_at", "created_at"):
                raise BadValue(name, repr(v), "too large to be a measurement")
