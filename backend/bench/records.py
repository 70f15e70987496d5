"""What an import yields: results, and problems that name the file, line and field."""

from __future__ import annotations

import json
import math
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


def num(value, *, path: str = "", line: int = 0, field: str = "") -> float | None:
    """A number from a JSON value or text; None for null, "", "n/a", NaN and negative
    sentinels are the caller's business.  Raises ``ValueError`` naming the field."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return None if isinstance(value, float) and math.isnan(value) else float(value)
    text = str(value).strip().rstrip("%").strip()
    if text.lower() in ("", "n/a", "na", "none", "null", "-", "nan", "not set"):
        return None
    if text.lower() in ("inf", "infinity", "+inf", "+infinity"):
        return math.inf
    try:
        return float(text.replace(",", ""))
    except ValueError:
        raise ValueError(f"{field or 'value'} is {value!r}, not a number") from None


def integer(value, **kw) -> int | None:
    f = num(value, **kw)
    if f is None or math.isinf(f):
        return None
    if f != int(f):
        raise ValueError(f"{kw.get('field') or 'value'} is {value!r}, not a whole number")
    return int(f)


def positive(value: float | None) -> float | None:
    """SGLang writes -1 (or 0) where it has no reading: that is N/A."""
    return value if value is not None and value > 0 else None
