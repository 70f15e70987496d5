from __future__ import annotations

import pytest

from backend.supervisor import machine
from specdeck_types.process import ProcState as S, ReadinessProbe, RestartPolicy


def test_every_state_has_edges_and_no_edge_leaves_a_live_process_unstoppable():
    assert set(machine.TRANSITIONS) == set(S)
    for src in (S.STARTING, S.RUNNING):
        assert machine.can_transition(src, S.STOPPING)
    assert not machine.can_transition(S.STOPPING, S.RUNNING)
    assert not machine.can_transition(S.RUNNING, S.STARTING)  # never started twice
    with pytest.raises(machine.TransitionError, match="RUNNING -> STARTING"):
        machine.check_transition(S.RUNNING, S.STARTING)


def test_startable_states_are_exactly_those_without_a_process():
    for st in S:
        assert (st in machine.STARTABLE) == (not st.is_active), st


@pytest.mark.parametrize("code, text", [(0, "exit code 0"), (3, "exit code 3"), (-9, "killed by SIGKILL"),
                                        (-15, "killed by SIGTERM"), (None, "exit code unknown")])
def test_describe_exit(code, text):
    assert machine.describe_exit(code) == text


def test_decide_exit_never_policy():
    never = RestartPolicy(mode="never")
    assert machine.decide_exit(S.RUNNING, 3, never, 0, 10.0).state == S.EXITED
    assert machine.decide_exit(S.RUNNING, 0, never, 0, 10.0).state == S.EXITED


def test_decide_exit_on_failure_counts_tries_then_fatal():
    p = RestartPolicy(mode="on-failure", max_tries=2, backoff_s=1.0, backoff_max_s=60)
    d = machine.decide_exit(S.RUNNING, 1, p, 0, 100.0)
    assert (d.state, d.restart_at) == (S.BACKOFF, 101.0)
    d = machine.decide_exit(S.STARTING, -11, p, 1, 100.0)
    assert (d.state, d.restart_at) == (S.BACKOFF, 102.0)  # doubled
    d = machine.decide_exit(S.RUNNING, 1, p, 2, 100.0)
    assert d.state == S.FATAL and "gave up after 2 restarts" in d.detail
    assert machine.decide_exit(S.RUNNING, 0, p, 0, 100.0).state == S.EXITED  # success is not a failure


def test_a_requested_stop_never_restarts():
    p = RestartPolicy(mode="on-failure", max_tries=5)
    d = machine.decide_exit(S.STOPPING, -9, p, 0, 1.0)
    assert d.state == S.EXITED and "SIGKILL" in d.detail
    with pytest.raises(machine.TransitionError):
        machine.decide_exit(S.EXITED, 1, p, 0, 1.0)


def test_time_rules():
    p = RestartPolicy(mode="on-failure", backoff_s=2.0, backoff_max_s=5.0)
    assert not machine.backoff_due(100.0, 0, p, 101.9)
    assert machine.backoff_due(100.0, 0, p, 102.0)
    assert not machine.backoff_due(100.0, 5, p, 104.9)  # capped at backoff_max_s
    assert machine.backoff_due(100.0, 5, p, 105.0)
    assert not machine.stop_overdue(10.0, 5.0, 14.99)
    assert machine.stop_overdue(10.0, 5.0, 15.0)
    probe = ReadinessProbe(kind="http", url="http://x", interval_s=2, timeout_s=30)
    assert not machine.readiness_overdue(0.0, probe, 29.0)
    assert machine.readiness_overdue(0.0, probe, 30.0)
    assert not machine.readiness_overdue(0.0, ReadinessProbe(), 1e9)
    assert machine.probe_due(None, probe, 0.0)
    assert not machine.probe_due(10.0, probe, 11.0)
    assert machine.probe_due(10.0, probe, 12.0)
