"""When a process started: the half of its identity that tells it apart from a
later process given the same pid.

A start is kept in seconds since boot, from the kernel's start ticks in
``/proc/<pid>/stat``, which never change.  psutil's ``create_time()`` adds the
boot time to them, and Linux gives the boot time as whole seconds of the wall
clock, recomputed at each read: a step of the clock (NTP, a resumed VM,
``date -s``) moves every create time read afterwards by a second or more, and a
supervisor that recorded its child's create time before the step would then
take its own child for a stranger and never signal it.

Identities written by earlier versions hold wall-clock create times; they are
told apart by size (:data:`WALL_CLOCK_FLOOR`) and compared on the wall clock.
Without ``/proc`` every start comes from psutil's create time, consistently.
"""

from __future__ import annotations

import os

TOLERANCE_S = 0.05
# Above this a start is a wall-clock create time (every date since 1973); below
# it, seconds since boot (no machine stays up three years).
WALL_CLOCK_FLOOR = 1e8

_HAS_PROC_STAT = os.path.exists("/proc/self/stat")
_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def proc_stat(pid: int) -> tuple[bytes, float] | None:
    """(state letter, start) from one read of ``/proc/<pid>/stat``; state
    ``X`` when there is no such process; None without ``/proc``."""
    if not _HAS_PROC_STAT:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return (b"X", 0.0)
    try:
        # the command name may hold spaces and parentheses: fields start after the last ')'
        fields = data[data.rfind(b")") + 2 :].split()
        return fields[0], int(fields[19]) / _CLK_TCK
    except (IndexError, ValueError):
        return None


def start_of(pid: int) -> float | None:
    """The start of the process now holding ``pid``, or None when there is none."""
    st = proc_stat(pid)
    if st is not None:
        state, start = st
        return None if state in (b"X", b"x") else start
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except (psutil.Error, ValueError):
        return None


def same_start(recorded: float | None, observed: float | None) -> bool:
    """Whether two starts are the same moment; a wall-clock create time from
    an earlier version is compared on the wall clock."""
    if recorded is None or observed is None:
        return False
    if (recorded >= WALL_CLOCK_FLOOR) != (observed >= WALL_CLOCK_FLOOR):
        import psutil

        boot = psutil.boot_time()
        if recorded < WALL_CLOCK_FLOOR:
            recorded += boot
        else:
            observed += boot
    return abs(recorded - observed) <= TOLERANCE_S
