"""The process lifecycle as an explicit state machine.

Pure functions only: every decision takes the current time as an argument
(the supervisor passes its injectable clock), so the rules can be tested
without processes or sleeping.

Edges::

    NEVER/EXITED/FATAL/UNKNOWN/BACKOFF -> STARTING      start (or restart after backoff)
    STARTING -> RUNNING                                 readiness probe passed
    STARTING/RUNNING -> EXITED|BACKOFF|FATAL            the child ended by itself
    STARTING/RUNNING -> STOPPING -> EXITED              stop: SIGTERM (once the child's pid is
                                                        known), grace, SIGKILL; a restart asked
                                                        for with the stop then starts it again
    BACKOFF -> EXITED                                   stop while waiting to restart
    BACKOFF -> FATAL                                    no tries left
    STARTING/RUNNING/STOPPING -> UNKNOWN                gone without an exit record
    UNKNOWN -> EXITED                                   its exit record turned up
    any -> FATAL                                        could not spawn
"""

from __future__ import annotations

import signal
from dataclasses import dataclass

from specdeck_types.process import ProcState, ReadinessProbe, RestartPolicy

S = ProcState

TRANSITIONS: dict[ProcState, frozenset[ProcState]] = {
    S.NEVER: frozenset({S.STARTING, S.FATAL}),
    S.STARTING: frozenset({S.RUNNING, S.STOPPING, S.EXITED, S.BACKOFF, S.FATAL, S.UNKNOWN}),
    S.RUNNING: frozenset({S.STOPPING, S.EXITED, S.BACKOFF, S.FATAL, S.UNKNOWN}),
    S.BACKOFF: frozenset({S.STARTING, S.EXITED, S.FATAL}),
    S.STOPPING: frozenset({S.EXITED, S.UNKNOWN}),
    S.EXITED: frozenset({S.STARTING, S.FATAL}),
    S.FATAL: frozenset({S.STARTING, S.FATAL}),
    S.UNKNOWN: frozenset({S.STARTING, S.EXITED, S.FATAL}),
}

# States from which start() is allowed (a live process is never started twice).
STARTABLE = frozenset({S.NEVER, S.EXITED, S.FATAL, S.UNKNOWN, S.BACKOFF})
# States in which stop() has something to do.
STOPPABLE = frozenset({S.STARTING, S.RUNNING, S.BACKOFF})


class TransitionError(ValueError):
    """An edge the state machine does not have."""


def can_transition(src: ProcState, dst: ProcState) -> bool:
    return ProcState(dst) in TRANSITIONS[ProcState(src)]


def check_transition(src: ProcState, dst: ProcState) -> None:
    if not can_transition(src, dst):
        raise TransitionError(f"no transition {ProcState(src).value} -> {ProcState(dst).value}")


def describe_exit(code: int | None) -> str:
    """``exit code 3``, ``killed by SIGKILL``, or ``exit code unknown``."""
    if code is None:
        return "exit code unknown"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


@dataclass(frozen=True)
class ExitDecision:
    state: ProcState  # EXITED, BACKOFF or FATAL
    detail: str
    restart_at: float | None = None  # when BACKOFF ends


def decide_exit(state: ProcState, exit_code: int | None, policy: RestartPolicy, tries: int, now: float) -> ExitDecision:
    """What follows when the child of a process in ``state`` has ended.

    ``tries`` is the number of restarts already made since the last manual
    start.  A stop that was asked for always ends in EXITED; a clean exit
    (code 0) too.  A failure under ``on-failure`` goes to BACKOFF while tries
    remain, else FATAL.
    """
    state = ProcState(state)
    how = describe_exit(exit_code)
    if state == S.STOPPING:
        return ExitDecision(S.EXITED, f"stopped ({how})")
    if state == S.UNKNOWN:
        return ExitDecision(S.EXITED, f"{how} (recorded while unsupervised)")
    if state not in (S.STARTING, S.RUNNING, S.UNKNOWN):
        raise TransitionError(f"a process in {state.value} has no child to exit")
    if exit_code == 0 or policy.mode != "on-failure":
        return ExitDecision(S.EXITED, how)
    if tries < policy.max_tries:
        delay = policy.delay_for(tries + 1)
        return ExitDecision(
            S.BACKOFF, f"{how}; restart {tries + 1} of {policy.max_tries} in {delay:g} s", now + delay
        )
    return ExitDecision(S.FATAL, f"{how}; gave up after {tries} restart{'s' if tries != 1 else ''}")


def backoff_due(state_since: float, tries: int, policy: RestartPolicy, now: float) -> bool:
    """Whether a process in BACKOFF since ``state_since`` should restart now."""
    return now >= state_since + policy.delay_for(tries + 1)


def stop_overdue(stopping_since: float, grace_s: float, now: float) -> bool:
    """Whether the grace period after SIGTERM is over (time for SIGKILL)."""
    return now >= stopping_since + grace_s


def readiness_overdue(started_at: float | None, probe: ReadinessProbe, now: float) -> bool:
    return probe.kind != "none" and started_at is not None and now >= started_at + probe.timeout_s


def probe_due(last_probe_at: float | None, probe: ReadinessProbe, now: float) -> bool:
    return last_probe_at is None or now >= last_probe_at + probe.interval_s
