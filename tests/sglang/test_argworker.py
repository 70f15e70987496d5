"""The warm parser (backend.sglang.argworker with argprobe's serve mode), driven with a
stand-in sglang whose prepare_server_args counts its calls, reads and changes the
environment, and can hang or crash on request: each parse runs in a fork of the warm
process, a hung parse ends its process, a crashed one does not, and every process ends."""

from __future__ import annotations

import os
import signal
import stat
import sys
import time
from pathlib import Path

import pytest

from backend.sglang import argworker
from backend.supervisor.starts import proc_stat

from .conftest import server_cfg

FAKE_SERVER_ARGS = '''
import os, time

CALLS = 0


class Args:
    pass


def prepare_server_args(argv):
    global CALLS
    CALLS += 1
    if "--hang" in argv or "--stubborn" in argv:
        if "--stubborn" in argv:
            import signal
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        with open(os.environ["PIDFILE"], "w") as f:
            f.write(str(os.getpid()))
        time.sleep(60)
    if "--crash" in argv:
        os._exit(3)
    if "--bad" in argv:
        import sys
        sys.stderr.write("usage: launch_server\\nlaunch_server: error: unrecognized arguments: --bad\\n")
        raise SystemExit(2)
    a = Args()
    a.tp_size = int(argv[argv.index("--tp-size") + 1]) if "--tp-size" in argv else 1
    a.calls = CALLS
    a.seen_x = os.environ.get("X", "")
    a.mark = os.environ.get("MARK", "")
    a.cvd = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    os.environ["X"] = a.seen_x + "x"  # a parse that changes the process: it must not reach the next one
    a.pid = os.getpid()
    return a
'''
FIELDS = ["tp_size", "calls", "seen_x", "mark", "cvd", "pid"]


def make_fake_python(tmp_path: Path) -> str:
    """An interpreter whose sglang 0.5.23 is FAKE_SERVER_ARGS: a shell script running this Python with a
    site folder holding only that module and its package metadata."""
    site = tmp_path / "site"
    pkg = site / "sglang" / "srt"
    pkg.mkdir(parents=True)
    (site / "sglang" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "server_args.py").write_text(FAKE_SERVER_ARGS)
    meta = site / "sglang-0.5.23.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 0.5.23\n")
    py = tmp_path / "python"
    py.write_text(f'#!/bin/sh\nPYTHONPATH="{site}" exec "{sys.executable}" "$@"\n')
    py.chmod(py.stat().st_mode | stat.S_IXUSR)
    return str(py)


@pytest.fixture
def fake_python(tmp_path) -> str:
    argworker.close_all()
    yield make_fake_python(tmp_path)
    argworker.close_all()


def _env(**additions) -> dict[str, str]:
    return dict(additions)


def _ask(python, *argv, env=None, timeout_s=30.0):
    return argworker.ask(python, env or {}, {"base": list(argv), "groups": [], "fields": FIELDS}, timeout_s)


def _gone(pid: int) -> bool:
    """No such process, or one that has ended and waits to be reaped."""
    return proc_stat(pid)[0] in (b"Z", b"X")


