"""The runtime's control methods refuse a network request without a signed-in user, and
every audit entry names the user and the client address (migration 0004)."""

from __future__ import annotations

import sys
import time

import pytest

from backend.auth import Caller, NotAuthorised
from backend.runtime import Runtime
from backend.flows.workspace import load_workspace
from state import Store, audit
from state import store as store_mod

REMOTE = Caller("0.0.0.0", "10.213.0.2")


@pytest.fixture
def rt(tmp_path):
    (tmp_path / "specdeck.toml").write_text(f"""
[workspace]
name = "auth"

[telemetry]
source = "fake"

[[process]]
name = "sleeper"
argv = ["{sys.executable}", "-c", "import time; time.sleep(120)"]
stop_grace_s = 5
""")
    r = Runtime(load_workspace(tmp_path), background=False)
    yield r
    for v in r.supervisor.views():
        if v.live:
            r.supervisor.stop(v.name, actor="test", source="test", wait=True)
    r.close()


def _wait_live(rt, name, timeout=20.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        rt.supervisor.poll()
        if rt.supervisor.view(name).state.value in ("RUNNING", "STARTING") and rt.supervisor.view(name).pid:
            return
        time.sleep(0.05)
    raise AssertionError(f"{name} did not start: {rt.supervisor.view(name)}")


def test_a_network_request_without_sign_in_is_refused_by_the_runtime(rt):
    for call in (lambda: rt.start("sleeper", actor=REMOTE, source="dashboard"),
                 lambda: rt.restart("sleeper", actor=REMOTE, source="dashboard"),
                 lambda: rt.stop("sleeper", actor=REMOTE, source="dashboard"),
                 lambda: rt.launch("no-such-server", None, actor=REMOTE, source="dashboard")):
        with pytest.raises(NotAuthorised, match="no user is configured"):
            call()
    assert rt.supervisor.view("sleeper").pid is None  # nothing was started
    entries = audit.recent(rt.store, limit=10)
    assert [(e.action, e.outcome, e.actor, e.client) for e in reversed(entries)] == [
        ("start", "refused", "anonymous", "10.213.0.2"), ("restart", "refused", "anonymous", "10.213.0.2"),
        ("stop", "refused", "anonymous", "10.213.0.2"), ("launch", "refused", "anonymous", "10.213.0.2")]


def test_a_signed_in_user_acts_and_the_audit_names_them_and_their_address(rt):
    rt.auth.users.add("alice", "alice-password-1")
    with pytest.raises(NotAuthorised, match="Sign in to start"):
        rt.start("sleeper", actor=REMOTE, source="dashboard")
    token = rt.auth.login(REMOTE, "alice", "alice-password-1").token
    me = Caller("0.0.0.0", "10.213.0.2", token=token)
    rt.start("sleeper", actor=me, source="dashboard")
    _wait_live(rt, "sleeper")
    rt.stop("sleeper", actor=me, source="dashboard")
    got = [(e.action, e.outcome, e.actor, e.client) for e in reversed(audit.recent(rt.store, limit=10))
           if e.action in ("start", "stop", "login")]
    assert got == [("start", "refused", "anonymous", "10.213.0.2"), ("login", "ok", "alice", "10.213.0.2"),
                   ("start", "ok", "alice", "10.213.0.2"), ("stop", "ok", "alice", "10.213.0.2")]


def test_loopback_is_audited_as_local_and_this_hosts_code_as_itself(rt):
    with pytest.raises(NotAuthorised, match="token"):  # a loopback browser without the dashboard's token
        rt.start("sleeper", actor=Caller("127.0.0.1", "127.0.0.1", local_token="guess"), source="dashboard")
    rt.start("sleeper", actor=Caller("127.0.0.1", "127.0.0.1", local_token=rt.access_token), source="dashboard")
    _wait_live(rt, "sleeper")
    rt.stop("sleeper", actor="ops", source="cli")
    got = [(e.action, e.actor, e.client) for e in reversed(audit.recent(rt.store, limit=10))]
    assert got[-3:] == [("start", "anonymous", "127.0.0.1"), ("start", "local", "127.0.0.1"), ("stop", "ops", "local")]


def test_migration_0004_adds_the_client_column_and_keeps_old_entries(tmp_path, monkeypatch):
    path = tmp_path / "state.db"
    all_migrations = store_mod.load_migrations()
    assert [name for _v, name, _sql in all_migrations][3] == "0004_audit_client.sql"
    monkeypatch.setattr(store_mod, "load_migrations", lambda: all_migrations[:3])
    with Store(path) as old:
        old.execute("INSERT INTO audit_log (at, actor, source, action, target) VALUES (1, 'bob', 'cli', 'stop', 'x')")
    monkeypatch.setattr(store_mod, "load_migrations", lambda: all_migrations)
    with Store(path) as new:
        assert new.schema_version() >= 4
        (before,) = audit.recent(new)
        assert (before.actor, before.client) == ("bob", "")
        with audit.acting_from("10.213.0.2"):
            inside = audit.record(new, "alice", "dashboard", "stop", "x")
        outside = audit.record(new, "ops", "cli", "stop", "x")
        assert [(e.actor, e.client) for e in audit.recent(new)] == [("ops", "local"), ("alice", "10.213.0.2"),
                                                                    ("bob", "")]
        assert inside.client == "10.213.0.2" and outside.client == "local"


def test_audit_refuses_an_actor_that_is_not_a_name(tmp_path):
    with Store(tmp_path / "s.db") as s, pytest.raises(TypeError, match="must be a name"):
        audit.record(s, REMOTE, "dashboard", "stop", "x")  # a request object must be resolved first
