"""AppTest of the login gate: read-only without users, the sign-in form, the audit user.

The listening address is Streamlit's own ``server.address`` option, set as
``--server.address`` would; the browser session's peer address comes from a
stand-in for ``ui.auth.peer_address`` (AppTest has no network connection).
AppTest shows the frame's own elements (banner, sidebar) only on the first
run; the browser test (tests/e2e/test_exposed_netns.py) checks them on every page.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from streamlit import config as st_config
from streamlit.testing.v1 import AppTest

from backend import runtime as runtime_mod
from backend.auth import UserStore
from state import audit
from tests.helpers import close_runtime

REPO = Path(__file__).resolve().parents[2]
PAGES = ("pages/servers.py", "pages/processes.py", "pages/gpus.py")


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    (tmp_path / "specdeck.toml").write_text(f"""
[workspace]
name = "authtest"

[telemetry]
source = "fake"

[[process]]
name = "ticker"
argv = ["{sys.executable}", "-m", "backend.demo", "ticker", "--interval", "0.2"]
cwd = "{REPO}"
autostart = true
stop_grace_s = 5
""")
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
    yield tmp_path
    close_runtime(tmp_path)


@pytest.fixture
def listen(monkeypatch):
    """Set Streamlit's server.address for the test (restored afterwards)."""
    before = st_config.get_option("server.address")

    def set_(address: str, peer: str) -> None:
        st_config.set_option("server.address", address)
        monkeypatch.setattr("ui.auth.peer_address", lambda: peer)

    yield set_
    st_config.set_option("server.address", before)


