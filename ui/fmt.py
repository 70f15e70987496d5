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


def stopped_by_user(detail: str | None) -> bool:
    """Whether an EXITED process ended because someone asked it to stop.

    The supervisor writes ``stopped (exit code 0)`` / ``stopped (killed by SIGTERM)``
    for a stop that was asked for, and ``exit code N`` for a process that ended itself.
    """
    return (detail or "").startswith("stopped")


def state_badge(state: str | None, exit_code: int | None = None, *, stopped: bool = False) -> Badge:
    """One mapping everywhere: RUNNING green, STARTING/BACKOFF/STOPPING amber,
    EXITED 0 grey, STOPPED (by a user) grey, EXITED non-zero/FATAL red, UNKNOWN purple."""
    s = (state or "UNKNOWN").upper()
    if s == "RUNNING":
        return Badge("●", "green", "RUNNING")
    if s in ("STARTING", "BACKOFF", "STOPPING"):
        return Badge("◐", "orange", s)
    if s == "EXITED":
        if stopped:  # whatever the code a SIGTERM left, the user asked for it
            return Badge("■", "gray", "STOPPED")
        if exit_code == 0:
            return Badge("✓", "gray", "FINISHED (exit 0)")
        code = "?" if exit_code is None else str(exit_code)
        return Badge("✕", "red", f"EXITED {code}")
    if s == "FATAL":
        return Badge("✕", "red", "FATAL")
    if s == "NEVER":
        return Badge("○", "gray", "NOT STARTED")
    return Badge("?", "violet", s)


def view_badge(view) -> Badge:
    """The badge of a supervisor ProcessView (or None: never started)."""
    if view is None:
        return state_badge("NEVER")
    return state_badge(view.state.value, view.exit_code, stopped=stopped_by_user(view.detail))


def server_badge(view, status: str | None, *, health_at: float | None = None) -> Badge:
    """One badge for a server: the supervisor's state, sharpened by what the monitor sees.

    ``status`` is the monitor's (ready / starting / failed / unreachable / no-log);
    ``health_at`` is when its last /health answer (or failure) was read.  A server
    is "not answering" only when a /health check made after it became RUNNING
    failed, so an old failure from before ready never flashes up.
    """
    badge = view_badge(view)
    if view is None:
        return badge
    state = view.state.value
    if status == "failed" and state in ("STARTING", "RUNNING"):
        return Badge("✕", "red", "STARTUP FAILED" if state == "STARTING" else "FAILED")
    if state == "RUNNING" and status == "unreachable" and health_at is not None \
            and health_at > (view.state_since or 0):
        return Badge("✕", "red", "NOT ANSWERING")
    return badge


def state_text(state: str | None, exit_code: int | None = None, *, stopped: bool = False) -> str:
    b = state_badge(state, exit_code, stopped=stopped)
    return f"{b.icon} {b.label}"
