"""The supervisor driven by a fake clock, a fake spawner/killer and a fake prober."""

from __future__ import annotations

import signal

import pytest

from backend.supervisor.runfiles import RunPaths, read_json
from backend.supervisor.supervisor import ActionRefused, Supervisor, UnknownProcess
from specdeck_types.process import Kind, ProcessSpec, ProcState as S, ReadinessProbe, RestartPolicy
from state import audit
from state.processes import ProcessRepo
from state.store import Store
from tests.supervisor.fakes import FakeClock, FakeOS, FakeProber, fake_spec as spec


# ``env`` (a supervisor on fakes) comes from conftest.py.


def states(sup, name):
    return [(e.from_state, e.to_state) for e in sup.history(name)]


def test_start_poll_running_and_second_start_refused(env):
    sup, clock, fos, _, store, _, tmp = env
    sup.sync_specs([spec(tmp)])
    assert sup.view("p").state == S.NEVER
    v = sup.start("p", actor="alice", source="dashboard")
    assert v.state == S.STARTING
    assert fos.launches[0].argv == ("prog", "--flag")
    clock.advance(1)
    sup.poll()
    v = sup.view("p")
    assert v.state == S.RUNNING and v.ready and v.pid == fos.pid_of("p") and v.uptime_s == 1.0
    with pytest.raises(ActionRefused, match="already RUNNING"):
        sup.start("p", actor="bob", source="cli")
    assert len(fos.launches) == 1
    entries = audit.recent(store, 10)
    assert [(e.actor, e.source, e.action, e.outcome) for e in entries] == [
        ("bob", "cli", "start", "refused"), ("alice", "dashboard", "start", "ok")]


def test_unknown_name_is_refused_and_audited(env):
    sup, _, _, _, store, _, _ = env
    with pytest.raises(UnknownProcess, match="no managed process named 'ghost'"):
        sup.stop("ghost", actor="a", source="cli")
    assert audit.recent(store, 1)[0].outcome == "refused"


def test_exit_code_3_is_exited_3(env):
    sup, clock, fos, _, _, _, tmp = env
    sup.sync_specs([spec(tmp)])
    sup.start("p")
    sup.poll()
    clock.advance(2)
    fos.exit("p", 3)
    sup.poll()
    v = sup.view("p")
    assert (v.state, v.exit_code, v.pid) == (S.EXITED, 3, None)
    assert states(sup, "p") == [("NEVER", "STARTING"), ("STARTING", "RUNNING"), ("RUNNING", "EXITED")]


def test_on_failure_backoff_then_fatal(env):
    sup, clock, fos, _, _, _, tmp = env
    sup.sync_specs([spec(tmp, restart=RestartPolicy(mode="on-failure", max_tries=2, backoff_s=1, backoff_max_s=10))])
    sup.start("p")
    fos.exit("p", 1)
    sup.poll()
    assert sup.view("p").state == S.BACKOFF
    clock.advance(0.5)
    sup.poll()
    assert sup.view("p").state == S.BACKOFF and len(fos.launches) == 1  # not before the backoff
    clock.advance(0.5)
    sup.poll()
    assert sup.view("p").state == S.STARTING and sup.view("p").tries == 1
    fos.exit("p", 1)
    sup.poll()
    clock.advance(1.9)  # second backoff is 2 s
    sup.poll()
    assert sup.view("p").state == S.BACKOFF
    clock.advance(0.1)
    sup.poll()
    assert sup.view("p").tries == 2
    fos.exit("p", 2)
    sup.poll()
    v = sup.view("p")
    assert (v.state, v.exit_code, v.tries) == (S.FATAL, 2, 2)
    assert len(fos.launches) == 3
    clock.advance(100)
    sup.poll()
    assert len(fos.launches) == 3  # FATAL stays FATAL
    # A manual start resets the count.
    assert sup.start("p").tries == 0