def _wait_state(rt, name, states, timeout=20.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        rt.supervisor.poll()
        if rt.supervisor.view(name).state.value in states:
            return
        time.sleep(0.1)
    raise AssertionError(f"{name}: {rt.supervisor.view(name).state.value}, wanted {states}")


def _app() -> AppTest:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    return at


def _goto(at: AppTest, page: str) -> AppTest:
    at.switch_page(page)
    at.run()
    assert not at.exception, at.exception
    return at


def _buttons(at: AppTest) -> dict[str, object]:
    return {b.label: b for b in at.button}


def _sign_in(at: AppTest, name: str, password: str) -> AppTest:
    """Fill in the sign-in page's form and press "Sign in"."""
    at.text_input(key="login-name").input(name)
    at.text_input(key="login-password").input(password)
    [b for b in at.button if b.label == "Sign in"][0].click()
    at.run()
    return at


@pytest.mark.timeout(120)
def test_exposed_without_users_is_read_only_and_says_why(workspace, listen):
    listen("0.0.0.0", "10.213.0.2")
    rt = runtime_mod.get_runtime()
    _wait_state(rt, "ticker", {"RUNNING"})
    at = _app()
    banner = [e.value for e in at.error if "Read-only" in e.value]
    assert banner, "no read-only banner from the frame"
    assert "listening on 0.0.0.0, connected from 10.213.0.2" in banner[0]
    assert f"python -m backend.cli --workspace {workspace} users add NAME" in banner[0]
    assert any("Read-only" in c.value for c in at.sidebar.caption)
    assert not at.sidebar.get("page_link")  # nobody to sign in as: no sign-in page
    _goto(at, "pages/processes.py")
    b = _buttons(at)
    for label in ("Start", "Stop", "Restart"):
        assert b[label].disabled, label
        assert "Read-only" in b[label].help
    # a click that reaches the page anyway (a crafted message) is refused by the runtime
    at.session_state["confirm-stop"] = True
    at.run()
    _buttons(at)["Yes, stop"].click()
    at.run()
    assert any("Read-only" in e.value and "Could not stop" in e.value for e in at.error)
    rt.supervisor.poll()
    assert rt.supervisor.view("ticker").state.value == "RUNNING"
    last = audit.recent(rt.store, limit=1)[0]
    assert (last.action, last.outcome, last.actor, last.client) == ("stop", "refused", "anonymous", "10.213.0.2")


@pytest.mark.timeout(180)
def test_sign_in_form_unlocks_control_and_the_audit_names_the_user(workspace, listen):
    UserStore(workspace / "users.toml").add("alice", "alice-password-1")
    listen("0.0.0.0", "10.213.0.2")
    rt = runtime_mod.get_runtime()
    _wait_state(rt, "ticker", {"RUNNING"})
    at = _app()
    assert any("Sign in to start, stop or relaunch" in w.value for w in at.warning)
    assert [p.proto.label for p in at.sidebar.get("page_link")] == ["Sign in to control"]
    _goto(at, "pages/processes.py")
    assert all(_buttons(at)[k].disabled for k in ("Start", "Stop", "Restart"))
    assert "Sign in to start" in _buttons(at)["Stop"].help

    _goto(at, "pages/login.py")
    assert [t.value for t in at.title] == ["Sign in"]
    _sign_in(at, "alice", "not-her-password")
    assert any("Unknown user name or wrong password" in e.value for e in at.error)
    _sign_in(at, "alice", "alice-password-1")
    assert not at.exception, at.exception
    assert [t.value for t in at.title] == ["Servers"]  # back to the first page

    _goto(at, "pages/processes.py")
    b = _buttons(at)
    assert not b["Stop"].disabled and not b["Restart"].disabled
    b["Stop"].click()
    at.run()
    _buttons(at)["Yes, stop"].click()
    at.run()
    assert not at.exception, at.exception
    _wait_state(rt, "ticker", {"EXITED", "FATAL"})
    stop = [e for e in audit.recent(rt.store, limit=10) if e.action == "stop"][0]
    assert (stop.actor, stop.client, stop.outcome) == ("alice", "10.213.0.2", "ok")
    at.run()
    table = at.table[-1].value  # the audit log, newest first
    assert list(table.columns[:3]) == ["at", "actor", "client"]
    assert (table.iloc[0]["actor"], table.iloc[0]["client"], table.iloc[0]["action"]) == ("alice", "10.213.0.2", "stop")

    assert rt.auth.access(ui_caller(rt, at)).actor == "alice"


def ui_caller(rt, at):
    from backend.auth import Caller
    from ui.auth import TOKEN_KEY

    return Caller("0.0.0.0", "10.213.0.2", token=at.session_state[TOKEN_KEY])


@pytest.mark.timeout(120)
def test_an_idle_session_ends_after_30_minutes(workspace, listen):
    UserStore(workspace / "users.toml").add("alice", "alice-password-1")
    listen("0.0.0.0", "10.213.0.2")
    rt = runtime_mod.get_runtime()
    now = [time.time()]
    rt.auth.sessions.clock = lambda: now[0]
    at = _sign_in(_goto(_app(), "pages/login.py"), "alice", "alice-password-1")
    _goto(at, "pages/processes.py")
    assert not _buttons(at)["Stop"].disabled
    now[0] += 30 * 60 - 1
    at.run()
    assert not _buttons(at)["Stop"].disabled
    now[0] += 1
    at.run()
    assert _buttons(at)["Stop"].disabled and "Sign in to start" in _buttons(at)["Stop"].help
    assert rt.auth.access(ui_caller(rt, at)).mode == "sign-in"


@pytest.mark.timeout(120)
def test_loopback_controls_without_sign_in_as_local(workspace, listen):
    listen("127.0.0.1", "127.0.0.1")
    rt = runtime_mod.get_runtime()
    _wait_state(rt, "ticker", {"RUNNING"})
    at = _goto(_app(), "pages/processes.py")
    assert not [w for w in at.warning if "Sign in" in w.value] and not [e for e in at.error if "Read-only" in e.value]
    _buttons(at)["Stop"].click()
    at.run()
    _buttons(at)["Yes, stop"].click()
    at.run()
    _wait_state(rt, "ticker", {"EXITED", "FATAL"})
    stop = [e for e in audit.recent(rt.store, limit=10) if e.action == "stop"][0]
    assert (stop.actor, stop.client) == ("local", "127.0.0.1")


@pytest.mark.timeout(120)
def test_servers_page_locks_launch_and_stop_with_the_reason(tmp_path, monkeypatch, listen):
    from backend.sim.models import make_target_dir
    from tests.helpers import free_port

    target = make_target_dir(tmp_path / "m" / "target")
    (tmp_path / "specdeck.toml").write_text(f"""
[workspace]
name = "srvlock"

[telemetry]
source = "fake"

[[server]]
name = "sim"
model_path = "{target}"
port = {free_port()}
simulate = true
""")
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
    listen("0.0.0.0", "10.213.0.2")
    try:
        at = _goto(_app(), "pages/servers.py")
        b = _buttons(at)
        for label in ("Start…", "Stop"):
            assert b[label].disabled and "Read-only" in b[label].help, label
        assert not b["Run preflight"].disabled  # reading stays open
    finally:
        runtime_mod.close_all()
