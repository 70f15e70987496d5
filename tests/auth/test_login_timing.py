"""A refused sign-in takes the time of one Argon2 verification whatever made it fail, so
timing the answer does not tell a real user's name from one that does not exist.

Measured with the default (production) costs: with cheap ones the differences this
guards against would drown in noise."""

from __future__ import annotations

import statistics
import time

from backend.auth import Authority, Caller, LoginRefused, SessionStore, UserStore
from backend.auth.passwords import MAX_LENGTH
from backend.auth.sessions import LoginThrottle

SAMPLES = 3
CASES = {
    "known name, wrong password": ("alice", "not-her-password"),
    "known name, over-long password": ("alice", "x" * (MAX_LENGTH * 4)),
    "unknown name": ("mallory", "not-her-password"),
    "invalid name": ("1 not a name!", "not-her-password"),
}


def test_every_refused_sign_in_costs_one_verification(tmp_path):
    users = UserStore(tmp_path / "users.toml")  # the default hasher
    users.add("alice", "alice-password-1")
    # limits out of reach: this measures the answers, not the throttle
    auth = Authority(users, sessions=SessionStore(),
                     throttle=LoginThrottle(max_failures=10**6, spray_after=10**6))
    caller = Caller("0.0.0.0", "10.213.0.2")

    def once(name: str, password: str) -> float:
        started = time.perf_counter()
        try:
            auth.login(caller, name, password)
        except LoginRefused:
            return time.perf_counter() - started
        raise AssertionError(f"{name!r} signed in")

    for name, password in CASES.values():  # the first unknown name also makes the dummy hash
        once(name, password)
    took: dict[str, list[float]] = {case: [] for case in CASES}
    for _ in range(SAMPLES):  # interleaved, so a slower moment of the machine hits every case
        for case, (name, password) in CASES.items():
            took[case].append(once(name, password))
    median = {case: statistics.median(times) for case, times in took.items()}
    base = median["known name, wrong password"]
    assert base > 0.005, f"a verification took {base * 1000:.1f} ms: not the default costs?"
    for case, m in median.items():
        assert 0.5 <= m / base <= 2.0, (
            f"{case}: {m * 1000:.0f} ms against {base * 1000:.0f} ms for a wrong password "
            f"(all: {', '.join(f'{c}: {v * 1000:.0f} ms' for c, v in median.items())})")
