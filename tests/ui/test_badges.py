"""One status badge per process or server (ui.fmt)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ui import fmt


class _S(Enum):
    RUNNING = "RUNNING"
    STARTING = "STARTING"
    EXITED = "EXITED"


@dataclass
class _View:  # the fields of a supervisor ProcessView that the badges read
    state: _S
    exit_code: int | None = None
    detail: str = ""
    state_since: float = 100.0


def test_a_stop_asked_for_reads_differently_from_a_clean_finish():
    # details as backend.supervisor.machine.decide_exit writes them
    stopped_term = fmt.view_badge(_View(_S.EXITED, -15, "stopped (killed by SIGTERM)"))
    stopped_zero = fmt.view_badge(_View(_S.EXITED, 0, "stopped (exit code 0)"))
    finished = fmt.view_badge(_View(_S.EXITED, 0, "exit code 0"))
    failed = fmt.view_badge(_View(_S.EXITED, 3, "exit code 3"))
    assert stopped_term.label == stopped_zero.label == "STOPPED"
    assert stopped_term.colour == "gray"  # a SIGTERM the user asked for is not a failure
    assert finished.label == "FINISHED (exit 0)" and finished.colour == "gray"
    assert finished.label != stopped_zero.label
    assert failed.label == "EXITED 3" and failed.colour == "red"
    assert fmt.view_badge(None).label == "NOT STARTED"


def test_one_server_badge_and_no_not_answering_before_a_check_after_ready():
    running = _View(_S.RUNNING, state_since=100.0)
    ready = fmt.server_badge(running, "ready", health_at=101.0)
    assert ready.markdown() == ":green[● RUNNING]"
    # the last /health failure was read before the server became RUNNING: no flash
    assert fmt.server_badge(running, "unreachable", health_at=99.0).label == "RUNNING"
    assert fmt.server_badge(running, "unreachable", health_at=None).label == "RUNNING"
    # a check after ready that failed: the server stopped answering
    gone = fmt.server_badge(running, "unreachable", health_at=105.0)
    assert gone.label == "NOT ANSWERING" and gone.colour == "red"
    assert fmt.server_badge(_View(_S.STARTING), "unreachable", health_at=105.0).label == "STARTING"
    assert fmt.server_badge(_View(_S.STARTING), "failed").label == "STARTUP FAILED"
    assert fmt.server_badge(_View(_S.EXITED, -15, "stopped (killed by SIGTERM)"), "unreachable").label == "STOPPED"
