"""The dashboard lends its warm SGLang parser to the command line (backend.sglang.argshare):
a stand-in dashboard, a process of its own, serves the workspace's run/argparser.sock and keeps a
parser warm for a stand-in sglang; the command line's checks are answered there, in its own
environment, without a parser of its own, and fall back to one (saying so) when no dashboard,
another environment, or an untrusted socket stands in the way.  Every process started ends."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from backend.cli import main
from backend.sglang import argcheck, argshare, argworker
from backend.sim.models import make_draft_dir, make_target_dir

from .test_argworker import FIELDS, make_fake_python

REPO = Path(__file__).resolve().parents[2]

DASHBOARD = r'''
import json, sys
sys.path.insert(0, sys.argv[1])
from backend.sglang import argshare, argworker
run_dir, python, additions = sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
server = argshare.serve(run_dir)
warm = argworker.ask(python, additions, {"base": [], "groups": [], "fields": ["pid"]}, 60)
print(json.dumps({"serving": server is not None, "parsers": argworker.running(), "warm": warm.get("kind")}),
      flush=True)
sys.stdin.read()  # until the test closes it; the parser and the socket end at exit
'''


@pytest.fixture
def fake_python(tmp_path) -> str:
    py = make_fake_python(tmp_path)
    argworker.close_all()
    argcheck.clear_cache()
    yield py
    argworker.close_all()
    argcheck.clear_cache()
    argcheck.borrow_from(None)


class Dashboard:
    def __init__(self, run_dir: Path, python: str, additions: dict[str, str], env: dict[str, str] | None = None):
        self.proc = subprocess.Popen([sys.executable, "-c", DASHBOARD, str(REPO), str(run_dir), python,
                                      json.dumps(additions)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env, start_new_session=True)
        self.info = json.loads(self.proc.stdout.readline() or "null")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, 15)
                self.proc.wait(timeout=10)
        self.proc.stdout.close()


@pytest.fixture
def dashboards():
    started: list[Dashboard] = []

    def start(*args, **kw) -> Dashboard:
        d = Dashboard(*args, **kw)
        started.append(d)
        return d

    yield start
    for d in started:
        d.close()
        assert d.proc.returncode is not None
        for pid in d.info["parsers"] if d.info else []:
            assert _wait_gone(pid), f"the dashboard's parser {pid} outlived it"


def _wait_gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def _request(*argv: str) -> dict:
    return {"base": list(argv), "groups": [], "fields": FIELDS}


@pytest.mark.timeout(90)
def test_the_command_line_is_answered_by_the_dashboards_warm_parser_in_its_own_environment(
        fake_python, tmp_path, dashboards, monkeypatch):
    run = tmp_path / "ws" / "run"
    d = dashboards(run, fake_python, {"MARK": "srv"})
    assert d.info["serving"] and d.info["warm"] == "parsed"
    sock = argshare.socket_path(run)
    assert stat.S_ISSOCK(os.lstat(sock).st_mode)
    assert stat.S_IMODE(os.lstat(sock).st_mode) == 0o600 and stat.S_IMODE(os.stat(run).st_mode) == 0o700
    monkeypatch.setenv("X", "the command line's")  # read at parse time: the client's value is used
    started = argworker.stats.started
    argcheck.borrow_from(run)
    ans = argcheck.run_probe(fake_python, ["--tp-size", "3"], [], env={"MARK": "srv"})
    assert argcheck.answered_by() == "dashboard"
    assert ans["kind"] == "parsed" and ans["values"]["tp_size"] == 3
    ans = argshare.ask(run, fake_python, {"MARK": "srv"}, _request("--tp-size", "7"), 30)
    assert ans["values"]["tp_size"] == 7 and ans["values"]["calls"] == 1
    assert ans["values"]["seen_x"] == "the command line's" and ans["values"]["mark"] == "srv"
    assert ans["values"]["pid"] != os.getpid() and ans["values"]["pid"] != d.proc.pid
    assert argworker.stats.started == started and argworker.running() == []  # no parser of its own
    assert argshare.available(run, fake_python, {"MARK": "srv"})
    # another server's environment: the dashboard has no parser for it, and does not start one
    assert not argshare.available(run, fake_python, {"MARK": "other"})
    assert "no warm parser" in argshare.last_reason()
    ans = argcheck.run_probe(fake_python, ["--tp-size", "5"], [], env={"MARK": "other"})
    assert argcheck.answered_by() == "parser" and ans["values"]["tp_size"] == 5
    assert argworker.stats.started == started + 1


@pytest.mark.timeout(90)
def test_another_value_of_an_import_time_variable_is_not_answered_by_the_dashboard(
        fake_python, tmp_path, dashboards, monkeypatch):
    run = tmp_path / "run"
    d = dashboards(run, fake_python, {}, env={**os.environ, "SGLANG_DEMO_KNOB": "1"})
    assert d.info["serving"]
    monkeypatch.setenv("SGLANG_DEMO_KNOB", "2")
    assert not argshare.available(run, fake_python, {})
    assert "SGLANG_DEMO_KNOB" in argshare.last_reason()
    argcheck.borrow_from(run)
    ans = argcheck.run_probe(fake_python, ["--tp-size", "2"], [], env={})
    assert argcheck.answered_by() == "parser" and ans["kind"] == "parsed"
    monkeypatch.setenv("SGLANG_DEMO_KNOB", "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")  # set by each fork: it does not matter
    argworker.close_all()
    assert argshare.available(run, fake_python, {})


@pytest.mark.timeout(60)
def test_without_a_dashboard_the_check_runs_here_and_a_left_socket_is_replaced(fake_python, tmp_path):
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    assert not argshare.available(run, fake_python, {})
    assert argshare.last_reason() == "no dashboard parser is running for this workspace"
    # a socket left by a dashboard that was killed: nothing listens on it
    import socket

    left = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    left.bind(str(argshare.socket_path(run)))
    os.chmod(argshare.socket_path(run), 0o600)
    left.close()
    assert not argshare.available(run, fake_python, {})
    assert "left behind" in argshare.last_reason()
    argcheck.borrow_from(run)
    ans = argcheck.run_probe(fake_python, ["--tp-size", "2"], [], env={})
    assert argcheck.answered_by() == "parser" and ans["values"]["tp_size"] == 2
    server = argshare.serve(run)  # a new dashboard takes the place of the one that left it
    try:
        assert server is not None and argshare.serve(run) is server
        argworker.warm(fake_python, {})
        deadline = time.monotonic() + 30
        while not argshare.available(run, fake_python, {}) and time.monotonic() < deadline:
            time.sleep(0.05)
        # the server in this very process: a client here uses its own parser, not the socket
        argcheck.clear_cache()
        argcheck.run_probe(fake_python, ["--tp-size", "4"], [], env={})
        assert argcheck.answered_by() == "parser" and server.answered == 0
    finally:
        argshare.stop_all()
    assert not os.path.lexists(argshare.socket_path(run))


@pytest.mark.timeout(60)
def test_a_socket_open_to_others_is_not_trusted(fake_python, tmp_path, dashboards):
    run = tmp_path / "run"
    d = dashboards(run, fake_python, {})
    assert argshare.available(run, fake_python, {})
    sock = argshare.socket_path(run)
    os.chmod(sock, 0o666)
    assert not argshare.available(run, fake_python, {})
    assert "open to other users" in argshare.last_reason()
    os.chmod(sock, 0o600)
    os.chmod(run, 0o755)
    assert not argshare.available(run, fake_python, {})
    os.chmod(run, 0o700)
    assert argshare.available(run, fake_python, {})
    assert d.info["serving"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another user")
@pytest.mark.timeout(60)
def test_the_dashboard_answers_no_other_user(fake_python, tmp_path, dashboards):
    run = tmp_path / "run"
    dashboards(run, fake_python, {})
    sock = argshare.socket_path(run)
    os.chmod(sock, 0o666)  # even when the modes let another user in, the server does not answer
    for p in (run, *run.parents):
        if p == Path("/"):
            break
        os.chmod(p, os.stat(p).st_mode | 0o005)
    body = json.dumps({"python": fake_python, "additions": {}, "timeout_s": 5, "has": True,
                       "request": {"env": {}}})
    code = ("import socket, os, sys\n"
            "os.setgid(65534); os.setuid(65534)\n"
            "s = socket.socket(socket.AF_UNIX); s.settimeout(5); s.connect(sys.argv[1])\n"
            "try:\n"
            "    s.sendall(sys.argv[2].encode() + b'\\n')\n"
            "    print('answer' if s.recv(1000) else 'closed')\n"
            "except (ConnectionResetError, BrokenPipeError):  # closed before or after the request\n"
            "    print('closed')\n")
    out = subprocess.run([sys.executable, "-c", code, str(sock), body], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "closed"  # unanswered
    os.chmod(sock, 0o600)


@pytest.mark.timeout(60)
def test_a_run_folder_past_the_socket_path_limit(fake_python, tmp_path, dashboards):
    run = tmp_path / ("w" * 60) / ("x" * 60) / "run"
    assert len(str(argshare.socket_path(run))) > 108
    d = dashboards(run, fake_python, {})
    assert d.info["serving"]
    argcheck.borrow_from(run)
    ans = argcheck.run_probe(fake_python, ["--tp-size", "6"], [], env={})
    assert argcheck.answered_by() == "dashboard" and ans["values"]["tp_size"] == 6


@pytest.fixture
def cli_ws(tmp_path, fake_python):
    target = make_target_dir(tmp_path / "m" / "t", hidden_size=4096, num_hidden_layers=32, vocab_size=128256)
    draft = make_draft_dir(tmp_path / "m" / "d", target_hidden_size=4096, vocab_size=128256, draft_vocab_size=32000)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "specdeck.toml").write_text(f"""
