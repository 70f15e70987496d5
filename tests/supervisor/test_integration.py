"""The supervisor with real wrappers and real children (small python -c scripts)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import textwrap
import time

import psutil
import pytest

from backend.supervisor.runfiles import read_json
from backend.supervisor.starts import start_of
from backend.supervisor.supervisor import ActionRefused, SupervisorError
from specdeck_types.process import ProcState as S, ReadinessProbe, RestartPolicy
from state import audit
from tests.supervisor.conftest import PY, gone, wait_for

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SLEEPER = "import time\nprint('up', flush=True)\ntime.sleep(120)"


def _state(sup, name):
    return sup.view(name).state


@pytest.mark.timeout(60)
def test_child_exiting_3_shows_exited_3_and_log_is_appended(real):
    sup = real.supervisor()
    sup.sync_specs([real.spec("three", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)")])
    sup.start("three")
    wait_for(lambda: _state(sup, "three") == S.EXITED, poll=sup.poll)
    v = sup.view("three")
    assert v.exit_code == 3 and v.detail == "exit code 3"
    sup.start("three")
    wait_for(lambda: _state(sup, "three") == S.EXITED, poll=sup.poll)
    text = open(v.log_path).read()
    assert text.count("starting at") == 2 and text.count("exit code 3") == 2
    assert text.count("out\n") == 2 and text.count("err\n") == 2
    exit_rec = read_json(real.run_dir / "three" / "exit.json")
    assert exit_rec["exit_code"] == 3 and exit_rec["run_id"] == sup.view("three").run_id


@pytest.mark.timeout(60)
def test_child_ignoring_sigterm_is_killed_after_grace(real):
    sup = real.supervisor()
    code = textwrap.dedent("""
        import signal, time
        signal.signal(signal.SIGTERM, lambda *a: print('got SIGTERM, ignoring', flush=True))
        print('ready', flush=True)
        time.sleep(120)
    """)
    sup.sync_specs([real.spec("stubborn", code, stop_grace_s=1.0,
                              readiness=ReadinessProbe(kind="log", pattern="^ready$"))])
    sup.start("stubborn")
    wait_for(lambda: _state(sup, "stubborn") == S.RUNNING, poll=sup.poll)
    pid = sup.view("stubborn").pid
    t0 = time.monotonic()
    v = sup.stop("stubborn", actor="tester", source="test", wait=True)
    elapsed = time.monotonic() - t0
    assert (v.state, v.exit_code) == (S.EXITED, -signal.SIGKILL)
    assert elapsed >= 1.0  # not killed before the grace period
    assert gone(pid)
    assert "got SIGTERM, ignoring" in open(v.log_path).read()
    hist = [(e.from_state, e.to_state) for e in sup.history("stubborn")]
    assert hist[-2:] == [("RUNNING", "STOPPING"), ("STOPPING", "EXITED")]
    stops = [e for e in audit.recent(real.store, 10) if e.action == "stop"]
    assert stops[0].actor == "tester" and stops[0].source == "test" and stops[0].outcome == "ok"


@pytest.mark.timeout(60)
def test_child_and_grandchildren_all_gone_after_stop(real):
    sup = real.supervisor()
    pids_file = real.root / "pids.json"
    code = textwrap.dedent(f"""
        import json, os, subprocess, sys, time
        sleeper = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
        same_group = subprocess.Popen([sys.executable, "-c", sleeper])
        own_session = subprocess.Popen([sys.executable, "-c", sleeper], start_new_session=True)
        with open({str(pids_file)!r} + ".tmp", "w") as f:
            json.dump([same_group.pid, own_session.pid], f)
        os.replace({str(pids_file)!r} + ".tmp", {str(pids_file)!r})
        time.sleep(120)
    """)
    sup.sync_specs([real.spec("tree", code, stop_grace_s=1.0)])
    sup.start("tree")
    wait_for(lambda: pids_file.exists() and _state(sup, "tree") == S.RUNNING, poll=sup.poll)
    grandchildren = json.loads(pids_file.read_text())
    cts = [start_of(p) for p in grandchildren]
    real.extra_pids += list(zip(grandchildren, cts))
    child = sup.view("tree").pid
    assert all(not gone(p, ct) for p, ct in zip(grandchildren, cts))
    v = sup.stop("tree", wait=True)
    assert v.state == S.EXITED
    assert gone(child)
    wait_for(lambda: all(gone(p, ct) for p, ct in zip(grandchildren, cts)), timeout_s=5)


@pytest.mark.timeout(60)
def test_on_failure_ends_fatal_after_n_tries(real):
    sup = real.supervisor()
    policy = RestartPolicy(mode="on-failure", max_tries=2, backoff_s=0.1, backoff_max_s=0.2)
    sup.sync_specs([real.spec("flaky", "import sys; print('failing'); sys.exit(1)", restart=policy)])
    sup.start("flaky")
    wait_for(lambda: _state(sup, "flaky") == S.FATAL, timeout_s=30, poll=sup.poll)
    v = sup.view("flaky")
    assert v.exit_code == 1 and v.tries == 2 and "gave up after 2 restarts" in v.detail
    to_states = [e.to_state for e in sup.history("flaky")]
    assert to_states.count("STARTING") == 3 and to_states.count("BACKOFF") == 2
    assert open(v.log_path).read().count("failing\n") == 3


@pytest.mark.timeout(60)
def test_readiness_by_http(real):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = textwrap.dedent(f"""
        import http.server, time
        time.sleep(0.8)
        http.server.HTTPServer(("127.0.0.1", {port}), http.server.SimpleHTTPRequestHandler).serve_forever()
    """)
    probe = ReadinessProbe(kind="http", url=f"http://127.0.0.1:{port}/", interval_s=0.2, timeout_s=30)
    sup = real.supervisor()
    sup.sync_specs([real.spec("web", code, readiness=probe)])
    sup.start("web")
    sup.poll()
    assert _state(sup, "web") == S.STARTING
    wait_for(lambda: _state(sup, "web") == S.RUNNING, poll=sup.poll)
    v = sup.view("web")
    assert v.ready and "HTTP 200" in v.detail
    assert sup.stop("web").state == S.EXITED


@pytest.mark.timeout(60)
def test_readiness_by_log_pattern_not_fooled_by_the_header(real):
    # The pattern appears in the command line (hence the log header) long before it is printed.
    code = "import time; time.sleep(0.8); print('server ' + 'listening', flush=True); time.sleep(120)"
    sup = real.supervisor()
    sup.sync_specs([real.spec("logready", code, readiness=ReadinessProbe(kind="log", pattern=r"listening"))])
    sup.start("logready")
    wait_for(lambda: sup.view("logready").pid, poll=sup.poll)
    for _ in range(5):
        sup.poll()
    if "server listening" not in open(sup.view("logready").log_path).read():
        assert _state(sup, "logready") == S.STARTING
    wait_for(lambda: _state(sup, "logready") == S.RUNNING, poll=sup.poll)


@pytest.mark.timeout(60)
def test_start_refused_when_active_and_stop_refused_when_idle(real):
    sup = real.supervisor()
    sup.sync_specs([real.spec("one", SLEEPER)])
    sup.start("one")
    with pytest.raises(ActionRefused, match="already STARTING|already RUNNING"):
        sup.start("one")
    sup.stop("one")
    with pytest.raises(ActionRefused, match="not running"):
        sup.stop("one")
    outcomes = [(e.action, e.outcome) for e in audit.recent(real.store, 10)]
    assert outcomes == [("stop", "refused"), ("stop", "ok"), ("start", "refused"), ("start", "ok")]


_SUPERVISE_SCRIPT = textwrap.dedent("""
    import sys, time
    sys.path.insert(0, {repo!r})
    from specdeck_types.process import ProcessSpec
    from backend.supervisor.supervisor import Supervisor
    from state.store import Store
    root = {root!r}
    sup = Supervisor(Store(root + "/state.db"), root + "/run")
    py = sys.executable
    sup.sync_specs([
        ProcessSpec("long", "other", (py, "-c", "import time; time.sleep(120)"), root + "/logs/long.log"),
        ProcessSpec("short", "other", (py, "-c", "import time, sys; time.sleep(1.5); sys.exit(4)"), root + "/logs/short.log"),
    ])
    sup.start("long"); sup.start("short")
    while not all(v.state.value == "RUNNING" for v in sup.views()):
        sup.poll(); time.sleep(0.05)
    print("READY", flush=True)
    while True:
        sup.poll(); time.sleep(0.2)
