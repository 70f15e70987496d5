"""The sign-in throttle: a name locked out at one address only, a spraying address slowed,
one audit entry per lockout, and bounded memory."""

from __future__ import annotations

import random
import string
import time

import pytest

from backend.auth import Authority, Caller, LoginRefused, SessionStore, UserStore
from backend.auth.sessions import MAX_KEYS, LoginThrottle

A, B = "10.213.0.2", "10.213.0.66"


class AuditLog(list):
    def __call__(self, actor, source, action, target, detail, outcome, client):
        self.append((actor, action, outcome, client, detail))


@pytest.fixture
def authority(tmp_path, clock, cheap_hasher):
    log = AuditLog()
    users = UserStore(tmp_path / "users.toml", hasher=cheap_hasher)
    users.add("alice", "alice-password-1")
    auth = Authority(users, sessions=SessionStore(clock=clock), throttle=LoginThrottle(clock=clock), audit=log,
                     workspace_root=str(tmp_path))
    return auth, log


def _fail(auth, address, name, password="not-her-password"):
    with pytest.raises(LoginRefused) as exc:
        auth.login(Caller("0.0.0.0", address), name, password)
    return str(exc.value)


def test_the_authority_keeps_the_throttle_it_is_given_even_with_nothing_on_record(tmp_path, clock):
    t = LoginThrottle(clock=clock, max_failures=2)
    assert Authority(UserStore(tmp_path / "users.toml"), throttle=t).throttle is t


def test_five_failures_lock_alice_out_at_that_address_and_not_at_hers(authority):
    auth, _log = authority
    for _ in range(5):
        assert "wrong password" in _fail(auth, B, "alice")
    assert _fail(auth, B, "alice", "alice-password-1") == "Too many failed sign-ins: try again in 300 s."
    assert auth.login(Caller("0.0.0.0", A), "alice", "alice-password-1").user == "alice"
    assert "wrong password" in _fail(auth, B, "bob")  # another name from B is tried (and fails)


def test_an_address_spraying_names_is_slowed_and_another_address_is_not(clock):
    t = LoginThrottle(clock=clock)
    for i in range(10):
        t.failed(f"user{i}", A)
    assert t.wait_s("someone-else", A) == 0  # ten failures over ten names: not yet a spray
    t.failed("user10", A)
    assert t.wait_s("someone-else", A) == 2
    t.failed("user11", A)
    assert t.wait_s("someone-else", A) == 4  # doubles with each further failure ...
    for i in range(12, 30):
        t.failed(f"user{i}", A)
    assert t.wait_s("someone-else", A) == 300  # ... up to five minutes
    assert t.wait_s("someone-else", B) == 0 and t.wait_s("user3", B) == 0
    clock.advance(300)
    assert t.wait_s("someone-else", A) == 0


def test_a_spray_through_sign_in_is_refused_from_that_address_only(authority, clock):
    auth, _log = authority
    for i in range(11):
        _fail(auth, B, f"guess{i}")
    assert _fail(auth, B, "guess11") == "Too many failed sign-ins from this address: try again in 2 s."
    assert _fail(auth, B, "alice", "alice-password-1").startswith("Too many failed sign-ins from this address")
    assert auth.login(Caller("0.0.0.0", A), "alice", "alice-password-1").user == "alice"
    clock.advance(2)
    assert "wrong password" in _fail(auth, B, "guess11")
    assert "try again in 4 s" in _fail(auth, B, "guess12")


def test_fifty_refused_tries_in_one_lockout_make_two_audit_entries(authority, clock):
    auth, log = authority
    for _ in range(5):
        _fail(auth, B, "alice")
    assert len(log) == 5
    for _ in range(50):
        _fail(auth, B, "alice", "alice-password-1")
    assert len(log) == 6  # the first refused try only; the others are counted
    actor, _action, outcome, client, detail = log[-1]
    assert (actor, outcome, client) == ("alice", "refused", B)
    assert "too many failed sign-ins for this name from this address" in detail
    assert "refused until " + time.strftime("%H:%M:%S", time.localtime(clock() + 300)) in detail
    clock.advance(300)
    assert auth.login(Caller("0.0.0.0", B), "alice", "alice-password-1").user == "alice"
    refusals = log[5:-1]
    assert len(refusals) == 2  # the first refusal and the count of the rest
    assert refusals[1][:4] == ("alice", "login", "refused", B)
    assert refusals[1][4].startswith("49 further tries were refused during the lockout")
    assert log[-1][2] == "ok"


def test_the_count_of_a_lockout_is_recorded_when_it_is_over_whoever_signs_in_next(authority, clock):
    auth, log = authority
    for _ in range(5):
        _fail(auth, B, "alice")
    for _ in range(3):
        _fail(auth, B, "alice")
    clock.advance(301)
    auth.login(Caller("0.0.0.0", A), "alice", "alice-password-1")
    summary = [e for e in log if "refused during the lockout" in e[4]]
    assert [(e[0], e[3]) for e in summary] == [("alice", B)]
    assert summary[0][4].startswith("2 further tries were refused")


def test_a_lockout_refusing_only_its_first_try_records_no_count(authority, clock):
    auth, log = authority
    for _ in range(5):
        _fail(auth, B, "alice")
    _fail(auth, B, "alice")
    clock.advance(300)
    auth.login(Caller("0.0.0.0", B), "alice", "alice-password-1")
    assert [e[2] for e in log] == ["refused"] * 6 + ["ok"]


def test_a_spray_refused_while_slowed_is_audited_once_per_wait(authority, clock):
    auth, log = authority
    for i in range(11):
        _fail(auth, B, f"guess{i}")
    for i in range(40):
        _fail(auth, B, f"other{i}")  # all refused during the 2 s wait
    assert len(log) == 12
    assert "from this address, whatever the name" in log[-1][4]
    clock.advance(2)
    _fail(auth, B, "guess11")
    assert log[12][:4] == ("(any name)", "login", "refused", B)
    assert log[12][4].startswith("39 further tries were refused")
    assert "wrong password" in log[13][4]


class _Counting(dict):
    """A dict that counts the entries walked through its keys, values and items."""

    walked = 0

    def _count(self, it):
        for x in it:
            _Counting.walked += 1
            yield x

    def __iter__(self):
        return self._count(super().__iter__())

    def keys(self):
        return list(self._count(super().keys()))

    def values(self):
        return self._count(super().values())

    def items(self):
        return self._count(super().items())


@pytest.mark.slow
def test_memory_stays_bounded_under_a_hundred_thousand_made_up_names(clock):
    t = LoginThrottle(clock=clock)
    t._tracks = _Counting(t._tracks)  # counts every key the throttle walks over
    rng = random.Random(7)
    for _ in range(100_000):
        name = "".join(rng.choices(string.ascii_lowercase, k=12))
        t.failed(name, f"10.{rng.randrange(256)}.{rng.randrange(256)}.{rng.randrange(256)}")
        t.failed("".join(rng.choices(string.ascii_lowercase, k=12)), A)
        clock.advance(0.001)
    assert len(t) <= MAX_KEYS
    # no sweep over every key on every failure: each failure looks at the keys it drops and one more
    # (a sweep of the 10,000 keys kept would walk about 2,000,000,000)
    assert _Counting.walked < 3 * 200_000, _Counting.walked
    assert t.wait_s("anyone", A) > 299  # the spraying address fails all along: still slowed
    for _ in range(5):
        t.failed("alice", B)
    assert t.wait_s("alice", B) == 300  # a fresh lockout holds