def test_stop_sigterm_then_sigkill_after_grace(env):
    sup, clock, fos, _, _, _, tmp = env
    sup.sync_specs([spec(tmp, stop_grace_s=5.0)])
    sup.start("p")
    sup.poll()
    pid = fos.pid_of("p")
    fos.ignore_term.add(pid)
    v = sup.stop("p", actor="alice", source="dashboard", wait=False)
    assert v.state == S.STOPPING
    assert fos.signals == [(pid, signal.SIGTERM)]
    clock.advance(4.9)
    sup.poll()
    assert fos.signals == [(pid, signal.SIGTERM)] and sup.view("p").state == S.STOPPING
    clock.advance(0.1)
    sup.poll()  # grace over: SIGKILL, and the fake dies at once
    assert fos.signals[-1] == (pid, signal.SIGKILL)
    sup.poll()
    v = sup.view("p")
    assert (v.state, v.exit_code) == (S.EXITED, -9)
    assert states(sup, "p")[-2:] == [("RUNNING", "STOPPING"), ("STOPPING", "EXITED")]


def test_stop_wait_returns_exited_when_child_obeys_sigterm(env):
    sup, _, fos, _, store, _, tmp = env
    sup.sync_specs([spec(tmp, restart=RestartPolicy(mode="on-failure"))])
    sup.start("p")
    v = sup.stop("p", actor="carol", source="cli")
    assert (v.state, v.exit_code) == (S.EXITED, -15)  # a requested stop never restarts
    assert [s for _, s in fos.signals] == [signal.SIGTERM]
    with pytest.raises(ActionRefused, match="not running"):
        sup.stop("p")
    assert [e.outcome for e in audit.recent(store, 2)] == ["refused", "ok"]


def test_stop_during_backoff_cancels_restart(env):
    sup, clock, fos, _, _, _, tmp = env
    sup.sync_specs([spec(tmp, restart=RestartPolicy(mode="on-failure", max_tries=3, backoff_s=10))])
    sup.start("p")
    fos.exit("p", 1)
    sup.poll()
    assert sup.stop("p").state == S.EXITED
    clock.advance(100)
    sup.poll()
    assert len(fos.launches) == 1


def test_restart_stops_then_starts_new_run(env):
    sup, _, fos, _, _, _, tmp = env
    sup.sync_specs([spec(tmp)])
    first = sup.start("p")
    v = sup.restart("p", actor="dave", source="dashboard")
    assert v.state == S.STARTING and v.run_id != first.run_id
    assert len(fos.launches) == 2


def test_restart_without_wait_starts_after_stop_completes(env):
    sup, clock, fos, _, _, _, tmp = env
    sup.sync_specs([spec(tmp, stop_grace_s=2)])
    sup.start("p")
    sup.poll()
    fos.ignore_term.add(fos.pid_of("p"))
    assert sup.restart("p", wait=False).state == S.STOPPING
    clock.advance(2)
    sup.poll()
    sup.poll()
    assert sup.view("p").state == S.STARTING and len(fos.launches) == 2


def test_http_readiness(env):
    sup, clock, fos, prober, _, _, tmp = env
    probe = ReadinessProbe(kind="http", url="http://127.0.0.1:9/health", interval_s=1, timeout_s=10)
    sup.sync_specs([spec(tmp, readiness=probe)])
    prober.answers = [False, True]
    sup.start("p")
    sup.poll()  # submits probe 1 (False)
    sup.poll()  # collects False; not due again yet
    assert sup.view("p").state == S.STARTING
    assert prober.urls == ["http://127.0.0.1:9/health"]
    clock.advance(1)
    sup.poll()  # submits probe 2 (True)
    sup.poll()  # collects it
    v = sup.view("p")
    assert v.state == S.RUNNING and v.ready and "HTTP 200" in v.detail


def test_readiness_overdue_stays_starting_with_detail(env):
    sup, clock, _, _, _, _, tmp = env
    sup.sync_specs([spec(tmp, readiness=ReadinessProbe(kind="http", url="http://x/", timeout_s=5))])
    sup.start("p")
    clock.advance(6)
    sup.poll()
    v = sup.view("p")
    assert v.state == S.STARTING and "overdue" in v.detail


def test_log_readiness_ignores_text_before_the_run(env):
    sup, clock, fos, _, _, _, tmp = env
    log = tmp / "p.log"
    log.write_text("old run: READY\n")
    sup.sync_specs([spec(tmp, readiness=ReadinessProbe(kind="log", pattern=r"^READY$"))])
    fos.write_identity = False
    sup.start("p")
    launch = fos.launches[-1]
    # What the wrapper does: header, identity with the offset after it.
    from backend.supervisor.runfiles import Identity, write_identity
    with open(log, "a") as f:
        f.write("===== header mentioning READY\n")
    write_identity(launch.paths, Identity(launch.run_id, fos.pid_of("p"), fos.alive_procs[fos.pid_of("p")],
                                          fos.pid_of("p") - 1, fos.alive_procs[fos.pid_of("p")], clock(), log.stat().st_size))
    sup.poll()
    assert sup.view("p").state == S.STARTING
    with open(log, "a") as f:
        f.write("loading\nREA")
    sup.poll()
    assert sup.view("p").state == S.STARTING
    with open(log, "a") as f:
        f.write("DY\n")
    sup.poll()
    assert sup.view("p").state == S.RUNNING