def _wait_gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not _gone(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


@pytest.mark.timeout(60)
def test_one_warm_process_answers_every_request_each_in_a_fork_of_its_own(fake_python):
    a = _ask(fake_python, "--tp-size", "2")
    (warm,) = argworker.running()
    b = _ask(fake_python, "--tp-size", "4")
    assert argworker.running() == [warm]
    assert (a["kind"], a["version"], b["kind"]) == ("parsed", "0.5.23", "parsed")
    assert a["values"]["tp_size"] == 2 and b["values"]["tp_size"] == 4
    # each request is the first parse its process ever made, in a process other than the warm one,
    # and what the first request's parses did to the environment is gone for the second
    for ans in (a, b):
        assert ans["values"]["calls"] == 1 and ans["base"]["calls"] == 2
        assert ans["values"]["seen_x"] == "" and ans["base"]["seen_x"] == "x"
        assert ans["values"]["pid"] != warm
    assert a["values"]["pid"] != b["values"]["pid"]


@pytest.mark.timeout(60)
def test_a_refused_command_is_answered_in_sglangs_words(fake_python):
    ans = _ask(fake_python, "--bad")
    assert ans["kind"] == "rejected" and ans["error"] == "unrecognized arguments: --bad"


@pytest.mark.timeout(60)
def test_another_environment_gets_a_parser_of_its_own(fake_python):
    a = _ask(fake_python, env=_env(MARK="server-a"))
    b = _ask(fake_python, env=_env(MARK="server-b"))
    assert (a["values"]["mark"], b["values"]["mark"]) == ("server-a", "server-b")
    assert len(argworker.running()) == 2


@pytest.mark.timeout(60)
def test_each_parse_sees_the_environment_of_the_moment(fake_python, monkeypatch):
    monkeypatch.setenv("MARK", "at start")
    assert _ask(fake_python)["values"]["mark"] == "at start"
    (warm,) = argworker.running()
    monkeypatch.setenv("MARK", "later")  # not an addition of the launch: the same parser, the new value
    ans = _ask(fake_python, "--tp-size", "2")
    assert ans["values"]["mark"] == "later" and argworker.running() == [warm]
    # the launch's own additions win over this process's environment
    assert _ask(fake_python, env=_env(MARK="the server's"))["values"]["mark"] == "the server's"


@pytest.mark.timeout(60)
def test_at_most_max_parsers_stay_warm_the_one_used_longest_ago_goes(fake_python, monkeypatch):
    monkeypatch.setattr(argworker, "MAX_PARSERS", 2)
    _ask(fake_python, env=_env(MARK="a"))
    (a,) = argworker.running()
    _ask(fake_python, env=_env(MARK="b"))
    (b,) = set(argworker.running()) - {a}
    _ask(fake_python, "--tp-size", "2", env=_env(MARK="a"))  # a is now the more recently used
    _ask(fake_python, env=_env(MARK="c"))
    running = argworker.running()
    assert len(running) == 2 and a in running and b not in running
    assert _wait_gone(b)  # ended (its end may take a moment on a loaded machine)


@pytest.mark.timeout(60)
def test_a_parse_that_crashes_is_an_answer_and_the_warm_process_stays(fake_python):
    _ask(fake_python)
    (warm,) = argworker.running()
    ans = _ask(fake_python, "--crash")
    assert ans["kind"] == "failed" and "exit status 3" in ans["error"]
    assert argworker.running() == [warm]
    assert _ask(fake_python, "--tp-size", "3")["values"]["tp_size"] == 3


@pytest.mark.parametrize("how", ["--hang", "--stubborn"])
@pytest.mark.timeout(60)
def test_a_parse_that_hangs_ends_its_group_and_the_next_request_gets_a_fresh_parser(fake_python, tmp_path,
                                                                                     monkeypatch, how):
    # --stubborn ignores SIGTERM: the group gets SIGKILL after the grace period
    monkeypatch.setenv("PIDFILE", str(tmp_path / "fork.pid"))
    _ask(fake_python)
    (warm,) = argworker.running()
    started = argworker.stats.started
    t0 = time.monotonic()
    ans = _ask(fake_python, how, timeout_s=1.0)
    assert ans == {"ok": False, "kind": "failed", "error": "SGLang's parser did not answer within 1 s"}
    assert time.monotonic() - t0 < 1.0 + 2 * argworker._GRACE_S + 2
    fork = int((tmp_path / "fork.pid").read_text())
    assert _wait_gone(fork) and _gone(warm) and argworker.running() == []
    assert _ask(fake_python, "--tp-size", "5")["values"]["tp_size"] == 5
    assert argworker.stats.started == started + 1


@pytest.mark.timeout(60)
def test_a_parser_that_ended_by_itself_is_reaped_without_a_signal(fake_python, monkeypatch):
    # its pid is free once reaped: a signal to its group then could reach a stranger's
    monkeypatch.setattr(argworker, "IDLE_S", 0.5)
    _ask(fake_python)
    (warm,) = argworker.running()
    (old,) = argworker._parsers.values()
    assert _wait_gone(warm)
    sent = []
    real = os.killpg
    monkeypatch.setattr(argworker.os, "killpg", lambda pgid, sig: (sent.append((pgid, sig)), real(pgid, sig)))
    assert _ask(fake_python, "--tp-size", "7")["values"]["tp_size"] == 7
    deadline = time.monotonic() + 10  # the replaced parser is closed on a thread of its own
    while old.proc.returncode is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert old.proc.returncode == 0 and sent == []  # reaped, never signalled


@pytest.mark.timeout(60)
def test_servers_on_other_gpus_share_a_parser_and_each_parse_sees_its_own(fake_python):
    a = _ask(fake_python, env=_env(CUDA_VISIBLE_DEVICES="0,1"))
    b = _ask(fake_python, "--tp-size", "2", env=_env(CUDA_VISIBLE_DEVICES="2,3"))
    assert (a["values"]["cvd"], b["values"]["cvd"]) == ("0,1", "2,3")
    assert len(argworker.running()) == 1


@pytest.mark.timeout(60)
def test_a_parser_that_ended_meanwhile_is_replaced_and_the_request_answered(fake_python, monkeypatch):
    _ask(fake_python)
    (warm,) = argworker.running()
    started = argworker.stats.started
    os.killpg(warm, signal.SIGTERM)  # its idle time runs out just as the request is sent:
    assert _wait_gone(warm)
    # it still reads as alive when taken, so the request goes to the ended process first
    real_alive = argworker.Parser.alive
    monkeypatch.setattr(argworker.Parser, "alive", property(lambda p: p.proc.pid == warm or real_alive.fget(p)))
    ans = _ask(fake_python, "--tp-size", "6")
    assert ans["kind"] == "parsed" and ans["values"]["tp_size"] == 6
    assert argworker.stats.started == started + 1
    (fresh,) = argworker.running()
    assert fresh != warm


@pytest.mark.timeout(60)
def test_an_idle_parser_ends_by_itself(fake_python, monkeypatch):
    monkeypatch.setattr(argworker, "IDLE_S", 0.5)
    _ask(fake_python)
    (warm,) = argworker.running()
    assert _wait_gone(warm)


@pytest.mark.timeout(60)
def test_close_all_ends_every_parser(fake_python):
    _ask(fake_python, env=_env(MARK="a"))
    _ask(fake_python, env=_env(MARK="b"))
    pids = argworker.running()
    assert len(pids) == 2
    argworker.close_all()
    assert all(_gone(p) for p in pids) and argworker.running() == []


@pytest.mark.timeout(60)
def test_a_parser_whose_client_died_ends_on_its_closed_input(fake_python, tmp_path):
    # another Python asks once and is then SIGKILLed: nothing closes the parser but its stdin's end
    import subprocess
    code = (f"import sys, os; sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})\n"
            "from backend.sglang import argworker\n"
            f"argworker.ask({fake_python!r}, dict(os.environ), {{'base': [], 'groups': [], 'fields': ['tp_size']}}, 30)\n"
            "print(argworker.running()[0], flush=True)\n"
            "import time; time.sleep(60)\n")
    client = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(client.stdout.readline())
        assert not _gone(pid)
        client.kill()
        client.wait(timeout=10)
        assert _wait_gone(pid)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait(timeout=10)


@pytest.mark.timeout(60)
def test_a_server_config_warms_its_parser_and_its_check_then_uses_it(fake_python, llama):
    from backend.sglang import argcheck
    from backend.sglang.version import capabilities, clear_cache

    clear_cache()
    argcheck.clear_cache()
    cfg = server_cfg(llama["target"], llama["draft"], python=fake_python, sglang_version="0.5.23", gpus=[2, 3])
    caps = capabilities("0.5.23")
    started = argworker.stats.started
    argcheck.warm_parser(cfg, caps)  # returns at once; a thread starts the parser
    deadline = time.monotonic() + 30
    while not argworker.running() and time.monotonic() < deadline:
        time.sleep(0.02)
    (warm,) = argworker.running()
    check = argcheck.check_argv(cfg, caps)
    assert check.checker == "sglang" and check.version == "0.5.23"
    assert argworker.stats.started == started + 1 and argworker.running() == [warm]
    # a simulated server has no parser to warm
    argcheck.warm_parser(cfg.model_copy(update={"simulate": True}), caps)
    time.sleep(0.3)
    assert argworker.running() == [warm]
    clear_cache()


@pytest.mark.timeout(120)
def test_the_servers_page_keeps_the_shown_servers_parser_warm(fake_python, llama, tmp_path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    from tests.helpers import close_runtime, free_port

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "specdeck.toml").write_text(f"""[workspace]
name = "warm"

[telemetry]
source = "fake"

[[server]]
name = "real"
model_path = "{llama['target']}"
python = "{fake_python}"
port = {free_port()}
sglang_version = "0.5.23"

[server.speculative]
algorithm = "EAGLE3"
draft_model_path = "{llama['draft']}"
""")
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(ws))
    page = str(Path(__file__).resolve().parents[2] / "app_pages" / "servers.py")
    try:
        at = AppTest.from_file(page, default_timeout=60).run()
        assert not at.exception, at.exception
        assert argworker.running()  # the page's first preflight asked it
        # as if it had ended idle; a start the first run's warm-up still had under way registers after a first
        # close, so close until none is left
        deadline = time.monotonic() + 30
        while True:
            argworker.close_all()
            time.sleep(0.3)
            if not argworker.running() or time.monotonic() > deadline:
                break
        assert not argworker.running()
        started = argworker.stats.started
        at.run()  # the next page run (its preflight answer is kept): the parser is started again
        deadline = time.monotonic() + 30
        while not argworker.running() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert argworker.running() and argworker.stats.started == started + 1
    finally:
        close_runtime(ws, source="teardown")
