"""Runs of one server: where each starts, and which points and readings belong to the current one.

A server's log holds every run one after the other: the supervisor's wrapper
writes ``===== specdeck: NAME run ID starting at ...`` before each start, and
SGLang prints ``server_args=...`` when it reads its arguments.  The supervisor
knows the current run's id and start time as soon as it has spawned it, before
anything is logged.  A figure belongs to the run in which it was logged or
read; the previous run's figures must not stand for the new one while it loads.

Log times have one-second resolution.  A point belongs to a run when it was
logged strictly after the run's start: the previous run's last lines may share
the second of the restart, and a new run never decodes in its first second.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from backend.sglang.logparse import PhaseEvent


@dataclass(frozen=True)
class RunInfo:
    """What the supervisor knows of a server's current run."""

    run_id: str | None
    started_at: float | None  # wall-clock time the run's process was started
    live: bool  # the run's process is starting or running (not stopping, waiting to restart or ended)

    @classmethod
    def of(cls, view) -> "RunInfo | None":
        """From a supervisor ``ProcessView`` (None when the supervisor does not know the process)."""
        if view is None:
            return None
        state = getattr(view.state, "value", view.state)
        live = state in ("STARTING", "RUNNING") and not view.restart_pending
        return cls(view.run_id, view.started_at, live)


def run_starts(events: Iterable, launched_ts: float | None = None) -> list[float]:
    """Log times at which runs start, oldest first.

    ``events`` are the ingester's startup phase events; a run's start is a
    ``new_run`` event (the wrapper's header, or ``server_args=`` without one),
    and a ``server_args=`` line right after the header is the same run.
    ``launched_ts`` (the ingester's start of the current run) is added when the
    events do not end with it.
    """
    starts: list[float] = []
    group_has_start = False  # the current group of consecutive new_run events has its time
    prev_new = False
    for ev in events:
        is_new = isinstance(ev, PhaseEvent) and ev.new_run
        if is_new and not prev_new:
            group_has_start = False
        if is_new and not group_has_start and ev.ts is not None:
            starts.append(ev.ts)
            group_has_start = True
        prev_new = is_new
    if launched_ts is not None and (not starts or launched_ts > starts[-1]):
        starts.append(launched_ts)
    return starts


def current_run_start(log_start: float | None, run: RunInfo | None) -> float | None:
    """Where the current run begins: the later of its log header and the supervisor's start time."""
    cands = [t for t in (log_start, run.started_at if run is not None else None) if t is not None]
    return max(cands) if cands else None


def readings_boundary(log_start: float | None, run: RunInfo | None) -> float | None:
    """HTTP readings taken before this time were answered by a previous run's process.

    The log's start is a whole second (the run may have begun up to a second
    later), so its boundary is the end of that second.
    """
    cands = [t for t in (log_start + 1.0 if log_start is not None else None,
                         run.started_at if run is not None else None) if t is not None]
    return max(cands) if cands else None


def readings_after(readings: Sequence, t: float | None) -> list:
    """``readings`` with those taken before ``t`` replaced by None."""
    if t is None:
        return list(readings)
    return [r if r is not None and r.at >= t else None for r in readings]


def split_series(series: dict, start: float | None) -> dict:
    """The points of ``series`` (parallel lists with a ``ts`` column) logged after ``start``."""
    if start is None:
        return {k: list(v) for k, v in series.items()}
    ts = series["ts"]
    # the rings are in log order: find the first point of the run from the end
    i = len(ts)
    while i > 0 and ts[i - 1] is not None and ts[i - 1] > start:
        i -= 1
    return {k: list(v[i:]) for k, v in series.items()}