def test_spawn_failure_is_fatal_with_detail(env):
    sup, _, fos, _, store, _, tmp = env
    sup.sync_specs([spec(tmp)])
    fos.spawn_error = OSError("no such interpreter")
    with pytest.raises(Exception, match="no such interpreter"):
        sup.start("p")
    v = sup.view("p")
    assert v.state == S.FATAL and "could not spawn" in v.detail
    assert audit.recent(store, 1)[0].outcome == "error"


def test_spec_change_applies_at_next_start(env):
    sup, _, fos, _, _, _, tmp = env
    sup.sync_specs([spec(tmp)])
    sup.start("p")
    changed = ProcessSpec(name="p", kind=Kind.OTHER, argv=("prog", "--new"), log_path=str(tmp / "p.log"))
    sup.sync_specs([changed])
    v = sup.view("p")
    assert v.spec.argv == ("prog", "--flag") and v.spec_pending
    sup.stop("p")
    sup.start("p")
    assert fos.launches[-1].argv == ("prog", "--new")
    v = sup.view("p")
    assert v.spec.argv == ("prog", "--new") and not v.spec_pending


def test_sync_prunes_removed_idle_records_but_keeps_running_ones(env):
    sup, _, _, _, _, _, tmp = env
    sup.sync_specs([spec(tmp, "a"), spec(tmp, "b")])
    sup.start("b")
    sup.sync_specs([])
    assert sup.names() == ["b"]
    with pytest.raises(ValueError, match="duplicate"):
        sup.sync_specs([spec(tmp, "a"), spec(tmp, "a")])


def test_new_supervisor_adopts_alive_records_exit_and_unknown(env):
    sup, clock, fos, _, store, make, tmp = env
    sup.sync_specs([spec(tmp, "alive"), spec(tmp, "ended"), spec(tmp, "lost")])
    for n in ("alive", "ended", "lost"):
        sup.start(n)
    sup.poll()
    sup.close()
    # Meanwhile: one ends (its wrapper writes the exit file), one vanishes without a trace.
    fos.exit("ended", 7)
    lost = fos.pid_of("lost")
    fos.alive_procs.pop(lost)
    fos.alive_procs.pop(lost - 1)
    RunPaths.for_name(tmp / "run", "lost").exit.unlink(missing_ok=True)
    again = make()
    v = {x.name: x for x in again.views()}
    assert v["alive"].state == S.RUNNING and v["alive"].pid == fos.pid_of("alive")
    assert (v["ended"].state, v["ended"].exit_code) == (S.EXITED, 7)
    assert v["lost"].state == S.UNKNOWN and "no exit code was recorded" in v["lost"].detail
    # No writes when nothing changed.
    before = ProcessRepo(store).version()
    again.poll()
    again.poll()
    assert ProcessRepo(store).version() == before
    again.close()


def test_reused_pid_is_not_adopted(env):
    sup, clock, fos, _, store, make, tmp = env
    sup.sync_specs([spec(tmp)])
    sup.start("p")
    sup.poll()
    pid = fos.pid_of("p")
    sup.close()
    # The pid now belongs to a different process (other create time); the wrapper is gone.
    fos.alive_procs[pid] = fos.alive_procs[pid] + 500
    fos.alive_procs.pop(pid - 1)
    again = make()
    v = again.view("p")
    assert v.state == S.UNKNOWN
    with pytest.raises(ActionRefused):
        again.stop("p")
    assert fos.signals == []  # never signalled
    again.close()


def test_run_files_live_in_a_folder_per_name(env):
    sup, _, fos, _, _, _, tmp = env
    sup.sync_specs([spec(tmp, "x")])
    sup.start("x")
    assert fos.launches[0].paths.dir == tmp / "run" / "x"
    ident = read_json(fos.launches[0].paths.identity)
    assert ident["run_id"] == fos.launches[0].run_id


