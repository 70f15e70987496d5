"""What a log tail on a page shows: the dashboard's own probe requests hidden, and how old
the newest line is.

A server's log holds one access line per HTTP request; the dashboard's monitor asks
``/health``, ``/metrics`` and ``/server_info`` (or ``/get_server_info``) every few
seconds, so on a quiet server most lines are its own probes (1,565 of 4,394 in one
real log), and while it starts every probe answers 503.  :func:`filter_probe_lines`
drops those lines, whatever their status, and only those (the status line above the
log says whether the probes succeed)::

    [2025-01-01 10:00:00] INFO:     127.0.0.1:51234 - "GET /health HTTP/1.1" 200 OK
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

# the paths backend.sglang.client polls; a user's own requests (/generate, /v1/...) stay
PROBE_PATHS = ("/health", "/metrics", "/server_info", "/get_server_info")
_PROBE_RE = re.compile(
    r'"(?:GET|HEAD) (?:' + "|".join(re.escape(p) for p in PROBE_PATHS) + r')(?:\?[^" ]*)? HTTP/\d(?:\.\d)?"')


def is_probe_line(line: str) -> bool:
    """True for an access-log line of one of the dashboard's own probe requests."""
    return _PROBE_RE.search(line) is not None


@dataclass(frozen=True)
class LogView:
    lines: list[str]  # the lines to show, oldest first
    hidden: int  # probe lines left out


def filter_probe_lines(lines: list[str] | tuple[str, ...], show_probes: bool = False) -> LogView:
    """``lines`` without the dashboard's probe requests (unless ``show_probes``)."""
    if show_probes:
        return LogView(list(lines), 0)
    kept = [line for line in lines if not is_probe_line(line)]
    return LogView(kept, len(lines) - len(kept))


def newest_line_age(path: str | Path, now: float | None = None) -> float | None:
    """Seconds since the log file was last written (its newest line), or None when it is missing."""
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        return None
    return max(0.0, (time.time() if now is None else now) - mtime)
