"""Number and state formatting shared by every page (pure functions).

Conventions (UX.md): tok/s one decimal, accept_len two, percentages without
decimals unless below 10, memory in GiB with one decimal, durations as
``2 h 05 m``, ETA as a range, counts with thousands separators, and a missing
value is ``N/A`` (never 0).
"""

from __future__ import annotations

import math
import re
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


# -- Markdown of data -------------------------------------------------------------
#
# Prompts, answers, log lines and file contents are shown as Markdown, and an image in
# Markdown (``![x](http://host/t.png)``, or ``![x][ref]`` / ``![ref]`` with a ``[ref]: url``
# definition) is fetched by the viewer's browser as soon as the text is drawn: a tracking
# pixel in a model's answer would tell its author who looks at the samples, and from where.
# Streamlit already escapes HTML and neutralises ``javascript:`` links; :func:`data_markdown`
# takes care of images.  Every image syntax starts with ``![``, so ``![`` becomes ``!\[``:
# the text then shows as written.  Code (fenced blocks and code spans) shows as written
# anyway, so it is left as it is, but only where the code is certain: wherever a construct
# might make the renderer read the text otherwise (raw HTML, math, directives, links that
# could swallow a backtick), the text is escaped whole, code included.

_LINE_END = re.compile(r"(\r\n|\r|\n)")  # CommonMark's line endings (not those of str.splitlines)
_FENCE_OPEN = re.compile(r"(`{3,}|~{3,})(.*)\Z", re.S)  # at column 0 only: a fence no container can close
# From a line that may open a block whose end this does not follow (HTML, math, a directive
# container, a fence indented or inside a list or quote, which its container may close) to the
# end, everything is escaped.
_UNFOLLOWED = re.compile(r" {0,3}(?:<|\$\$|:::)|[ \t>*+\-\d.)]*(?:`{3,}|~{3,})")
# constructs that may take a backtick into themselves before a code span can start there
_SWALLOW = re.compile(r"[<$@]|\][(\[:]|\[\^|://|www\.|:[A-Za-z][\w-]*[\[{]", re.I)


def _fence_closes(line: str, fence: tuple[str, int]) -> bool:
    char, size = fence
    return re.fullmatch(rf" {{0,3}}{re.escape(char)}{{{size},}}[ \t]*", line) is not None


def _code_spans(line: str) -> tuple[list[tuple[int, int]], bool]:
    """The code spans of one line as CommonMark pairs backtick runs, and whether a run was left unpaired."""
    spans: list[tuple[int, int]] = []
    unpaired = False
    i, n = 0, len(line)
    while i < n:
        c = line[i]
        if c == "\\":  # an escaped character: a backtick after it opens nothing
            i += 2
            continue
        if c != "`":
            i += 1
            continue
        j = i
        while j < n and line[j] == "`":
            j += 1
        size, k, close = j - i, j, None
        while k < n:  # the next run of exactly as many backticks closes (backslashes do not count inside)
            if line[k] != "`":
                k += 1
                continue
            m = k
            while m < n and line[m] == "`":
                m += 1
            if m - k == size:
                close = k
                break
            k = m
        if close is None:
            unpaired = True
            i = j
        else:
            spans.append((i, close + size))
            i = close + size
    return spans, unpaired


def _escape(text: str) -> str:
    return text.replace("![", "!\\[")


def _escape_outside(line: str, spans: list[tuple[int, int]]) -> str:
    out, at = [], 0
    for a, b in spans:
        out += [_escape(line[at:a]), line[a:b]]
        at = b
    out.append(_escape(line[at:]))
    return "".join(out)


def _paragraph(lines: list[str]) -> list[str]:
    """Lines between blank lines (and fences): their code spans kept when every backtick run pairs
    up within its own line, no span holds a table's ``|``, and nothing before a span could take its
    backticks; otherwise every ``![`` of them is escaped."""
    found = [_code_spans(line) for line in lines]
    keep = all(not unpaired and not any("|" in line[a:b] for a, b in spans)
               for line, (spans, unpaired) in zip(lines, found))
    if keep:
        before = []  # the text outside the spans up to the last span: what could reach into one
        last = max((i for i, (spans, _) in enumerate(found) if spans), default=-1)
        for line, (spans, _) in zip(lines[:last + 1], found[:last + 1]):
            at = 0
            for a, b in spans:
                before.append(line[at:a])
                at = b
            before.append(line[at:] + "\n")
        if last >= 0:
            before[-1] = ""  # after the last span of the last line with one: nothing follows to reach
        keep = _SWALLOW.search("".join(before)) is None
    return [_escape_outside(line, spans if keep else []) for line, (spans, _) in zip(lines, found)]


def data_markdown(text: object) -> str:
    """``text`` (an answer, a prompt, a log line, a file's content) as Markdown that loads nothing:
    every image is shown as its text; code blocks and code spans are left as they are."""
    s = "" if text is None else str(text)
    if "![" not in s:
        return s
    parts = _LINE_END.split(s)
    lines, ends = parts[0::2], parts[1::2] + [""]
    out = list(lines)
    fence: tuple[str, int] | None = None
    raw = False
    para: list[int] = []

    def flush() -> None:
        for i, line in zip(para, _paragraph([lines[i] for i in para])):
            out[i] = line
        para.clear()

    for i, line in enumerate(lines):
        if fence is not None:  # code: as it is
            if _fence_closes(line, fence):
                fence = None
            continue
        if raw:
            out[i] = _escape(line)
            continue
        m = _FENCE_OPEN.match(line)
        if m and not (m.group(1)[0] == "`" and "`" in m.group(2)):  # a backtick fence's info has none
            flush()
            fence = (m.group(1)[0], len(m.group(1)))
            continue
        if _UNFOLLOWED.match(line):
            flush()
            raw = True
            out[i] = _escape(line)
            continue
        if not line.strip(" \t"):
            flush()
            continue
        para.append(i)
    flush()
    return "".join(line + end for line, end in zip(out, ends))
