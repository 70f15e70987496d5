"""Roles in the users file, the ``users`` command's --role / role / list, and the role a session holds."""

from __future__ import annotations

import io
import json

import pytest

from backend.auth import ROLES, Authority, Caller, SessionStore, UsersError, UserStore
from backend.auth.sessions import LoginThrottle
from backend.auth.users import parse_users

HASH = "$argon2id$v=19$m=1024,t=1,p=1$c2FsdHNhbHQ$aGFzaA"


def test_roles_are_viewer_and_operator():
    assert ROLES == ("viewer", "operator")


def test_a_table_without_role_reads_as_operator_and_a_role_is_read():
    users = parse_users(f'[users.alice]\nhash = "{HASH}"\n\n[users.bob]\nhash = "{HASH}"\nrole = "viewer"\n'
                        f'\n[users.carol]\nhash = "{HASH}"\nrole = "operator"\n', "users.toml")
    assert {n: u.role for n, u in users.items()} == {"alice": "operator", "bob": "viewer", "carol": "operator"}


@pytest.mark.parametrize("value, shown", [('"admin"', "'admin'"), ('"Viewer"', "'Viewer'"), ("1", "1")])
def test_an_unknown_role_names_file_line_and_field(value, shown):
    text = (f'[users.alice]\nhash = "{HASH}"\nrole = "viewer"\n\n'
            f'[users.bob]\nhash = "{HASH}"\ncreated = "2026-11-30T09:00:00Z"\nrole = {value}\n')
    with pytest.raises(UsersError) as exc:
        parse_users(text, "users.toml")
    assert str(exc.value) == f"users.toml: line 8: users.bob.role: unknown role {shown} (known: viewer, operator)"


def test_a_file_with_an_unknown_role_admits_nobody(tmp_path, cheap_hasher):
    path = tmp_path / "users.toml"
    store = UserStore(path, hasher=cheap_hasher)
    store.add("alice", "alice-password-1")
    path.write_text(path.read_text().replace('role = "operator"', 'role = "root"'))
    assert store.users() == {} and "users.alice.role: unknown role 'root'" in str(store.error())


def test_add_writes_the_role_and_set_role_changes_only_the_role(tmp_path, cheap_hasher):
    store = UserStore(tmp_path / "users.toml", hasher=cheap_hasher)
    assert store.add("alice", "alice-password-1").role == "operator"
    assert store.add("bob", "bob-password-12", role="viewer", now=1_800_000_000).role == "viewer"
    text = (tmp_path / "users.toml").read_text()
    assert 'role = "viewer"' in text and 'role = "operator"' in text
    before = store.get("bob")
    store.set_role("bob", "operator")
    after = store.get("bob")
    assert after.role == "operator"
    assert (after.hash, after.created, after.changed) == (before.hash, before.created, before.changed)
    with pytest.raises(UsersError, match="unknown role 'admin'"):
        store.set_role("bob", "admin")
    with pytest.raises(UsersError, match="no user named 'carol'"):
        store.set_role("carol", "viewer")
    with pytest.raises(UsersError, match="unknown role 'admin'"):
        store.add("carol", "carol-password-1", role="admin")
    assert sorted(store.users()) == ["alice", "bob"] and store.get("bob").role == "operator"


def test_a_file_written_before_roles_keeps_its_users_operators_after_a_change(tmp_path, cheap_hasher):
    path = tmp_path / "users.toml"
    path.write_text(f'[users.alice]\nhash = "{HASH}"\ncreated = "2026-11-30T09:00:00Z"\n')
    store = UserStore(path, hasher=cheap_hasher)
    store.add("bob", "bob-password-12", role="viewer")
    assert {n: u.role for n, u in store.users().items()} == {"alice": "operator", "bob": "viewer"}


# -- the users command, as run from the command line -------------------------------------------