def test_loop_polls_in_the_background_and_stop_joins(env):
    import threading
    import time

    from backend.supervisor.loop import SupervisorLoop

    sup, clock, fos, prober, _, _, tmp = env
    sup.sync_specs([spec(tmp)])
    sup.start("p")
    before = threading.active_count()
    loop = SupervisorLoop(sup, interval_s=0.01)
    loop.start()
    loop.start()  # idempotent: still one thread
    assert threading.active_count() == before + 1
    deadline = time.monotonic() + 10
    # a poll sets the state before the loop counts it: wait for both
    while (sup.view("p").state != S.RUNNING or loop.polls < 1) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sup.view("p").state == S.RUNNING and loop.polls >= 1
    loop.stop()
    assert not loop.running and threading.active_count() == before
    sup.close()
    assert prober.closed


# -- stops that another supervisor finishes, deferred SIGTERM, persisted restarts --


def test_restart_without_wait_survives_another_supervisor_finishing_the_stop(env):
    sup, clock, fos, _, store, make, tmp = env
    sup.sync_specs([spec(tmp, stop_grace_s=2)])
    sup.start("p")
    sup.poll()
    fos.ignore_term.add(fos.pid_of("p"))
    assert sup.restart("p", actor="erin", source="dashboard", wait=False).state == S.STOPPING
    assert ProcessRepo(store).get("p").pending_restart  # the intent is in the store, not in memory
    # A one-shot command-line supervisor is the one that sees the stop through.
    other = make()
    clock.advance(2)
    other.poll()  # grace over: SIGKILL
    other.poll()  # the exit record: EXITED, then the requested start
    v = other.view("p")
    assert v.state == S.STARTING and len(fos.launches) == 2 and "restarted by erin" in v.detail
    assert ProcessRepo(store).get("p").pending_restart is None
    other.close()
    # The first supervisor starts nothing more, neither now nor after a later explicit stop.
    sup.poll()
    assert len(fos.launches) == 2
    assert sup.stop("p", wait=True).state == S.EXITED
    for _ in range(3):
        clock.advance(1)
        sup.poll()
    assert sup.view("p").state == S.EXITED and len(fos.launches) == 2


def test_explicit_stop_cancels_a_pending_restart(env):
    sup, clock, fos, _, store, _, tmp = env
    sup.sync_specs([spec(tmp, stop_grace_s=2)])
    sup.start("p")
    sup.poll()
    fos.ignore_term.add(fos.pid_of("p"))
    sup.restart("p", wait=False)
    v = sup.stop("p", wait=False)  # already stopping: not refused, and the restart is off
    assert v.state == S.STOPPING and ProcessRepo(store).get("p").pending_restart is None
    clock.advance(2)
    sup.poll()
    sup.poll()
    assert sup.view("p").state == S.EXITED and len(fos.launches) == 1


def test_restart_of_a_stopping_process_starts_it_once_stopped(env):
    sup, clock, fos, _, _, _, tmp = env
    sup.sync_specs([spec(tmp, stop_grace_s=2)])
    sup.start("p")
    sup.poll()
    fos.ignore_term.add(fos.pid_of("p"))
    sup.stop("p", wait=False)
    assert sup.restart("p", wait=False).state == S.STOPPING
    clock.advance(2)
    sup.poll()
    sup.poll()
    assert sup.view("p").state == S.STARTING and len(fos.launches) == 2


def test_stop_before_the_child_reported_its_pid_does_not_block(env):
    sup, clock, fos, _, store, _, tmp = env
    sup.sync_specs([spec(tmp, stop_grace_s=5)])
    fos.write_identity = False  # the wrapper has not reported its child yet
    sup.start("p")
    t0 = clock()
    v = sup.stop("p", actor="frank", source="dashboard", wait=False)
    assert v.state == S.STOPPING and v.pid is None
    assert clock() == t0  # no waiting on the caller's thread
    assert fos.signals == []
    clock.advance(60)  # long past the grace period: still nothing may be SIGKILLed
    sup.poll()
    assert fos.signals == [] and sup.view("p").state == S.STOPPING
    # The identity appears; the next poll delivers SIGTERM, then SIGKILL only after the grace.
    launch = fos.launches[-1]
    pid = fos.pid_of("p")
    fos.ignore_term.add(pid)
    from backend.supervisor.runfiles import Identity, write_identity
    ct = fos.alive_procs[pid]
    write_identity(launch.paths, Identity(launch.run_id, pid, ct, pid - 1, ct, ct, 0))
    sup.poll()
    assert fos.signals == [(pid, signal.SIGTERM)]
    assert ProcessRepo(store).get("p").term_at == clock()
    clock.advance(4.9)
    sup.poll()
    assert fos.signals == [(pid, signal.SIGTERM)]
    clock.advance(0.1)
    sup.poll()
    assert fos.signals[-1] == (pid, signal.SIGKILL)
    sup.poll()
    assert (sup.view("p").state, sup.view("p").exit_code) == (S.EXITED, -9)


