"""Who may act, and when: a program that cannot start is refused before anything changes,
a supervisor that only reads never starts or signals, and a restart is recorded before its stop."""

from __future__ import annotations

import signal

import pytest

from backend.supervisor.supervisor import ActionRefused, SupervisorError
from specdeck_types.process import ProcState as S, RestartPolicy
from state import audit
from state.processes import ProcessRepo
from tests.supervisor.fakes import fake_spec as spec

MISSING = "the program (argv[0]) 'prog' was not found on PATH (/nowhere)"


def test_start_of_a_program_that_cannot_start_is_refused_before_starting(env):
    sup, clock, fos, _, store, _, tmp = env
    sup.sync_specs([spec(tmp)])
    fos.missing["prog"] = MISSING
    with pytest.raises(ActionRefused) as ei:
        sup.start("p", actor="alice", source="cli")
    assert str(ei.value) == f"p cannot start: {MISSING}"
    assert sup.view("p").state == S.NEVER and fos.launches == []
    (entry,) = audit.recent(store, 5)
    assert (entry.action, entry.outcome, entry.actor) == ("start", "refused", "alice")


def test_restart_that_cannot_start_leaves_the_running_process_alone(env):
    sup, clock, fos, _, _, _, tmp = env
    sup.sync_specs([spec(tmp)])
    sup.start("p")
    sup.poll()
    assert sup.view("p").state == S.RUNNING
    fos.missing["prog"] = MISSING
    with pytest.raises(ActionRefused, match="cannot start: .*; it was left as it is"):
        sup.restart("p")
    assert sup.view("p").state == S.RUNNING and fos.signals == []


def test_automatic_restart_of_a_vanished_program_is_fatal_with_the_reason(env):
    sup, clock, fos, _, _, _, tmp = env
    sup.sync_specs([spec(tmp, restart=RestartPolicy(mode="on-failure", max_tries=3, backoff_s=1))])
    sup.start("p")
    sup.poll()
    fos.exit("p", 1)
    sup.poll()
    assert sup.view("p").state == S.BACKOFF
    fos.missing["prog"] = MISSING
    clock.advance(1)
    sup.poll()
    v = sup.view("p")
    assert v.state == S.FATAL and v.detail == f"cannot start: {MISSING}"
    assert len(fos.launches) == 1


def test_spec_without_cwd_runs_in_the_default_folder(env):
    sup, clock, fos, _, _, make, tmp = env
    sup.sync_specs([spec(tmp)])
    sup.start("p")
    assert fos.launches[-1].cwd == str(tmp)  # run_dir's parent: the workspace folder
    other = make(default_cwd=tmp / "elsewhere")
    other.restart("p")
    assert fos.launches[-1].cwd == str(tmp / "elsewhere")


def test_a_reading_supervisor_never_starts_a_due_restart(env):
    sup, clock, fos, _, _, make, tmp = env
    sup.sync_specs([spec(tmp, restart=RestartPolicy(mode="on-failure", max_tries=3, backoff_s=1))])
    sup.start("p")
    sup.poll()
    fos.exit("p", 1)
    reader = make(act=False)  # records the exit ...
    assert reader.view("p").state == S.BACKOFF
    clock.advance(5)
    for _ in range(3):
        reader.poll()  # ... but starts nothing, however overdue
    assert reader.view("p").state == S.BACKOFF and len(fos.launches) == 1
    with pytest.raises(ActionRefused, match="only reads"):
        reader.start("p")
    sup.poll()  # one that acts does
    assert sup.view("p").state == S.STARTING and len(fos.launches) == 2


def test_a_reading_supervisor_neither_signals_nor_drops_a_restart_request(env):
    sup, clock, fos, _, store, make, tmp = env
    sup.sync_specs([spec(tmp, stop_grace_s=2)])
    sup.start("p")
    sup.poll()
    pid = fos.pid_of("p")
    fos.ignore_term.add(pid)
    sup.restart("p", wait=False)
    assert fos.signals == [(pid, signal.SIGTERM)]
    reader = make(act=False)
    clock.advance(5)
    reader.poll()  # grace long over: a reader still sends no SIGKILL
    assert fos.signals == [(pid, signal.SIGTERM)]
    fos.exit("p", -15)
    reader.poll()  # the exit is there, but recording it alone would lose the restart
    assert reader.view("p").state == S.STOPPING and ProcessRepo(store).get("p").pending_restart
    assert len(fos.launches) == 1
    sup.poll()
    v = sup.view("p")
    assert v.state == S.STARTING and len(fos.launches) == 2 and "restarted by" in v.detail


