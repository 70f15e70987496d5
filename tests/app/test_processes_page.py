"""AppTest of the Processes page against a real runtime and real child processes."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from backend import runtime as runtime_mod
from tests.helpers import close_runtime, shown_text

REPO = Path(__file__).resolve().parents[2]


def _config(py: str) -> str:
    return f"""
[workspace]
name = "apptest"

[[process]]
name = "ticker"
argv = [{py!r}, "-m", "backend.demo", "ticker", "--interval", "0.2"]
cwd = {str(REPO)!r}
autostart = true
stop_grace_s = 5

[[process]]
name = "oneshot"
kind = "benchmark"
argv = [{py!r}, "-c", "import sys; print(1); sys.exit(3)"]

[[process]]
name = "access"
kind = "other"
argv = [{py!r}, "ACCESS_SCRIPT"]
""".replace("'", '"')


# a process whose log holds the dashboard's probe requests among a user's request, as SGLang logs them
ACCESS_LINES = [
    '[2025-06-01 10:00:00] INFO:     127.0.0.1:51234 - "GET /health HTTP/1.1" 200 OK',
    '[2025-06-01 10:00:00] INFO:     127.0.0.1:51236 - "GET /metrics HTTP/1.1" 200 OK',
    '[2025-06-01 10:00:01] INFO:     127.0.0.1:51238 - "POST /generate HTTP/1.1" 200 OK',
    '[2025-06-01 10:00:02] INFO:     127.0.0.1:51240 - "GET /server_info HTTP/1.1" 200 OK',
    "the last line",
]


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    script = tmp_path / "access.py"
    script.write_text("".join(f"print({line!r})\n" for line in ACCESS_LINES))
    (tmp_path / "specdeck.toml").write_text(_config(sys.executable).replace("ACCESS_SCRIPT", str(script)))
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
    yield tmp_path
    close_runtime(tmp_path)


def _wait_state(rt, name: str, states: set[str], timeout: float = 20.0) -> str:
    deadline = time.time() + timeout
    state = ""
    while time.time() < deadline:
        rt.supervisor.poll()
        v = rt.supervisor.view(name)
        state = str(getattr(v.state, "value", v.state))
        if state in states:
            return state
        time.sleep(0.1)
    raise AssertionError(f"{name} stayed {state}, wanted {states}")


def _processes_page(at: AppTest) -> AppTest:
    at.run()
    at.switch_page("app_pages/processes.py")
    at.run()
    assert not at.exception, at.exception
    return at


@pytest.mark.timeout(90)
def test_stop_button_stops_the_process_and_is_audited(workspace):
    rt = runtime_mod.get_runtime()
    _wait_state(rt, "ticker", {"RUNNING"})
    at = _processes_page(AppTest.from_file(str(REPO / "app.py"), default_timeout=30))

    assert any("Processes" in t.value for t in at.title)
    table = at.table[0].value
    row = table[table["name"] == "ticker"].iloc[0]
    assert "RUNNING" in row["state"]
    assert int(row["pid"]) == rt.supervisor.view("ticker").pid

    at.selectbox(key="proc-selected").select("ticker").run()
    at.button(key="btn-stop").click().run()
    # a confirmation is asked first: nothing stopped yet
    assert any("Stop **ticker**" in w.value for w in at.warning)
    assert str(rt.supervisor.view("ticker").state.value) == "RUNNING"
    at.button(key="confirm-stop-yes").click().run()
    assert not at.exception, at.exception

    assert _wait_state(rt, "ticker", {"EXITED"}) == "EXITED"
    from state import audit

    entries = [e for e in audit.recent(rt.store, limit=20) if e.target == "ticker" and e.action == "stop"]
    assert entries and entries[0].source == "dashboard"
    at.run()
    table = at.table[0].value
    assert table[table["name"] == "ticker"].iloc[0]["state"] == "■ STOPPED"  # not a failure, not a finish


@pytest.mark.timeout(90)
def test_exited_process_shows_its_exit_code(workspace):
    rt = runtime_mod.get_runtime()
    rt.supervisor.start("oneshot", actor="test", source="test")
    _wait_state(rt, "oneshot", {"EXITED"})
    at = _processes_page(AppTest.from_file(str(REPO / "app.py"), default_timeout=30))
    table = at.table[0].value
    row = table[table["name"] == "oneshot"].iloc[0]
    assert row["state"] == "✕ EXITED 3"  # the exit code is part of the state
    # a process not running has no uptime and no pid: N/A, never a blank cell, here and in its history
    assert (row["uptime"], row["pid"]) == ("N/A", "N/A")
    assert "" not in set(table.astype(str).stack())
    at.selectbox(key="proc-selected").select("oneshot").run()
    history = at.table[1].value
    assert "" not in set(history.astype(str).stack()) and "N/A" in set(history.astype(str).stack())


@pytest.mark.timeout(90)
def test_log_tail_shows_the_newest_line_with_its_age_and_hides_probe_requests(workspace):
    rt = runtime_mod.get_runtime()
    rt.supervisor.start("access", actor="test", source="test")
    _wait_state(rt, "access", {"EXITED"})
    at = _processes_page(AppTest.from_file(str(REPO / "app.py"), default_timeout=30))
    at.selectbox(key="proc-selected").select("access").run()
    assert not at.exception, at.exception
    table = at.table[0].value
    assert table[table["name"] == "access"].iloc[0]["state"] == "✓ FINISHED (exit 0)"
    latest = shown_text(at)[1].splitlines()  # [0] is the command
    ours = [line for line in latest if not line.startswith("=====")]  # the supervisor's start/exit banners
    assert ours == [ACCESS_LINES[2], ACCESS_LINES[4]]  # the user's request and the program's last line, no probes
    assert "exit code 0" in latest[-1]  # the newest line (the exit banner) at the bottom, not scrolled away
    caption = next(c.value for c in at.caption if "newest line written" in c.value)
    assert "3 probe request line(s) hidden" in caption
    at.toggle(key="proc-log-probes").set_value(True).run()
    assert [line for line in shown_text(at)[1].splitlines() if not line.startswith("=====")] == ACCESS_LINES


@pytest.mark.timeout(90)
def test_state_history_and_audit_show_an_action_in_the_same_run(workspace):
    rt = runtime_mod.get_runtime()
    _wait_state(rt, "ticker", {"RUNNING"})
    at = _processes_page(AppTest.from_file(str(REPO / "app.py"), default_timeout=30))
    at.selectbox(key="proc-selected").select("ticker").run()
    at.button(key="btn-stop").click().run()
    at.button(key="confirm-stop-yes").click().run()
    assert not at.exception, at.exception
    tables = [t.value for t in at.table]
    history = next(t for t in tables if "to" in t.columns)
    audit_log = next(t for t in tables if "action" in t.columns)
    assert history.iloc[0]["to"] == "STOPPING"
    assert (audit_log.iloc[0]["action"], audit_log.iloc[0]["target"]) == ("stop", "ticker")


@pytest.mark.timeout(90)
def test_start_and_restart_buttons_ask_first_then_act(workspace):
    rt = runtime_mod.get_runtime()
    _wait_state(rt, "ticker", {"RUNNING"})
    at = _processes_page(AppTest.from_file(str(REPO / "app.py"), default_timeout=30))

    at.selectbox(key="proc-selected").select("oneshot").run()
    at.button(key="btn-start").click().run()
    assert rt.supervisor.view("oneshot").started_at is None  # only asked so far
    at.button(key="confirm-start-yes").click().run()
    assert not at.exception, at.exception
    assert _wait_state(rt, "oneshot", {"EXITED"}) == "EXITED"
    assert rt.supervisor.view("oneshot").exit_code == 3

    at.selectbox(key="proc-selected").select("ticker").run()
    first_pid = rt.supervisor.view("ticker").pid
    at.button(key="btn-restart").click().run()
    assert rt.supervisor.view("ticker").pid == first_pid
    at.button(key="confirm-restart-yes").click().run()
    assert not at.exception, at.exception
    deadline = time.time() + 30
    while time.time() < deadline:
        rt.supervisor.poll()
        v = rt.supervisor.view("ticker")
        if v.state.value == "RUNNING" and v.pid != first_pid:
            break
        time.sleep(0.1)
    else:
        raise AssertionError(f"ticker was not restarted: {v.state.value} pid {v.pid}")
    from state import audit

    actions = {(e.action, e.target) for e in audit.recent(rt.store, limit=50) if e.source == "dashboard"}
    assert {("start", "oneshot"), ("restart", "ticker")} <= actions


@pytest.mark.timeout(60)
def test_cancel_leaves_the_process_alone(workspace):
    rt = runtime_mod.get_runtime()
    _wait_state(rt, "ticker", {"RUNNING"})
    pid = rt.supervisor.view("ticker").pid
    at = _processes_page(AppTest.from_file(str(REPO / "app.py"), default_timeout=30))
    at.selectbox(key="proc-selected").select("ticker").run()
    at.button(key="btn-stop").click().run()
    at.button(key="confirm-stop-no").click().run()
    assert not at.exception, at.exception
    assert not any("Stop **ticker**" in w.value for w in at.warning)  # the question is gone
    rt.supervisor.poll()
    v = rt.supervisor.view("ticker")
    assert v.state.value == "RUNNING" and v.pid == pid


@pytest.mark.timeout(90)
def test_sidebar_counts_say_what_they_count(workspace):
    rt = runtime_mod.get_runtime()
    _wait_state(rt, "ticker", {"RUNNING"})
    rt.supervisor.start("access", actor="test", source="test")
    _wait_state(rt, "access", {"EXITED"})
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=30).run()  # the frame draws the sidebar
    assert not at.exception, at.exception
    side = [m.value for m in at.sidebar.markdown]
    assert "**Servers** (0)" in side  # this workspace has no [[server]]
    assert "**Managed processes** (3, servers included)" in side
    captions = [c.value for c in at.sidebar.caption]
    assert "1 finished (exit 0) · 1 not started · 1 running" in captions


@pytest.mark.timeout(90)
def test_the_alerts_section_lists_what_fires_with_its_actions(tmp_path, monkeypatch):
    (tmp_path / "specdeck.toml").write_text('[workspace]\nname = "alerted"\n\n[telemetry]\nsource = "fake"\n\n'
                                            '[alerts]\ndisk_min_free_gb = 1000000\n')
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
    try:
        rt = runtime_mod.get_runtime()
        rt.alert_loop.run_once()  # any disk is nearly full by this measure
        at = _processes_page(AppTest.from_file(str(REPO / "app.py"), default_timeout=30))
        assert any(h.value == "Alerts" for h in at.subheader)
        assert any("disk" in str(m.value).lower() for m in [*at.markdown, *at.warning, *at.error])
        assert any("Acknowledge" in b.label for b in at.button)
    finally:
        close_runtime(tmp_path)
