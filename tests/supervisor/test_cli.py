"""``python -m backend.cli`` against a tiny workspace written by the test."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import textwrap
from pathlib import Path

import pytest

from backend.cli import main
from state import audit
from state.store import Store
from tests.supervisor.conftest import PY, _end_group, gone, wait_for
from backend.supervisor.runfiles import read_json

REPO = Path(__file__).resolve().parents[2]


def write_ws(root: Path, extra: str = "") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "specdeck.toml").write_text(textwrap.dedent(f"""
        [workspace]
        name = "clitest"

        [[process]]
        name = "sleeper"
        argv = [{json.dumps(PY)}, "-c", "import time; print('sleeper up', flush=True); time.sleep(120)"]
        stop_grace_s = 2

        [[process]]
        name = "quick"
        argv = [{json.dumps(PY)}, "-c", "import sys; print('quick ran'); sys.exit(5)"]
    """) + extra)
    return root


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    rc = main(list(argv), out=out, err=err)
    return rc, out.getvalue(), err.getvalue()


@pytest.fixture
def ws(tmp_path):
    root = write_ws(tmp_path / "ws")
    yield root
    run("-w", str(root), "processes", "stop-all")
    run_dir = root / "run"
    if run_dir.exists():
        for d in run_dir.iterdir():
            ident = read_json(d / "identity.json")
            if ident:
                _end_group(int(ident["pid"]), ident.get("create_time"))


@pytest.mark.timeout(60)
def test_list_start_stop_restart_log(ws):
    w = str(ws)
    rc, out, _ = run("-w", w, "processes", "list")
    assert rc == 0 and "sleeper" in out and "NEVER" in out
    rc, out, _ = run("-w", w, "processes", "start", "sleeper")
    assert rc == 0 and "sleeper: STARTING" in out
    rc, _, err = run("-w", w, "processes", "start", "sleeper")
    assert rc == 1 and "already" in err

    def listed():
        rows = json.loads(run("-w", w, "processes", "list", "--json")[1])
        return {r["name"]: r for r in rows}

    row = wait_for(lambda: (r := listed()["sleeper"])["state"] == "RUNNING" and r)
    assert row["pid"] and row["ready"]
    # a whole line: the run's header above it quotes the code, marker included
    wait_for(lambda: "sleeper up" in run("-w", w, "processes", "log", "sleeper", "-n", "5")[1].splitlines())
    rc, out, _ = run("-w", w, "processes", "restart", "sleeper")
    assert rc == 0 and "STARTING" in out
    new_pid = wait_for(lambda: listed()["sleeper"]["pid"])
    assert new_pid != row["pid"] and gone(row["pid"])
    rc, out, _ = run("-w", w, "processes", "stop", "sleeper")
    assert rc == 0 and "EXITED" in out
    rc, out, _ = run("-w", w, "processes", "start", "quick")
    assert rc == 0
    wait_for(lambda: listed()["quick"]["state"] == "EXITED")
    assert listed()["quick"]["exit_code"] == 5
    with Store(ws / "state.db") as s:
        entries = audit.recent(s, 20)
    assert entries and all(e.source == "cli" for e in entries)
    assert [e.action for e in reversed(entries)][:3] == ["start", "start", "restart"]


def test_unknown_process_and_bad_config(ws, tmp_path):
    rc, _, err = run("-w", str(ws), "processes", "stop", "nope")
    assert rc == 1 and "no managed process named 'nope'" in err
    rc, _, err = run("-w", str(ws), "processes", "log", "nope")
    assert rc == 1 and "nope" in err
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "specdeck.toml").write_text('[[process]]\nname = "x"\nargv = []\n')
    rc, _, err = run("-w", str(bad), "processes", "list")
    assert rc == 2 and "specdeck.toml" in err and "argv" in err


def test_init_writes_a_workspace(tmp_path):
    rc, out, _ = run("init", str(tmp_path / "new"))
    assert rc == 0 and (tmp_path / "new" / "specdeck.toml").exists()
    rc, out, _ = run("-w", str(tmp_path / "new"), "processes", "list")
    assert rc == 0


@pytest.mark.timeout(60)
def test_supervise_and_log_follow_until_interrupted(ws):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    sup = subprocess.Popen([PY, "-m", "backend.cli", "-w", str(ws), "supervise", "--interval", "0.2"],
                           cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    follow = None
    try:
        assert "supervising" in sup.stdout.readline()
        assert run("-w", str(ws), "processes", "start", "sleeper")[0] == 0
        follow = subprocess.Popen([PY, "-m", "backend.cli", "-w", str(ws), "processes", "log", "sleeper", "-n", "0",
                                   "--follow"], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True)
        # The foreground loop reports the transition it made.
        wait_for(lambda: "sleeper: RUNNING" in sup.stdout.readline(), timeout_s=20)
        log = ws / "logs" / "sleeper.log"
        # Handshake: the follower says where it follows from once its start offset is fixed;
        # whatever is appended after that line must reach its output.
        assert follow.stderr.readline().startswith(f"following {log} from byte ")
        with open(log, "a") as f:
            f.write("appended by the test\n")
        wait_for(lambda: "appended by the test" in follow.stdout.readline(), timeout_s=20)
    finally:
        for p in (follow, sup):
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGINT)
        rcs = [p.wait(timeout=15) if p is not None else 0 for p in (follow, sup)]
        for p in (follow, sup):
            if p is not None:
                p.stdout.close()
                if p.stderr is not None:
                    p.stderr.close()
    assert rcs == [0, 0]


@pytest.mark.timeout(90)
def test_http_readiness_completes_through_one_shot_commands(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = (f"import http.server; http.server.HTTPServer(('127.0.0.1', {port}), "
              "http.server.SimpleHTTPRequestHandler).serve_forever()")
    ws = write_ws(tmp_path / "ws", textwrap.dedent(f"""
        [[process]]
        name = "web"
        argv = [{json.dumps(PY)}, "-c", {json.dumps(server)}]
        stop_grace_s = 2
        readiness = {{ kind = "http", url = "http://127.0.0.1:{port}/", interval_s = 30, timeout_s = 60 }}
    """))
    w = str(ws)
    try:
        assert run("-w", w, "processes", "start", "web")[0] == 0
        # No long-running supervisor: each `list` is a fresh one that exits at once.
        wait_for(lambda: json.loads(run("-w", w, "processes", "list", "--json")[1])[-1]["state"] == "RUNNING",
                 timeout_s=30, interval_s=0.2)
    finally:
        run("-w", w, "processes", "stop-all")


@pytest.mark.timeout(90)
def test_stop_all_ends_starting_and_backoff_processes(tmp_path):
    ws = write_ws(tmp_path / "ws", textwrap.dedent(f"""
        [[process]]
        name = "loading"
        argv = [{json.dumps(PY)}, "-c", "import time; time.sleep(120)"]
        stop_grace_s = 2
        readiness = {{ kind = "log", pattern = "never printed", timeout_s = 600 }}

        [[process]]
        name = "crashy"
        argv = [{json.dumps(PY)}, "-c", "import sys; sys.exit(2)"]
        restart = {{ mode = "on-failure", max_tries = 5, backoff_s = 300 }}
    """))
    w = str(ws)

    def listed():
        return {r["name"]: r for r in json.loads(run("-w", w, "processes", "list", "--json")[1])}

    try:
        assert run("-w", w, "processes", "start", "loading")[0] == 0
        assert run("-w", w, "processes", "start", "crashy")[0] == 0
        pid = wait_for(lambda: listed()["loading"]["pid"])
        wait_for(lambda: listed()["crashy"]["state"] == "BACKOFF")
        assert listed()["loading"]["state"] == "STARTING"
        rc, out, _ = run("-w", w, "processes", "stop-all")
        assert rc == 0 and "loading: EXITED" in out and "crashy: EXITED" in out
        rows = listed()
        assert rows["loading"]["state"] == rows["crashy"]["state"] == "EXITED"
        assert gone(pid)
    finally:
        run("-w", w, "processes", "stop-all")
