"""AppTest of the login gate: nothing before sign-in off loopback (unless the workspace opts in to
anonymous viewing, which is read-only), the sign-in form, roles, the loopback token, the audit user.

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
PAGES = ("app_pages/servers.py", "app_pages/processes.py", "app_pages/gpus.py")


ANONYMOUS_VIEW = "[access]\nanonymous_view = true\n"


@pytest.fixture
def workspace(tmp_path, monkeypatch, request):
    access = getattr(request, "param", "")
    (tmp_path / "specdeck.toml").write_text(f"""
[workspace]
name = "authtest"

[telemetry]
source = "fake"
{access}

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


def _only_sign_in(at: AppTest, workspace: Path) -> None:
    """The run drew the sign-in page and nothing else: no sidebar, no page, no workspace."""
    assert [t.value for t in at.title] == ["Sign in"], ([t.value for t in at.title], at.exception, at.main)
    assert not at.sidebar.children or not any(at.sidebar.get(k) for k in ("markdown", "caption", "page_link"))
    shown = " ".join(str(e.value) for kind in ("markdown", "caption", "warning", "error", "info")
                     for e in at.get(kind) if isinstance(getattr(e, "value", None), str))
    for secret in ("authtest", "ticker", str(workspace)):
        assert secret not in shown, secret
    assert not [b for b in at.button if b.label in ("Start", "Stop", "Restart", "Yes, stop")]


@pytest.mark.timeout(120)
def test_exposed_without_users_shows_nothing_and_says_why(workspace, listen):
    listen("0.0.0.0", "10.213.0.2")
    rt = runtime_mod.get_runtime()
    _wait_state(rt, "ticker", {"RUNNING"})
    at = _app()
    _only_sign_in(at, workspace)
    assert any("No user is configured" in w.value for w in at.warning)
    for page in PAGES:  # a page run on its own, without the frame, draws nothing at all
        alone = AppTest.from_file(str(REPO / page), default_timeout=60)
        alone.run()
        assert not alone.exception and not alone.main.children and not alone.sidebar.children, page
    # a confirmation forced into the session state reaches no page
    at.session_state["confirm-stop"] = True
    at.run()
    _only_sign_in(at, workspace)
    rt.supervisor.poll()
    assert rt.supervisor.view("ticker").state.value == "RUNNING"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("workspace", [ANONYMOUS_VIEW], indirect=True)
def test_anonymous_view_is_read_only_and_says_why(workspace, listen):
    listen("0.0.0.0", "10.213.0.2")
    rt = runtime_mod.get_runtime()
    _wait_state(rt, "ticker", {"RUNNING"})
    at = _app()
    banner = [e.value for e in at.error if "Read-only" in e.value]
    assert banner, "no read-only banner from the frame"
    assert "listening on 0.0.0.0, connected from 10.213.0.2" in banner[0]
    assert "python -m backend.cli --workspace WORKSPACE users add NAME" in banner[0]
    assert str(workspace) not in " ".join(c.value for c in at.sidebar.caption)  # no workspace path
    assert any("Read-only" in c.value for c in at.sidebar.caption)
    assert not at.sidebar.get("page_link")  # nobody to sign in as: no sign-in page
    _goto(at, "app_pages/processes.py")
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


def _signed_in(at: AppTest, rt, name: str, password: str, peer: str = "10.213.0.2") -> AppTest:
    """Sign in as the sign-in page does (the page's form itself is driven in a browser in
    tests/e2e/test_exposed_netns.py: AppTest loses a form's values on the gate's function page)."""
    from backend.auth import Caller
    from ui.auth import TOKEN_KEY

    at.session_state[TOKEN_KEY] = rt.auth.login(Caller("0.0.0.0", peer), name, password).token
    at.run()
    assert not at.exception, at.exception
    return at


