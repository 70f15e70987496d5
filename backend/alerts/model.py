"""What the alert rules read and what they give.

The snapshots are plain values, filled in by :mod:`backend.flows.alerts` from the domains'
monitors (or by a test by hand); every time is epoch seconds and ``Snapshot.now`` is the clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Severity = Literal["info", "warning", "error"]
SEVERITIES = ("info", "warning", "error")


@dataclass(frozen=True)
class Thresholds:
    """Per-rule thresholds (the workspace's ``[alerts]`` table fills them in)."""

    accept_floor: float = 1.05  # accept_len at or below this is "stuck near 1.0"
    accept_window_s: float = 60.0  # ... for this long after ready
    slower_ratio: float = 0.95  # speculative tok/s below this share of the baseline is slower
    steady_window_s: float = 300.0  # ... over a window this long at one concurrency
    stall_s: float = 600.0  # a running regeneration that completed nothing for this long
    error_rate: float = 0.10  # failed share of the rows completed in the last error_window_s
    error_window_s: float = 600.0
    restart_loop: int = 3  # restart tries at which a server is restarting in a loop
    gpu_mem_fraction: float = 0.95
    gpu_idle_util: float = 5.0  # percent
    gpu_idle_s: float = 300.0
    disk_min_free_gb: float = 5.0


@dataclass(frozen=True)
class ServerState:
    """One server: its supervised process and, once ready, its decode readings."""

    name: str
    state: str  # the supervisor's state: RUNNING, STARTING, BACKOFF, EXITED, FATAL, STOPPED ...
    exit_code: int | None = None
    tries: int = 0  # restart tries of the current failure streak
    detail: str = ""
    spec_on: bool = False
    ready_at: float | None = None
    # (time, accept_len) of the current run's decode lines, oldest first
    accept: tuple[tuple[float, float], ...] = ()
    # (time, aggregate tok/s, running requests) of the current run's decode lines, oldest first
    speed: tuple[tuple[float, float, int], ...] = ()
    # baseline output tok/s measured without speculation, by concurrency
    baseline: dict[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class RegenState:
    """One regeneration job."""

    name: str
    running: bool
    started_at: float | None = None
    last_completion_at: float | None = None  # when done + failed last went up
    # (time, done, failed) readings of the progress log, oldest first
    points: tuple[tuple[float, int, int], ...] = ()
    eta_low_s: float | None = None
    eta_point_s: float | None = None
    eta_high_s: float | None = None
    deadline: float | None = None  # epoch seconds; None: no deadline set


@dataclass(frozen=True)
class GpuState:
    index: int
    mem_used: int | None = None  # bytes
    mem_total: int | None = None
    throttle: tuple[str, ...] = ()  # decoded reasons that slow it (thermal, power)
    util: tuple[tuple[float, float | None], ...] = ()  # (time, percent), oldest first
    held_by: tuple[str, ...] = ()  # running managed jobs using it


@dataclass(frozen=True)
class DiskState:
    path: str  # the folder outputs go to
    free_bytes: int
    total_bytes: int


@dataclass(frozen=True)
class Snapshot:
    now: float
    servers: tuple[ServerState, ...] = ()
    regens: tuple[RegenState, ...] = ()
    gpus: tuple[GpuState, ...] = ()
    disks: tuple[DiskState, ...] = ()


@dataclass(frozen=True)
class Alert:
    """A condition that holds now.  ``key`` (rule and subject) is what stays the same while it
    lasts: the history keeps one row per firing of a key, and mutes name a key or a rule."""

    rule: str
    subject: str
    severity: Severity
    title: str
    action: str  # what to do
    link: str  # the page path with its query, e.g. /servers?server=glm5
    since: float  # when the condition began (or was first seen)

    @property
    def key(self) -> str:
        return f"{self.rule}:{self.subject}"