""")


@pytest.mark.timeout(60)
def test_readopt_after_supervisor_killed(real):
    script = _SUPERVISE_SCRIPT.format(repo=REPO, root=str(real.root))
    proc = subprocess.Popen([PY, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "READY"
    finally:
        proc.send_signal(signal.SIGKILL)  # the supervising process dies without any cleanup
        proc.wait(timeout=10)
        proc.stdout.close()
    long_ident = real.identity("long")
    assert long_ident and not gone(long_ident["pid"], long_ident["create_time"])
    # "short" ends while no supervisor runs; its wrapper records the exit code.
    wait_for(lambda: (real.run_dir / "short" / "exit.json").exists(), timeout_s=15)
    sup = real.supervisor()
    v = {x.name: x for x in sup.views()}
    assert v["long"].state == S.RUNNING and v["long"].pid == long_ident["pid"]
    assert (v["short"].state, v["short"].exit_code) == (S.EXITED, 4)
    # The re-adopted process can be stopped like any other.
    assert sup.stop("long").state == S.EXITED
    assert gone(long_ident["pid"], long_ident["create_time"])


@pytest.mark.timeout(60)
def test_record_with_reused_pid_is_not_adopted(real):
    other = subprocess.Popen([PY, "-c", "import time; time.sleep(120)"])
    try:
        ct = start_of(other.pid)
        sup = real.supervisor()
        sup.sync_specs([real.spec("victim", SLEEPER)])
        sup.close()
        # The record says "running as pid X" but X is another process (different create time).
        from state.processes import ProcessRepo
        ProcessRepo(real.store).transition("victim", S.STARTING, at=time.time(), pid=other.pid,
                                           create_time=ct - 1000.0, run_id="old-run", started_at=time.time() - 1000)
        sup2 = real.supervisor()
        v = sup2.view("victim")
        assert v.state == S.UNKNOWN and "another process" in v.detail
        with pytest.raises(ActionRefused):
            sup2.stop("victim")
        time.sleep(0.2)
        assert other.poll() is None  # never signalled
    finally:
        other.terminate()
        other.wait(timeout=10)


@pytest.mark.timeout(60)
def test_missing_program_is_refused_before_starting(real):
    sup = real.supervisor()
    spec = real.spec("ghost", "")
    from dataclasses import replace
    sup.sync_specs([replace(spec, argv=(str(real.root / "no-such-program"),))])
    with pytest.raises(SupervisorError) as ei:
        sup.start("ghost")
    assert str(ei.value) == f"ghost cannot start: the program (argv[0]) {real.root / 'no-such-program'} does not exist"
    assert _state(sup, "ghost") == S.NEVER  # never STARTING
    assert not os.path.exists(sup.view("ghost").log_path)


def test_program_the_kernel_cannot_exec_fails_cleanly(real):
    sup = real.supervisor()
    bogus = real.root / "not-a-program"
    bogus.write_bytes(b"\x00\x01\x02 not an executable format\n")
    bogus.chmod(0o755)
    spec = real.spec("ghost", "")
    from dataclasses import replace
    sup.sync_specs([replace(spec, argv=(str(bogus),))])
    sup.start("ghost")
    wait_for(lambda: _state(sup, "ghost") == S.EXITED, poll=sup.poll)
    v = sup.view("ghost")
    assert v.exit_code == 127 and "could not start" in v.detail
    assert "could not start" in open(v.log_path).read()


@pytest.mark.timeout(60)
def test_wrapper_ignores_terminal_signals(real):
    sup = real.supervisor()
    sup.sync_specs([real.spec("guarded", SLEEPER)])
    sup.start("guarded")
    wait_for(lambda: _state(sup, "guarded") == S.RUNNING, poll=sup.poll)
    ident = real.identity("guarded")
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        os.kill(ident["wrapper_pid"], sig)
    time.sleep(0.3)
    assert not gone(ident["wrapper_pid"], ident["wrapper_create_time"])
    assert not gone(ident["pid"], ident["create_time"])
    # The child is in its own process group and session, apart from the wrapper's.
    assert os.getpgid(ident["pid"]) == ident["pid"] != os.getpgid(ident["wrapper_pid"])
    v = sup.stop("guarded")
    assert v.exit_code == -signal.SIGTERM
    wait_for(lambda: gone(ident["wrapper_pid"], ident["wrapper_create_time"]), timeout_s=10)


@pytest.mark.timeout(60)
def test_stopping_record_whose_pid_leads_a_stranger_group_signals_nothing(real):
    # A stop was asked for (say `processes stop --no-wait`) and no supervisor saw
    # it through; the child is long gone and its pid now leads an unrelated group.
    stranger = subprocess.Popen(["sleep", "100"], start_new_session=True)
    try:
        ct = start_of(stranger.pid)
        sup = real.supervisor()
        sup.sync_specs([real.spec("old", SLEEPER, stop_grace_s=1.0)])
        sup.close()
        from state.processes import ProcessRepo
        now = time.time()
        ProcessRepo(real.store).transition(
            "old", S.STOPPING, at=now - 60, pid=stranger.pid, create_time=ct - 5000.0, run_id="old-run",
            started_at=now - 7000, term_at=now - 60)
        sup2 = real.supervisor()
        for _ in range(5):
            sup2.poll()
            time.sleep(0.05)
        v = sup2.view("old")
        assert v.state == S.EXITED and "exit code was not recorded" in v.detail
        time.sleep(0.2)
        assert stranger.poll() is None  # neither SIGTERM nor SIGKILL
    finally:
        stranger.kill()
        stranger.wait(timeout=10)


@pytest.mark.timeout(60)
def test_group_members_left_behind_by_an_exiting_child_are_ended(real):
    pids_file = real.root / "left.json"
    code = textwrap.dedent(f"""
        import json, os, subprocess, sys, time
        obeys = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        stubborn = subprocess.Popen([sys.executable, "-c",
            "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"])
        with open({str(pids_file)!r} + ".tmp", "w") as f:
            json.dump([obeys.pid, stubborn.pid], f)
        os.replace({str(pids_file)!r} + ".tmp", {str(pids_file)!r})
        time.sleep(0.5)
        sys.exit(1)
    """)
    sup = real.supervisor()
    sup.sync_specs([real.spec("leaver", code, stop_grace_s=1.0)])
    sup.start("leaver")
    wait_for(lambda: pids_file.exists(), poll=sup.poll)
    left = json.loads(pids_file.read_text())
    cts = [start_of(p) for p in left]
    real.extra_pids += list(zip(left, cts))
    wait_for(lambda: _state(sup, "leaver") == S.EXITED, poll=sup.poll)
    assert all(gone(p, ct) for p, ct in zip(left, cts))  # exit recorded only once they are gone
    v = sup.view("leaver")
    assert v.exit_code == 1 and "2 leftover processes" in v.detail
    exit_rec = read_json(real.run_dir / "leaver" / "exit.json")
    assert exit_rec["leftovers"] == 2 and exit_rec["leftovers_killed"] == 1
    text = open(v.log_path).read()
    assert "ended 2 leftover processes of its group (1 after SIGKILL)" in text


@pytest.mark.timeout(60)
def test_restart_requested_by_one_supervisor_is_done_by_another(real):
    code = textwrap.dedent("""
        import signal, sys, time
        signal.signal(signal.SIGTERM, lambda *a: (time.sleep(0.5), sys.exit(0)))
        print('up', flush=True)
        time.sleep(120)
    """)
    dashboard = real.supervisor()
    dashboard.sync_specs([real.spec("svc", code, stop_grace_s=5.0)])
    dashboard.start("svc")
    wait_for(lambda: _state(dashboard, "svc") == S.RUNNING, poll=dashboard.poll)
    first = dashboard.view("svc")
    assert dashboard.restart("svc", actor="ann", source="dashboard", wait=False).state == S.STOPPING
    # Only a command-line call polls from here on (the dashboard's loop is not running).
    cli = real.supervisor()
    wait_for(lambda: _state(cli, "svc") in (S.STARTING, S.RUNNING) and cli.view("svc").run_id != first.run_id,
             poll=cli.poll)
    assert gone(first.pid)
    second = cli.view("svc")
    assert "restarted by ann via dashboard" in [e.detail for e in cli.history("svc") if e.to_state == "STARTING"][-1]
    # The dashboard starts no extra run, and a later explicit stop stays stopped.
    for _ in range(5):
        dashboard.poll()
    assert dashboard.view("svc").run_id == second.run_id
    assert dashboard.stop("svc", wait=True).state == S.EXITED
    for _ in range(5):
        dashboard.poll()
        cli.poll()
        time.sleep(0.05)
    assert dashboard.view("svc").state == S.EXITED and dashboard.view("svc").run_id == second.run_id
