"""The users file, the ``users`` command, and who may control (Caller + Authority)."""

from __future__ import annotations

import io
import stat
from argparse import Namespace

import pytest

from backend.auth import Authority, Caller, LoginRefused, NotAuthorised, SessionStore, UsersError, UserStore
from backend.cli.users import run as users_cli
from backend.auth.sessions import LoginThrottle
from backend.auth.users import parse_users


# -- the users file ------------------------------------------------------------------------

def test_users_file_holds_hashes_only_and_is_private(tmp_path, cheap_hasher):
    store = UserStore(tmp_path / "users.toml", hasher=cheap_hasher)
    store.add("alice", "alice-password-1")
    text = (tmp_path / "users.toml").read_text()
    assert "alice-password-1" not in text
    assert "[users.alice]" in text and 'hash = "$argon2id$' in text
    assert stat.S_IMODE((tmp_path / "users.toml").stat().st_mode) == 0o600
    assert store.verify("alice", "alice-password-1").name == "alice"
    assert store.verify("alice", "wrong-password") is None
    assert store.verify("nobody", "alice-password-1") is None


def test_a_second_store_sees_changes_without_a_restart(tmp_path, cheap_hasher):
    writer = UserStore(tmp_path / "users.toml", hasher=cheap_hasher)
    reader = UserStore(tmp_path / "users.toml", hasher=cheap_hasher)
    assert reader.users() == {}
    writer.add("alice", "alice-password-1")
    assert list(reader.users()) == ["alice"]
    writer.add("bob", "bob-password-12")
    writer.remove("alice")
    assert list(reader.users()) == ["bob"]


def test_adding_an_existing_user_and_removing_a_missing_one_are_refused(tmp_path, cheap_hasher):
    store = UserStore(tmp_path / "users.toml", hasher=cheap_hasher)
    store.add("alice", "alice-password-1")
    with pytest.raises(UsersError, match="exists already"):
        store.add("alice", "other-password-1")
    with pytest.raises(UsersError, match="no user named 'bob'"):
        store.remove("bob")
    with pytest.raises(UsersError, match="user name starts with a letter"):
        store.add("1bad name", "whatever-password")


@pytest.mark.parametrize("text, expected", [
    ('[users.alice]\nhash = "x"\n', "users.toml: line 1: users.alice.hash: missing or not an Argon2 hash"),
    ('\n\n[users.alice]\nhash = "$argon2id$v=19$m=1024,t=1,p=1$c2FsdHNhbHQ$aGFzaA"\nrole = "admin"\n',
     "users.toml: line 5: users.alice.role: unknown role 'admin' (known: viewer, operator)"),
    ('[users.alice]\nhash = "$argon2id$v=19$m=1024,t=1,p=1$c2FsdHNhbHQ$aGFzaA"\ngroup = "admin"\n',
     "users.toml: line 1: users.alice.group: unknown key (known: hash, role, created, changed)"),
    ('[users.alice\n', "users.toml: line 1: not valid TOML"),
    ('admins = ["alice"]\n', "users.toml: line 1: admins: unknown key"),
])
def test_a_bad_users_file_names_file_line_and_field(text, expected):
    with pytest.raises(UsersError) as exc:
        parse_users(text, "users.toml")
    assert str(exc.value).startswith(expected)


def test_a_broken_file_admits_nobody_and_is_not_rewritten(tmp_path, cheap_hasher):
    path = tmp_path / "users.toml"
    store = UserStore(path, hasher=cheap_hasher)
    store.add("alice", "alice-password-1")
    broken = path.read_text().replace('hash = "$argon2id', 'hash = "$nope')
    path.write_text(broken)
    assert store.users() == {}
    assert "users.alice.hash" in str(store.error())
    with pytest.raises(UsersError, match="users.alice.hash"):
        store.add("bob", "bob-password-12")
    assert path.read_text() == broken  # nothing written over a file we cannot read


# -- the users command -----------------------------------------------------------------------

def _cli(root, action, name=None, *, stdin="", answers=(), json=False, password_stdin=True):
    out, err = io.StringIO(), io.StringIO()
    it = iter(answers)
    args = Namespace(action=action, name=name, password_stdin=password_stdin, json=json)
    rc = users_cli(root, args, out, err, stdin=io.StringIO(stdin), ask=lambda prompt: next(it))
    return rc, out.getvalue(), err.getvalue()


