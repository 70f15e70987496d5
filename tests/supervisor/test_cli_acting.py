"""The command line against real processes: where a process runs, what is refused before it
starts, reading commands that never act, and a restart that survives its caller being killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from state import Store
from state.processes import ProcessRepo
from tests.helpers import printed
from tests.supervisor.conftest import PY, gone, wait_for
from tests.supervisor.test_cli import REPO, run, write_ws

SLEEPER = "import time; print('sleeper up', flush=True); time.sleep(120)"


def listed(w: str) -> dict[str, dict]:
    rc, out, err = run("-w", w, "processes", "list", "--json")
    assert rc == 0, err
    return {r["name"]: r for r in json.loads(out)}


@pytest.fixture
def cleanup():
    workspaces: list[Path] = []
    yield workspaces
    for w in workspaces:
        run("-w", str(w), "processes", "stop-all")


def test_a_process_without_cwd_runs_in_the_workspace_folder(tmp_path, monkeypatch, cleanup):
    ws = write_ws(tmp_path / "ws", textwrap.dedent(f"""
        [[process]]
        name = "where"
        argv = [{json.dumps(PY)}, "-c", "import os; print('cwd=' + os.getcwd(), flush=True)"]
    """))
    cleanup.append(ws)
    elsewhere = tmp_path / "caller"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert run("-w", str(ws), "processes", "start", "where")[0] == 0
    wait_for(lambda: listed(str(ws))["where"]["state"] == "EXITED", timeout_s=30)
    assert f"cwd={ws.resolve()}\n" in (ws / "logs" / "where.log").read_text()


def test_missing_cwd_or_program_is_refused_before_starting(tmp_path, cleanup):
    (tmp_path / "ws" / "jobs").mkdir(parents=True)
    script = tmp_path / "ws" / "jobs" / "run.sh"
    script.write_text("#!/bin/sh\necho script ran in $(pwd)\n")
    script.chmod(0o755)
    ws = write_ws(tmp_path / "ws", textwrap.dedent("""
        [[process]]
        name = "nocwd"
        argv = ["true"]
        cwd = "no-such-folder"

        [[process]]
        name = "noprog"
        argv = ["specdeck-no-such-program-4711", "--flag"]

        [[process]]
        name = "relprog"
        argv = ["./run.sh"]
        cwd = "jobs"

        [[process]]
        name = "relmissing"
        argv = ["./run.sh"]
    """))
    cleanup.append(ws)
    w = str(ws)
    rc, out, err = run("-w", w, "processes", "start", "nocwd")
    assert (rc, out) == (1, "")
    assert err == f"error: nocwd cannot start: its working folder (cwd) {ws / 'no-such-folder'} does not exist\n"
    rc, _, err = run("-w", w, "processes", "start", "noprog")
    assert rc == 1 and err.startswith("error: noprog cannot start: the program (argv[0]) "
                                      "'specdeck-no-such-program-4711' was not found on PATH (")
    rc, _, err = run("-w", w, "processes", "start", "relmissing")  # ./run.sh counts from cwd: the workspace
    assert rc == 1 and err == (f"error: relmissing cannot start: the program (argv[0]) {ws.resolve()}/./run.sh "
                               f"does not exist (taken from the working folder {ws.resolve()})\n")
    rows = listed(w)
    assert [rows[n]["state"] for n in ("nocwd", "noprog", "relmissing")] == ["NEVER"] * 3
    assert run("-w", w, "processes", "start", "relprog")[0] == 0
    wait_for(lambda: listed(w)["relprog"]["state"] == "EXITED", timeout_s=30)
    assert listed(w)["relprog"]["exit_code"] == 0
    assert f"script ran in {ws / 'jobs'}" in (ws / "logs" / "relprog.log").read_text()


@pytest.mark.timeout(90)
def test_reading_commands_never_start_a_due_restart(tmp_path, cleanup):
    ws = write_ws(tmp_path / "ws", textwrap.dedent(f"""
        [[process]]
        name = "crashy"
        argv = [{json.dumps(PY)}, "-c", "import sys; sys.exit(2)"]
        restart = {{ mode = "on-failure", max_tries = 5, backoff_s = 0.2, backoff_max_s = 0.2 }}
    """))
    cleanup.append(ws)
    w = str(ws)
    assert run("-w", w, "processes", "start", "crashy")[0] == 0
    row = wait_for(lambda: (r := listed(w)["crashy"])["state"] == "BACKOFF" and r, timeout_s=30)
    due = row["state_since"] + 0.2
    wait_for(lambda: time.time() > due + 0.5, timeout_s=5)
    for argv in (("processes", "list"), ("processes", "list", "--json"), ("processes", "log", "crashy"),
                 ("servers", "list")):
        assert run("-w", w, *argv)[0] == 0
    after = listed(w)["crashy"]
    assert (after["state"], after["tries"], after["state_since"]) == ("BACKOFF", row["tries"], row["state_since"])
    assert (ws / "logs" / "crashy.log").read_text().count("starting at") == 1


def _default_hangup() -> None:
    # an ignored SIGHUP is inherited through exec: under nohup (or a CI runner that ignores it) the
    # "lost SSH session" would reach a CLI that cannot hear it; a login shell's commands have the default
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def _cli(ws: Path, *argv: str, stderr=subprocess.DEVNULL, python_flags: tuple[str, ...] = ()) -> subprocess.Popen:
    return subprocess.Popen([PY, *python_flags, "-m", "backend.cli", "-w", str(ws), *argv], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True,
                            preexec_fn=_default_hangup)


def _status(pid: int) -> str:
    import psutil

    try:
        p = psutil.Process(pid)
        return f"{p.status()}, {p.cmdline()[-3:]}"
    except psutil.Error as exc:
        return repr(exc)


def _record(ws: Path, name: str):
    with Store(ws / "state.db") as s:
        return ProcessRepo(s).get(name)


@pytest.mark.timeout(240)
def test_restart_killed_half_way_is_finished_by_the_next_supervisor(tmp_path, cleanup):
    """A lost SSH session: the CLI gets SIGHUP, SIGTERM or SIGKILL while `processes restart` waits
    for the old run to end.  The request is in the store, so the next supervisor that acts (here
    `supervise`, as the dashboard's loop would) starts the process again, every time."""
    # After SIGTERM the child ends only once the test creates release-<pid> in its folder (the
    # workspace: it has no cwd), which keeps the CLI inside the restart until it is killed.
    slow_stop = ("import os, signal, sys, time\n"
                 "def on_term(*_):\n"
                 "    while not os.path.exists(f'release-{os.getpid()}'):\n"
                 "        time.sleep(0.02)\n"
                 "    sys.exit(0)\n"
                 "signal.signal(signal.SIGTERM, on_term)\n"
                 "print('sleeper up', flush=True)\n"
                 "time.sleep(300)\n")
    ws = write_ws(tmp_path / "ws", textwrap.dedent(f"""
        [[process]]
        name = "slow"
        argv = [{json.dumps(PY)}, "-c", {json.dumps(slow_stop)}]
        stop_grace_s = 120
    """))
    cleanup.append(ws)
    w = str(ws)
    assert run("-w", w, "processes", "start", "slow")[0] == 0
    pid = wait_for(lambda: (r := listed(w)["slow"])["state"] == "RUNNING" and r["pid"], timeout_s=30)
    log_path = ws / "logs" / "slow.log"
    for n, sig in enumerate((signal.SIGHUP, signal.SIGTERM, signal.SIGKILL, signal.SIGHUP, signal.SIGKILL,
                             signal.SIGTERM), start=1):
        # the run's SIGTERM handler is in place (it prints after installing it): a SIGTERM during the
        # interpreter's start-up would end it at once instead of holding the restart. Whole lines only:
        # each run's header quotes the code, marker included.
        wait_for(lambda: printed(log_path, "sleeper up") >= n, timeout_s=30)
        cli = _cli(ws, "processes", "restart", "slow")
        try:
            # Kill it once it has asked for the stop, while the old run is still ending.
            wait_for(lambda: (r := _record(ws, "slow")).state.value == "STOPPING" and r.term_at, timeout_s=30)
            os.killpg(cli.pid, sig)
        finally:
            try:
                cli.wait(timeout=30)
            except subprocess.TimeoutExpired:
                rec = _record(ws, "slow")
                raise AssertionError(f"the CLI (pid {cli.pid}) did not end after {signal.Signals(sig).name}: "
                                     f"{_status(cli.pid)}; slow is {rec.state.value} ({rec.detail})") from None
        assert cli.returncode == -sig
        rec = _record(ws, "slow")
        assert rec.state.value == "STOPPING" and rec.pending_restart, (sig, rec.state, rec.detail)
        (ws / f"release-{pid}").touch()
        # Reading does not finish it, not even once the old run has ended ...
        wait_for(lambda: gone(pid), timeout_s=30)
        assert listed(w)["slow"]["state"] == "STOPPING"
        # ... the next supervisor that acts does.
        err = tmp_path / f"supervise-{n}.err"
        with open(err, "wb") as err_file:
            # faulthandler: a supervise that does not end is made to print every thread's stack (SIGABRT)
            sup = _cli(ws, "supervise", "--interval", "0.1", stderr=err_file, python_flags=("-X", "faulthandler"))
        try:
            new_pid = wait_for(lambda: (r := listed(w)["slow"])["state"] == "RUNNING" and r["pid"], timeout_s=60)
        finally:
            os.killpg(sup.pid, signal.SIGINT)
            try:
                sup.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.kill(sup.pid, signal.SIGABRT)
                sup.wait(timeout=30)
                raise AssertionError("supervise did not end within 30 s of SIGINT; its threads:\n"
                                     + err.read_text(errors="replace")[-6000:]) from None
        assert new_pid != pid
        pid = new_pid
    (ws / f"release-{pid}").touch()  # lets the teardown's stop end the last run at once
    log = (ws / "logs" / "slow.log").read_text()
    assert log.count("starting at") == 7  # the first start and one per killed restart
