"""Hashing, verification, session expiry and the sign-in throttle, with a fake clock."""

from __future__ import annotations

import pytest

from backend.auth.passwords import hash_password, password_problem, verify_password
from backend.auth.sessions import LoginThrottle, SessionStore


def test_default_hash_is_argon2id_with_the_rfc9106_low_memory_costs():
    h = hash_password("correct horse")
    assert h.startswith("$argon2id$v=19$m=65536,t=3,p=4$")
    assert "correct horse" not in h
    assert verify_password(h, "correct horse")
    assert not verify_password(h, "correct horsE")


def test_same_password_gets_a_new_salt_each_time(cheap_hasher):
    a = hash_password("same password", cheap_hasher)
    b = hash_password("same password", cheap_hasher)
    assert a != b
    assert verify_password(a, "same password", cheap_hasher) and verify_password(b, "same password", cheap_hasher)


@pytest.mark.parametrize("stored", ["", "plain text", "$argon2id$v=19$m=1024,t=1,p=1$garbage", "$2b$12$abcdef"])
def test_a_damaged_or_foreign_hash_never_matches(stored, cheap_hasher):
    assert verify_password(stored, "plain text", cheap_hasher) is False


@pytest.mark.parametrize("password, problem", [
    ("1234567", "at least 8"),
    (" leading-space", "spaces"),
    ("x" * 1025, "at most 1024"),
    ("12345678", None),
])
def test_password_rules(password, problem):
    got = password_problem(password)
    assert (got is None) if problem is None else (problem in got)


def test_hash_password_refuses_a_short_password(cheap_hasher):
    with pytest.raises(ValueError, match="at least 8"):
        hash_password("short", cheap_hasher)


def test_idle_limit_is_30_minutes_and_activity_restarts_it(clock):
    store = SessionStore(clock=clock)
    s = store.create("alice", "10.0.0.2", "$argon2id$h")
    clock.advance(29 * 60 + 59)
    assert store.check(s.token, "10.0.0.2")[0] is not None  # not touched: idle time keeps running
    clock.advance(1)
    got, why = store.check(s.token, "10.0.0.2")
    assert got is None and "30 min without activity" in why
    s2 = store.create("alice", "10.0.0.2", "$argon2id$h")
    clock.advance(20 * 60)
    assert store.check(s2.token, "10.0.0.2", touch=True)[0] is not None
    clock.advance(20 * 60)  # 40 min after sign-in, 20 min after the activity
    assert store.check(s2.token, "10.0.0.2")[0] is not None


def test_absolute_limit_is_12_hours_whatever_the_activity(clock):
    store = SessionStore(clock=clock)
    s = store.create("alice", "10.0.0.2", "$argon2id$h")
    for _ in range(11 * 4 + 3):  # a touch every 15 min up to 11 h 45 min
        clock.advance(15 * 60)
        assert store.check(s.token, "10.0.0.2", touch=True)[0] is not None
    clock.advance(15 * 60)  # 12 h
    got, why = store.check(s.token, "10.0.0.2", touch=True)
    assert got is None and "12 h limit" in why
    assert store.check(s.token, "10.0.0.2")[0] is None  # gone for good


def test_a_session_is_bound_to_its_address_and_ends_on_logout(clock):
    store = SessionStore(clock=clock)
    s = store.create("alice", "10.0.0.2", "$argon2id$h")
    assert store.check(s.token, "10.0.0.3") == (None, "the session belongs to another address")
    assert store.check(None, "10.0.0.2") == (None, "not signed in")
    assert store.end(s.token).user == "alice"
    assert store.check(s.token, "10.0.0.2")[0] is None


def test_throttle_locks_a_name_after_five_failures_for_five_minutes_at_that_address_only(clock):
    t = LoginThrottle(clock=clock)
    for _ in range(4):
        t.failed("alice", "10.0.0.2")
        clock.advance(10)
    assert t.wait_s("alice", "10.0.0.2") == 0
    t.failed("alice", "10.0.0.2")
    assert t.wait_s("alice", "10.0.0.2") == 300
    assert t.wait_s("alice", "10.0.0.9") == 0  # alice from her own address is not affected
    assert t.wait_s("bob", "10.0.0.2") == 0    # nor another name from that address (5 failures is no spray)
    clock.advance(299)
    assert t.wait_s("alice", "10.0.0.2") == 1
    clock.advance(1)
    assert t.wait_s("alice", "10.0.0.2") == 0


def test_throttle_forgets_failures_older_than_the_window(clock):
    t = LoginThrottle(clock=clock)
    for _ in range(5):
        t.failed("alice", "10.0.0.2")
        clock.advance(100)  # 5 failures spread over 400 s: never 5 within 300 s
    assert t.wait_s("alice", "10.0.0.2") == 0


def test_throttle_forgets_stale_names_instead_of_growing_without_bound(clock):
    t = LoginThrottle(clock=clock)
    for i in range(1000):
        t.failed(f"guess{i}", "10.0.0.2")
    assert len(t) == 1001  # each name at that address, and the address
    clock.advance(600)  # past the window and the lockout
    t.failed("one-more", "10.0.0.3")
    assert len(t) == 2


def test_a_session_records_the_role_it_signed_in_with(clock):
    store = SessionStore(clock=clock)
    assert store.create("alice", "10.0.0.2", "$argon2id$h").role == "operator"
    s = store.create("bob", "10.0.0.2", "$argon2id$h", role="viewer")
    assert store.check(s.token, "10.0.0.2")[0].role == "viewer"