def test_stop_wait_of_a_starting_process_whose_wrapper_never_reports(env):
    sup, clock, fos, _, _, _, tmp = env
    sup.sync_specs([spec(tmp)])
    fos.write_identity = False
    sup.start("p")
    wrapper = fos.pid_of("p") - 1
    fos.alive_procs.pop(wrapper)  # the wrapper died before starting the child
    fos.alive_procs.pop(wrapper + 1)
    v = sup.stop("p", wait=True)  # not refused, and it does not wait for an identity that never comes
    assert not v.state.is_active and "without starting the child" in v.detail
    assert fos.signals == []


def test_stop_by_another_supervisor_reads_the_exit_record_before_signalling(env):
    sup, clock, fos, _, _, make, tmp = env
    sup.sync_specs([spec(tmp, stop_grace_s=1)])
    sup.start("p")
    sup.poll()
    pid = fos.pid_of("p")
    fos.ignore_term.add(pid)
    sup.stop("p", wait=False)
    sup.close()
    fos.exit("p", 0)  # it ended meanwhile; its pid may belong to anything now
    fos.alive_procs[pid] = 1.0  # a stranger with the same pid and another create time
    fos.signals.clear()
    clock.advance(30)
    other = make()
    v = other.view("p")
    assert (v.state, v.exit_code) == (S.EXITED, 0)
    assert fos.signals == []
    other.close()


class _SlowProber:
    """Answers on a thread after a short delay, like a real HTTP check."""

    def __init__(self, answer: bool = True, delay_s: float = 0.05):
        from concurrent.futures import ThreadPoolExecutor

        self.pool = ThreadPoolExecutor(2)
        self.answer, self.delay_s = answer, delay_s
        self.timeouts: list[float] = []

    def submit(self, url, timeout_s):
        import time as _time

        self.timeouts.append(timeout_s)
        return self.pool.submit(lambda: (_time.sleep(self.delay_s), self.answer)[1])

    def close(self):
        self.pool.shutdown(wait=True)


def test_adopt_runs_due_http_probes_synchronously(env):
    sup, clock, fos, _, store, _, tmp = env
    probe = ReadinessProbe(kind="http", url="http://127.0.0.1:9/health", interval_s=5, timeout_s=60)
    sup.sync_specs([spec(tmp, readiness=probe)])
    sup.start("p")
    sup.close()
    # A one-shot supervisor (a command-line call): construct, read, close.
    prober = _SlowProber()
    one_shot = Supervisor(store, tmp / "run", clock=clock, spawner=fos, killer=fos, prober=prober, sleep=clock.sleep)
    v = one_shot.view("p")
    one_shot.close()
    assert v.state == S.RUNNING and "HTTP 200" in v.detail
    assert prober.timeouts and max(prober.timeouts) <= 0.5


def test_poll_with_sync_probes_and_without(env, monkeypatch):
    from backend.supervisor import ticking

    # the one-shot wait (0.5 s) made long: a loaded machine can run the prober's thread late, and this
    # test is about whether the poll waits at all, not about how long it may
    monkeypatch.setattr(ticking, "_SYNC_PROBE_S", 10.0)
    sup, clock, fos, _, store, _, tmp = env
    probe = ReadinessProbe(kind="http", url="http://127.0.0.1:9/health", interval_s=5, timeout_s=60)
    sup.sync_specs([spec(tmp, readiness=probe)])
    prober = _SlowProber(delay_s=0.3)
    s2 = Supervisor(store, tmp / "run", clock=clock, spawner=fos, killer=fos, prober=prober, sleep=clock.sleep)
    s2.start("p")
    s2.poll()  # the loop's poll never waits on the network
    assert s2.view("p").state == S.STARTING
    clock.advance(5)
    s2.poll(sync_probes=True)
    assert s2.view("p").state == S.RUNNING
    s2.close()