def test_cli_add_list_passwd_remove(tmp_path):
    rc, out, err = _cli(tmp_path, "add", "alice", stdin="first-password\n")
    assert (rc, err) == (0, "") and "alice: added" in out
    rc, out, _ = _cli(tmp_path, "list")
    assert rc == 0 and out.startswith("alice  operator  created ")
    store = UserStore(tmp_path / "users.toml")
    assert store.verify("alice", "first-password")
    rc, out, _ = _cli(tmp_path, "passwd", "alice", answers=["second-password", "second-password"],
                      password_stdin=False)
    assert rc == 0 and "password changed" in out
    assert store.verify("alice", "second-password") and not store.verify("alice", "first-password")
    rc, out, _ = _cli(tmp_path, "remove", "alice")
    assert rc == 0 and store.users() == {}
    rc, out, _ = _cli(tmp_path, "list")
    assert "no users in" in out and "read-only" in out


def test_cli_prompt_refuses_different_passwords_and_changes_nothing(tmp_path):
    rc, out, err = _cli(tmp_path, "add", "alice", answers=["first-password", "frist-password"],
                        password_stdin=False)
    assert rc == 1 and "the two passwords differ" in err
    assert not (tmp_path / "users.toml").exists()
    rc, _, err = _cli(tmp_path, "add", "alice", stdin="")
    assert rc == 1 and "standard input is empty" in err
    rc, _, err = _cli(tmp_path, "add", "alice", stdin="short\n")
    assert rc == 1 and "at least 8 characters" in err


def test_cli_is_registered_on_the_command_line(tmp_path):
    from backend.cli import main

    out, err = io.StringIO(), io.StringIO()
    assert main(["init", str(tmp_path)], out=out, err=err) == 0
    assert main(["--workspace", str(tmp_path), "users", "list", "--json"], out=out, err=err) == 0
    assert out.getvalue().rstrip().endswith("[]")


# -- who may control -------------------------------------------------------------------------

@pytest.mark.parametrize("listen, peer, proxied, fwd, exposed", [
    ("127.0.0.1", "127.0.0.1", False, None, False),
    ("127.0.0.1", "::1", False, None, False),
    ("localhost", "127.0.0.1", False, None, False),
    ("::1", "::ffff:127.0.0.1", False, None, False),
    ("127.0.0.1", "", False, None, False),            # no server at all
    ("0.0.0.0", "127.0.0.1", False, None, True),      # listens everywhere: login even from loopback
    ("", "127.0.0.1", False, None, True),             # unset server.address = all interfaces
    ("10.213.0.1", "10.213.0.2", False, None, True),
    ("127.0.0.1", "10.213.0.2", False, None, True),   # a proxy forwarded a remote client
    ("127.0.0.1", "127.0.0.1", True, None, True),     # forwarding header: a proxy stands in between
    ("127.0.0.1", "127.0.0.1", False, "*", True),     # uvicorn would believe anyone's X-Forwarded-For
    ("127.0.0.1", "127.0.0.1", False, "127.0.0.1,::1", False),
    ("127.0.0.1", "unknown", False, None, True),
])
def test_exposure_table(listen, peer, proxied, fwd, exposed):
    assert Caller(listen, peer, proxied=proxied, forwarded_allow_ips=fwd).exposed is exposed


class AuditLog(list):
    def __call__(self, actor, source, action, target, detail, outcome, client):
        self.append((actor, source, action, target, outcome, client))


@pytest.fixture
def authority(tmp_path, clock, cheap_hasher):
    log = AuditLog()
    users = UserStore(tmp_path / "users.toml", hasher=cheap_hasher)
    sessions = SessionStore(clock=clock)
    auth = Authority(users, sessions=sessions, throttle=LoginThrottle(clock=clock), audit=log,
                     workspace_root=str(tmp_path))
    return auth, users, log


REMOTE = Caller("0.0.0.0", "10.213.0.2")


