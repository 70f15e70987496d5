"""Signed-in sessions and the throttle on failed sign-ins, in the dashboard's memory.

A session lives in the browser tab that signed in (Streamlit keeps its token
on the server, in that tab's session state); reloading the tab or restarting
the dashboard signs out.  It ends after ``IDLE_S`` without activity (a page
run or a control action; the pages' own timed refreshes do not count) and
``ABSOLUTE_S`` after signing in, whatever the activity.  Time comes from an
injectable clock.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, replace
from typing import Callable

IDLE_S = 30 * 60
ABSOLUTE_S = 12 * 3600
MAX_FAILURES = 5          # failed sign-ins ...
FAILURE_WINDOW_S = 300    # ... within this window lock the client (and the name) out ...
LOCKOUT_S = 300           # ... for this long after the last failure


@dataclass(frozen=True)
class Session:
    token: str
    user: str
    client: str
    hash: str           # the user's hash at sign-in: a changed password ends the session
    started_at: float
    last_seen: float

    def ends_at(self, idle_s: float = IDLE_S, absolute_s: float = ABSOLUTE_S) -> float:
        return min(self.last_seen + idle_s, self.started_at + absolute_s)


class SessionStore:
    def __init__(self, *, clock: Callable[[], float] = time.time, idle_s: float = IDLE_S,
                 absolute_s: float = ABSOLUTE_S):
        self.clock = clock
        self.idle_s = idle_s
        self.absolute_s = absolute_s
        self._lock = threading.Lock()
        self._sessions: dict[str, Session] = {}

    def create(self, user: str, client: str, user_hash: str) -> Session:
        now = self.clock()
        s = Session(secrets.token_urlsafe(32), user, client, user_hash, now, now)
        with self._lock:
            self._expire(now)
            self._sessions[s.token] = s
        return s

    def check(self, token: str | None, client: str, *, touch: bool = False) -> tuple[Session | None, str]:
        """The live session of ``token`` for ``client``, or (None, why it is not).

        ``touch`` counts this as activity (restarts the idle limit)."""
        if not token:
            return None, "not signed in"
        now = self.clock()
        with self._lock:
            s = self._sessions.get(token)
            if s is None:
                return None, "not signed in"
            if now >= s.started_at + self.absolute_s:
                del self._sessions[token]
                return None, f"the session reached its {self.absolute_s / 3600:g} h limit"
            if now >= s.last_seen + self.idle_s:
                del self._sessions[token]
                return None, f"the session ended after {self.idle_s / 60:g} min without activity"
            if s.client != client:
                return None, "the session belongs to another address"
            if touch:
                s = replace(s, last_seen=now)
                self._sessions[token] = s
            return s, ""

    def end(self, token: str | None) -> Session | None:
        with self._lock:
            return self._sessions.pop(token, None) if token else None

    def end_user(self, user: str) -> int:
        with self._lock:
            gone = [t for t, s in self._sessions.items() if s.user == user]
            for t in gone:
                del self._sessions[t]
            return len(gone)

    def _expire(self, now: float) -> None:
        for t, s in list(self._sessions.items()):
            if now >= s.ends_at(self.idle_s, self.absolute_s):
                del self._sessions[t]


class LoginThrottle:
    """``MAX_FAILURES`` failed sign-ins within ``FAILURE_WINDOW_S`` from one client,
    or for one user name, refuse further tries for ``LOCKOUT_S`` after the last failure."""

    SWEEP_AT = 1000

    def __init__(self, *, clock: Callable[[], float] = time.time, max_failures: int = MAX_FAILURES,
                 window_s: float = FAILURE_WINDOW_S, lockout_s: float = LOCKOUT_S):
        self.clock = clock
        self.max_failures = max_failures
        self.window_s = window_s
        self.lockout_s = lockout_s
        self._lock = threading.Lock()
        self._failures: dict[str, list[float]] = {}

    def _recent(self, key: str, now: float) -> list[float]:
        keep = [t for t in self._failures.get(key, []) if now - t < self.window_s + self.lockout_s]
        if keep:
            self._failures[key] = keep
        else:
            self._failures.pop(key, None)
        return keep

    def wait_s(self, *keys: str) -> float:
        """Seconds before another try is allowed for any of ``keys`` (0: allowed now)."""
        now = self.clock()
        wait = 0.0
        with self._lock:
            for key in keys:
                times = self._recent(key, now)
                in_window = [t for t in times if times[-1] - t < self.window_s]
                if len(in_window) >= self.max_failures:
                    wait = max(wait, times[-1] + self.lockout_s - now)
        return max(0.0, wait)

    def __len__(self) -> int:
        """How many clients and names have failures on record."""
        with self._lock:
            return len(self._failures)

    def failed(self, *keys: str) -> None:
        now = self.clock()
        with self._lock:
            if len(self._failures) >= self.SWEEP_AT:  # many names tried once: forget the stale ones
                for key in list(self._failures):
                    self._recent(key, now)
            for key in keys:
                self._recent(key, now)
                self._failures.setdefault(key, []).append(now)

    def succeeded(self, *keys: str) -> None:
        with self._lock:
            for key in keys:
                self._failures.pop(key, None)
