"""Alerts over a server's series: pure functions with the clock passed in.

The one that matters: speculation is on but the first decode lines after the
server became ready show accept_len at (or just above) 1.0.  That is what an
EAGLE-3 draft served with ``--speculative-algorithm EAGLE`` looks like: no
error anywhere, just no accepted draft tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Literal

ACCEPT_FLOOR = 1.05
FIRST_LINES = 3
WINDOW_S = 60.0


@dataclass(frozen=True)
class Alert:
    severity: Literal["error", "warning", "info"]
    code: str
    title: str
    message: str
    causes: tuple[str, ...]
    since: float | None  # when the condition was first met (log time)


def spec_accept_alert(points: Iterable[tuple[float | None, float | None]], *, spec_on: bool,
                      ready_ts: float | None, now: float, algorithm: str | None = None,
                      draft_arch: str | None = None, floor: float = ACCEPT_FLOOR,
                      first_lines: int = FIRST_LINES, window_s: float = WINDOW_S) -> Alert | None:
    """Error when accept_len ≤ ``floor`` over the first ``first_lines`` decode lines after
    ready, or over every decode line of the first ``window_s`` seconds once they have passed.

    ``points`` are (log time, accept_len) of decode lines in log order; lines
    without accept_len or not after ``ready_ts`` are ignored.  Returns None when
    speculation is off, the server is not ready, or the evidence is not in yet.
    """
    if not spec_on or ready_ts is None:
        return None
    # strictly after: log times have one-second resolution, and a previous run's
    # last lines can share the second in which a quick relaunch became ready
    after = [(ts, a) for ts, a in points if ts is not None and a is not None and ts > ready_ts]
    if not after:
        return None
    first = after[:first_lines]
    fired_at: float | None = None
    basis = ""
    used: list[tuple[float, float]] = []
    if len(first) >= first_lines and all(a <= floor for _, a in first):
        fired_at = first[-1][0]
        basis = f"the first {first_lines} decode lines after ready"
        used = first
    elif now - ready_ts >= window_s:
        # the window includes its end: a line logged at ready + window_s counts
        window = [(ts, a) for ts, a in after if ts <= ready_ts + window_s]
        # the window's mean (as the alerts engine's accept-stuck rule): a draft that accepts next to nothing
        # still shows an odd 1.07 on a small batch, and one such line must not hide the mistake
        if window and sum(a for _, a in window) / len(window) <= floor:
            fired_at = ready_ts + window_s
            basis = f"the first {window_s:.0f} s after ready ({len(window)} decode line(s))"
            used = window
    if fired_at is None:
        return None
    worst = max(a for _, a in used)  # of the lines the alert rests on, not of later ones
    mean = sum(a for _, a in used) / len(used)
    causes = []
    if algorithm == "EAGLE" and draft_arch and "Eagle3" in draft_arch:
        causes.append(f"The server runs --speculative-algorithm EAGLE with an EAGLE-3 draft ({draft_arch}): "
                      "it needs EAGLE3, otherwise the draft gets the final hidden state instead of the aux-layer "
                      "concatenation and its fc layer is skipped. Relaunch with EAGLE3.")
    else:
        causes.append("EAGLE vs EAGLE3: an EAGLE-3 draft served with --speculative-algorithm EAGLE gets the final "
                      "hidden state instead of the aux-layer concatenation; relaunch with EAGLE3.")
    causes.append("Aux layers: the draft's eagle_aux_hidden_state_layer_ids (or SGLang's default [2, L//2, L-3] "
                  "when it names none) differ from the layers it was trained on.")
    causes.append("The draft was trained for another target, or its d2t vocab mapping is missing.")
    return Alert(
        severity="error",
        code="accept-len-floor",
        title="Speculative decoding is not accepting any draft tokens",
        message=(f"accept_len averaged {mean:.2f}, at or below {floor:.2f} (highest {worst:.2f}), over {basis}: "
                 "every step yields one token, so speculation costs time and gains nothing."),
        causes=tuple(causes),
        since=fired_at,
    )