def _main(monkeypatch, capsys, *argv, stdin=""):
    from backend.cli import main

    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    out = io.StringIO()
    rc = main(list(argv), out=out)
    return rc, out.getvalue(), capsys.readouterr().err


def test_cli_add_with_a_role_change_the_role_and_list_roles(tmp_path, monkeypatch, capsys):
    ws = ["--workspace", str(tmp_path)]
    assert _main(monkeypatch, capsys, "init", str(tmp_path))[0] == 0
    rc, out, err = _main(monkeypatch, capsys, *ws, "users", "add", "bob", "--role", "viewer", "--password-stdin",
                         stdin="bob-password-12\n")
    assert (rc, err) == (0, "") and "bob: added" in out and "as viewer" in out
    rc, out, _ = _main(monkeypatch, capsys, *ws, "users", "add", "alice", "--password-stdin",
                       stdin="alice-password-1\n")
    assert rc == 0 and "as operator" in out  # the default
    rc, out, _ = _main(monkeypatch, capsys, *ws, "users", "list", "--json")
    assert rc == 0
    assert [(u["name"], u["role"]) for u in json.loads(out)] == [("bob", "viewer"), ("alice", "operator")]
    rc, out, _ = _main(monkeypatch, capsys, *ws, "users", "role", "bob", "operator")
    assert rc == 0 and "bob: role set to operator" in out and "sessions" in out
    rc, out, _ = _main(monkeypatch, capsys, *ws, "users", "list")
    assert rc == 0 and out.splitlines()[0].startswith("bob  operator  created ")
    rc, out, err = _main(monkeypatch, capsys, *ws, "users", "role", "bob", "admin")
    assert rc == 1 and "unknown role 'admin' (known: viewer, operator)" in err
    rc, out, err = _main(monkeypatch, capsys, *ws, "users", "add", "carol", "--role", "root", "--password-stdin",
                         stdin="carol-password-1\n")
    assert rc == 1 and "unknown role 'root'" in err
    rc, out, err = _main(monkeypatch, capsys, *ws, "users", "role", "dave", "viewer")
    assert rc == 1 and "no user named 'dave'" in err
    assert [u.name for u in UserStore(tmp_path / "users.toml").users().values()] == ["bob", "alice"]


def test_cli_help_names_the_roles_and_the_default(capsys):
    from backend.cli import main

    with pytest.raises(SystemExit):
        main(["users", "add", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--role viewer|operator" in text and "(default: operator)" in text


# -- the role a session holds ------------------------------------------------------------------

@pytest.fixture
def authority(tmp_path, clock, cheap_hasher):
    users = UserStore(tmp_path / "users.toml", hasher=cheap_hasher)
    auth = Authority(users, sessions=SessionStore(clock=clock), throttle=LoginThrottle(clock=clock),
                     workspace_root=str(tmp_path))
    return auth, users


REMOTE = Caller("0.0.0.0", "10.213.0.2")


def test_signing_in_records_the_users_role_in_the_session(authority):
    auth, users = authority
    users.add("alice", "alice-password-1")
    users.add("bob", "bob-password-12", role="viewer")
    assert auth.login(REMOTE, "alice", "alice-password-1").role == "operator"
    assert auth.login(Caller("0.0.0.0", "10.213.0.3"), "bob", "bob-password-12").role == "viewer"


def test_changing_the_role_ends_the_users_sessions(authority):
    auth, users = authority
    users.add("alice", "alice-password-1")
    me = Caller("0.0.0.0", "10.213.0.2", token=auth.login(REMOTE, "alice", "alice-password-1").token)
    assert auth.access(me).mode == "signed-in"
    users.set_role("alice", "viewer")
    acc = auth.access(me)
    assert acc.mode != "signed-in" and not acc.can_control
    me = Caller("0.0.0.0", "10.213.0.2", token=auth.login(REMOTE, "alice", "alice-password-1").token)
    assert auth.access(me).session.role == "viewer"