[workspace]
name = "share"

[[server]]
name = "srv"
model_path = "{target}"
python = "{fake_python}"
port = 39177
sglang_version = "0.5.23"
env = {{ MARK = "srv" }}

[server.speculative]
algorithm = "EAGLE3"
draft_model_path = "{draft}"
num_steps = 3
eagle_topk = 1
num_draft_tokens = 4
""")
    return ws


def _cli(ws: Path, *argv: str) -> tuple[int, str]:
    out = io.StringIO()
    rc = main(["--workspace", str(ws), *argv], out=out, err=io.StringIO())
    return rc, out.getvalue()


@pytest.mark.timeout(120)
def test_servers_preflight_says_when_the_first_check_is_slow_and_uses_the_dashboards_parser(
        cli_ws, fake_python, dashboards, capsys):
    from backend.sglang.version import clear_cache

    clear_cache()
    rc, out = _cli(cli_ws, "servers", "preflight", "srv")
    note = capsys.readouterr().err
    assert "no dashboard parser is running" in note and "imports sglang first" in note
    assert "checked by SGLang 0.5.23's own parser" in out
    assert argworker.running()  # the check started a parser in this process
    argworker.close_all()
    argcheck.clear_cache()
    run = cli_ws / "run"
    d = dashboards(run, fake_python, {"MARK": "srv", "PYTHONUNBUFFERED": "1"})
    assert d.info["serving"]
    started = argworker.stats.started
    rc2, out2 = _cli(cli_ws, "servers", "preflight", "srv")
    assert capsys.readouterr().err == ""
    assert argcheck.answered_by() == "dashboard" and argworker.stats.started == started
    assert (rc2, out2) == (rc, out)