def test_restart_records_the_request_before_the_stop(env):
    """The caller may die right after its SIGTERM: the store already says 'start again'."""
    sup, clock, fos, _, store, make, tmp = env
    sup.sync_specs([spec(tmp, stop_grace_s=2)])
    sup.start("p")
    sup.poll()
    seen = []
    real_signal = fos.signal

    def signal_and_look(targets, sig, pgid=None):
        rec = ProcessRepo(store).get("p")
        seen.append((sig, rec.state, rec.pending_restart))
        return real_signal(targets, sig, pgid)

    fos.signal = signal_and_look
    assert sup.restart("p", actor="bob", source="cli", wait=True).state == S.STARTING
    assert seen[0] == (signal.SIGTERM, S.STOPPING, "restarted by bob via cli")
    assert len(fos.launches) == 2


def test_restart_with_wait_of_a_stopping_process_keeps_the_request(env):
    sup, clock, fos, _, store, make, tmp = env
    sup.sync_specs([spec(tmp, stop_grace_s=2)])
    sup.start("p")
    sup.poll()
    fos.ignore_term.add(fos.pid_of("p"))
    sup.stop("p", wait=False)
    assert sup.view("p").state == S.STOPPING
    v = sup.restart("p", wait=True)  # the fake sleep advances the clock past the grace period
    assert v.state == S.STARTING and len(fos.launches) == 2


def _exit_recorded_by_another_supervisor(sup, other):
    """``sup``'s wait for its stop sees the exit only as ``other`` (another process: the dashboard, a test's
    session) records it; ``other``'s start of the new run is held back until ``sup`` next sleeps.  Returns
    the held starts (called, they run)."""
    held = []
    real_spawn = other._spawn

    def spawn_later(rec, **kw):  # the exit is written; the new run's start comes a moment later
        held.append(lambda: real_spawn(rec, **kw))
        return None

    other._spawn = spawn_later
    sup._reconcile = lambda rec, now: other.poll()
    return held


def test_a_restart_waits_for_the_new_run_another_supervisor_starts_after_recording_the_exit(env):
    """Recording the exit and starting the new run are two writes; a restart that looked in between saw
    the old run EXITED and said the server did not start again, though it did a moment later."""
    sup, clock, fos, _, store, make, tmp = env
    sup.sync_specs([spec(tmp, stop_grace_s=2)])
    sup.start("p")
    sup.poll()
    old = sup.view("p").run_id
    other = make()
    held = _exit_recorded_by_another_supervisor(sup, other)
    real_sleep, real_wait = sup._sleep, sup._wait_stopped
    stopped = []

    def wait_stopped(name):  # returns once it sees the old run EXITED, the new one not started yet
        real_wait(name)
        stopped.append(name)

    def sleep(s):  # while the restart waits for its new run, the other supervisor's start goes through
        if stopped:
            while held:
                held.pop()()
        real_sleep(s)

    sup._wait_stopped, sup._sleep = wait_stopped, sleep
    v = sup.restart("p", wait=True)
    assert v.run_id != old and v.state == S.STARTING and len(fos.launches) == 2


def test_a_restart_whose_new_run_never_comes_says_so(env):
    sup, clock, fos, _, store, make, tmp = env
    sup.sync_specs([spec(tmp, stop_grace_s=2)])
    sup.start("p")
    sup.poll()
    other = make()
    held = _exit_recorded_by_another_supervisor(sup, other)
    with pytest.raises(SupervisorError, match=r"p did not start again \(state EXITED"):
        sup.restart("p", wait=True)
    assert held and len(fos.launches) == 1