@pytest.mark.timeout(180)
@pytest.mark.parametrize("workspace", [ANONYMOUS_VIEW], indirect=True)
def test_sign_in_form_unlocks_control_and_the_audit_names_the_user(workspace, listen):
    UserStore(workspace / "users.toml").add("alice", "alice-password-1")
    listen("0.0.0.0", "10.213.0.2")
    rt = runtime_mod.get_runtime()
    _wait_state(rt, "ticker", {"RUNNING"})
    at = _app()
    assert any("Sign in to start, stop or relaunch" in w.value for w in at.warning)
    assert [p.proto.label for p in at.sidebar.get("page_link")] == ["Sign in to control"]
    _goto(at, "app_pages/processes.py")
    assert all(_buttons(at)[k].disabled for k in ("Start", "Stop", "Restart"))
    assert "Sign in to start" in _buttons(at)["Stop"].help

    _goto(at, "app_pages/login.py")
    assert [t.value for t in at.title] == ["Sign in"]
    _sign_in(at, "alice", "not-her-password")
    assert any("Unknown user name or wrong password" in e.value for e in at.error)
    _sign_in(at, "alice", "alice-password-1")
    assert not at.exception, at.exception
    assert [t.value for t in at.title] == ["Overview"]  # back to the first page, the one at /

    _goto(at, "app_pages/processes.py")
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
    at = _signed_in(_app(), rt, "alice", "alice-password-1")
    _goto(at, "app_pages/processes.py")
    assert not _buttons(at)["Stop"].disabled
    now[0] += 30 * 60 - 1
    at.run()  # a page run is activity: 1 s short of 30 min it finds the session alive, and keeps it so
    assert not _buttons(at)["Stop"].disabled
    now[0] += 30 * 60  # 30 min since that run
    at.run()
    _only_sign_in(at, workspace)
    assert any("30 min without activity" in i.value for i in at.info)
    from ui.auth import TOKEN_KEY

    assert TOKEN_KEY not in at.session_state  # the ended session's token is dropped


@pytest.mark.timeout(180)
def test_a_viewer_sees_the_pages_and_acts_on_nothing(workspace, listen):
    UserStore(workspace / "users.toml").add("bob", "bob-password-1", role="viewer")
    listen("0.0.0.0", "10.213.0.2")
    rt = runtime_mod.get_runtime()
    _wait_state(rt, "ticker", {"RUNNING"})
    at = _app()
    _only_sign_in(at, workspace)
    _signed_in(at, rt, "bob", "bob-password-1")
    assert [t.value for t in at.title] == ["Overview"]
    assert any("bob" in c.value and "viewer" in c.value for c in at.sidebar.caption)
    _goto(at, "app_pages/processes.py")
    b = _buttons(at)
    for label in ("Start", "Stop", "Restart"):
        assert b[label].disabled and "viewer role" in b[label].help, label
    at.session_state["confirm-stop"] = True  # a press the page would not offer
    at.run()
    _buttons(at)["Yes, stop"].click()
    at.run()
    assert any("viewer role" in e.value and "Could not stop" in e.value for e in at.error)
    rt.supervisor.poll()
    assert rt.supervisor.view("ticker").state.value == "RUNNING"
    last = audit.recent(rt.store, limit=1)[0]
    assert (last.action, last.outcome, last.actor, last.client) == ("stop", "refused", "bob", "10.213.0.2")
    # made an operator on the host: the session ends (the role it signed in with changed)
    UserStore(workspace / "users.toml").set_role("bob", "operator")
    at.run()
    _only_sign_in(at, workspace)
    assert any("role changed" in i.value for i in at.info)


@pytest.mark.timeout(120)
def test_loopback_controls_as_local_with_the_token_only(workspace, listen):
    from ui.auth import LOCAL_TOKEN_KEY

    listen("127.0.0.1", "127.0.0.1")
    rt = runtime_mod.get_runtime()
    _wait_state(rt, "ticker", {"RUNNING"})
    at = _app()  # a browser on this host without the token: the token page only
    assert [t.value for t in at.title] == ["Open Specdeck"]
    assert not at.sidebar.children or not at.sidebar.get("markdown")
    at.query_params["token"] = "not-the-token"
    at.run()
    assert [t.value for t in at.title] == ["Open Specdeck"]
    at.query_params["token"] = rt.access_token  # the URL printed at start
    at.run()
    assert "token" not in at.query_params  # taken out of the address bar
    assert at.session_state[LOCAL_TOKEN_KEY] == rt.access_token
    _goto(at, "app_pages/processes.py")
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

[access]
anonymous_view = true

[[server]]
name = "sim"
model_path = "{target}"
port = {free_port()}
simulate = true
""")
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
    listen("0.0.0.0", "10.213.0.2")
    try:
        at = _goto(_app(), "app_pages/servers.py")
        b = _buttons(at)
        for label in ("Start…", "Stop"):
            assert b[label].disabled and "Read-only" in b[label].help, label
        assert b["Run preflight"].disabled and "Read-only" in b["Run preflight"].help  # it runs a program
    finally:
        runtime_mod.close_all()
