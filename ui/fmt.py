"""Number and state formatting shared by every page (pure functions).

Conventions (UX.md): tok/s one decimal, accept_len two, percentages without
decimals unless below 10, memory in GiB with one decimal, durations as
``2 h 05 m``, ETA as a range, counts with thousands separators, and a missing
value is ``N/A`` (never 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

NA = "N/A"
GIB = 1024**3


def _missing(v: float | int | None) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def tok_s(v: float | None) -> str:
    return NA if _missing(v) else f"{v:,.1f} tok/s"


def accept_len(v: float | None) -> str:
    return NA if _missing(v) else f"{v:.2f}"


def pct(v: float | None) -> str:
    """``v`` is a percentage (0-100)."""
    if _missing(v):
        return NA
    return f"{v:.1f}%" if abs(v) < 10 and v != 0 else f"{v:.0f}%"


def gib(nbytes: float | None) -> str:
    return NA if _missing(nbytes) else f"{nbytes / GIB:,.1f} GiB"


def count(v: int | None) -> str:
    return NA if _missing(v) else f"{int(v):,}"


def duration(seconds: float | None) -> str:
    """``2 h 05 m``, ``3 m 07 s``, ``42 s``, ``2 d 03 h``."""
    if _missing(seconds):
        return NA
    s = int(max(0, seconds))
    d, rem = divmod(s, 86400)
    h, rem = divmod(rem, 3600)
    m, sec = divmod(rem, 60)
    if d:
        return f"{d} d {h:02d} h"
    if h:
        return f"{h} h {m:02d} m"
    if m:
        return f"{m} m {sec:02d} s"
    return f"{sec} s"


def eta_range(low_s: float | None, high_s: float | None) -> str:
    """``31-47 h`` style range, in the unit of the larger end."""
    if _missing(low_s) or _missing(high_s):
        return NA
    hi = max(low_s, high_s)
    lo = min(low_s, high_s)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if hi >= size * 2:
            return f"{lo / size:.0f}-{hi / size:.0f} {unit}"
    return f"{lo:.0f}-{hi:.0f} s"


def age(seconds: float | None) -> str:
    if _missing(seconds):
        return "never"
    return f"{duration(seconds)} ago" if seconds >= 1 else "just now"


@dataclass(frozen=True)
class Badge:
    icon: str
    colour: str  # streamlit colour name for :colour[...] markdown
    label: str

    def markdown(self) -> str:
        return f":{self.colour}[{self.icon} {self.label}]"


def state_badge(state: str | None, exit_code: int | None = None) -> Badge:
    """One mapping everywhere: RUNNING green, STARTING/BACKOFF/STOPPING amber,
    EXITED 0 grey, EXITED non-zero/FATAL red, UNKNOWN purple."""
    s = (state or "UNKNOWN").upper()
    if s == "RUNNING":
        return Badge("●", "green", "RUNNING")
    if s in ("STARTING", "BACKOFF", "STOPPING"):
        return Badge("◐", "orange", s)
    if s == "EXITED":
        if exit_code == 0:
            return Badge("○", "gray", "EXITED 0")
        code = "?" if exit_code is None else str(exit_code)
        return Badge("✕", "red", f"EXITED {code}")
    if s == "FATAL":
        return Badge("✕", "red", "FATAL")
    if s == "NEVER":
        return Badge("○", "gray", "NOT STARTED")
    return Badge("?", "violet", s)


def state_text(state: str | None, exit_code: int | None = None) -> str:
    b = state_badge(state, exit_code)
    return f"{b.icon} {b.label}"