def test_exposed_without_users_is_read_only_and_says_how_to_fix_it(authority, tmp_path):
    auth, _users, log = authority
    acc = auth.access(REMOTE)
    assert acc.mode == "read-only" and not acc.can_control and not acc.can_sign_in
    assert "no user is configured" in acc.reason
    assert "python -m backend.cli --workspace WORKSPACE users add NAME" in acc.reason  # no path for strangers
    assert str(tmp_path) not in acc.reason and not acc.can_view and not acc.can_see_data
    with pytest.raises(NotAuthorised, match="Read-only"):
        auth.authorise(REMOTE, "stop", "ticker", "dashboard")
    assert log == [("anonymous", "dashboard", "stop", "ticker", "refused", "10.213.0.2")]


def test_local_may_control_as_local(authority):
    auth, _users, _log = authority
    acc = auth.authorise(Caller("127.0.0.1", "127.0.0.1"), "stop", "ticker", "dashboard")
    assert (acc.mode, acc.actor, acc.client) == ("local", "local", "127.0.0.1")


def test_sign_in_then_control_then_sign_out(authority, clock):
    auth, users, log = authority
    users.add("alice", "alice-password-1")
    assert auth.access(REMOTE).mode == "sign-in"
    with pytest.raises(LoginRefused, match="Unknown user name or wrong password"):
        auth.login(REMOTE, "alice", "wrong-password")
    with pytest.raises(LoginRefused, match="Unknown user name or wrong password"):
        auth.login(REMOTE, "mallory", "alice-password-1")
    s = auth.login(REMOTE, "alice", "alice-password-1")
    me = Caller("0.0.0.0", "10.213.0.2", token=s.token)
    acc = auth.authorise(me, "restart", "ticker", "dashboard")
    assert (acc.mode, acc.actor, acc.client) == ("signed-in", "alice", "10.213.0.2")
    # the token is worth nothing from another address
    assert auth.access(Caller("0.0.0.0", "10.213.0.9", token=s.token)).mode == "sign-in"
    auth.logout(me)
    assert auth.access(me).mode == "sign-in"
    assert [(e[0], e[2], e[4]) for e in log] == [
        ("alice", "login", "refused"), ("mallory", "login", "refused"), ("alice", "login", "ok"),
        ("alice", "logout", "ok")]


def test_idle_session_ends_and_says_why(authority, clock):
    auth, users, _log = authority
    users.add("alice", "alice-password-1")
    s = auth.login(REMOTE, "alice", "alice-password-1")
    me = Caller("0.0.0.0", "10.213.0.2", token=s.token)
    clock.advance(30 * 60)
    acc = auth.access(me)
    assert acc.mode == "sign-in" and "30 min without activity" in acc.notice
    with pytest.raises(NotAuthorised):
        auth.authorise(me, "stop", "ticker", "dashboard")


def test_removing_a_user_or_changing_the_password_ends_their_sessions(authority):
    auth, users, _log = authority
    users.add("alice", "alice-password-1")
    users.add("bob", "bob-password-12")
    a = Caller("0.0.0.0", "10.213.0.2", token=auth.login(REMOTE, "alice", "alice-password-1").token)
    b = Caller("0.0.0.0", "10.213.0.3",
               token=auth.login(Caller("0.0.0.0", "10.213.0.3"), "bob", "bob-password-12").token)
    users.set_password("alice", "alice-password-2")
    users.remove("bob")
    for c in (a, b):
        acc = auth.access(c)
        assert not acc.can_control and "removed, or their password or role changed" in acc.notice


def test_repeated_failures_lock_the_client_out(authority, clock):
    auth, users, log = authority
    users.add("alice", "alice-password-1")
    for _ in range(5):
        with pytest.raises(LoginRefused, match="wrong password"):
            auth.login(REMOTE, "alice", "guess")
    with pytest.raises(LoginRefused, match="Too many failed sign-ins: try again in 300 s"):
        auth.login(REMOTE, "alice", "alice-password-1")  # even the right password waits
    clock.advance(300)
    assert auth.login(REMOTE, "alice", "alice-password-1").user == "alice"


def test_a_broken_users_file_makes_the_exposed_dashboard_read_only(authority, tmp_path):
    auth, users, _log = authority
    users.add("alice", "alice-password-1")
    (tmp_path / "users.toml").write_text("[users.alice\n")
    acc = auth.access(REMOTE)
    assert acc.mode == "read-only" and "users file has an error" in acc.reason and "line 1" in acc.reason
    with pytest.raises(LoginRefused, match="users file is fixed"):
        auth.login(REMOTE, "alice", "alice-password-1")
