"""Signed-in sessions and the throttle on failed sign-ins, in the dashboard's memory.

A session lives in the browser tab that signed in (Streamlit keeps its token
on the server, in that tab's session state); reloading the tab or restarting
the dashboard signs out.  It ends after ``IDLE_S`` without activity (a page
run or a control action; the pages' own timed refreshes do not count) and
``ABSOLUTE_S`` after signing in, whatever the activity.  It records the
user's hash and role at sign-in, so a changed password or role ends it.

The throttle keys its lockout on a user name *at one address*: failing as
``alice`` from one machine locks ``alice`` out there and nowhere else, so
nobody can lock alice out of her own address by guessing from theirs.  An
address that fails across many names is slowed instead: past
``SPRAY_AFTER`` failures within the window, each further one makes it wait
twice as long (2 s, 4 s, ... at most ``SPRAY_MAX_WAIT_S``) whatever name it
tries next.  Tries refused by the throttle are audited once per lockout (the
first, then how many more when it is over), not once per request.  At most
``MAX_KEYS`` names and addresses are remembered, the least recently failed
forgotten first, so a flood of made-up names costs bounded memory.  Time
comes from an injectable clock.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Callable

IDLE_S = 30 * 60
ABSOLUTE_S = 12 * 3600
MAX_FAILURES = 5          # failed sign-ins for one name from one address ...
FAILURE_WINDOW_S = 300    # ... within this window lock that name out at that address ...
LOCKOUT_S = 300           # ... for this long after the last failure
SPRAY_AFTER = 10          # failures from one address (any names) within the window beyond this ...
SPRAY_MAX_WAIT_S = 300    # ... make it wait 2 ** (failures - SPRAY_AFTER) s, at most this, after the last
MAX_KEYS = 10_000         # names-at-addresses and addresses remembered at most


@dataclass(frozen=True)
class Session:
    token: str
    user: str
    client: str
    hash: str           # the user's hash at sign-in: a changed password ends the session
    started_at: float
    last_seen: float
    role: str = "operator"  # the user's role at sign-in: a changed role ends the session

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

    def create(self, user: str, client: str, user_hash: str, role: str = "operator") -> Session:
        now = self.clock()
        s = Session(secrets.token_urlsafe(32), user, client, user_hash, now, now, role)
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


@dataclass(frozen=True)
class Lockout:
    """One lock refusing sign-in tries, as the audit tells it: the first refused try
    is recorded when it happens, the others are counted (``refused``) and recorded
    in one entry when the lockout is over."""

    scope: str        # "name": ``name`` from ``address``; "address": any name from ``address``
    name: str         # the name of the first refused try
    address: str
    until: float      # tries are refused until then
    refused: int = 0  # tries refused after the first

    def why(self) -> str:
        if self.scope == "name":
            return "too many failed sign-ins for this name from this address"
        return "too many failed sign-ins from this address, whatever the name"

    def until_text(self) -> str:
        return time.strftime("%H:%M:%S", time.localtime(self.until))

    def first_detail(self) -> str:
        """The audit's entry for the first refused try."""
        return (f"{self.why()}; tries are refused until {self.until_text()} "
                "(later tries are counted, in one entry when the lockout is over)")

    def summary_detail(self) -> str:
        """The audit's entry for the tries refused after the first."""
        n = self.refused
        return (f"{n} further {'try was' if n == 1 else 'tries were'} refused during the lockout "
                f"({self.why()}, until {self.until_text()})")


@dataclass(frozen=True)
class Verdict:
    """The throttle's answer to one sign-in try (:meth:`LoginThrottle.attempt`)."""

    wait_s: float = 0.0              # 0: the try may go ahead
    lockout: Lockout | None = None   # the lock that refuses it (the one that ends last)
    first: bool = False              # the lockout's first refused try: record it; later ones are counted
    ended: tuple[Lockout, ...] = ()  # lockouts over since they were last seen, with their counts


@dataclass
class _Track:
    failures: list[float] = field(default_factory=list)  # those within the window of the last one
    lockout: Lockout | None = None                       # the lockout refusing tries now, if any


class LoginThrottle:
    """Failed sign-ins, by name at an address and by address.

    ``max_failures`` failures within ``window_s`` for one name from one address
    refuse that name there for ``lockout_s`` after the last failure.  More than
    ``spray_after`` failures within ``window_s`` from one address, whatever the
    names, refuse that address for ``2 ** (failures - spray_after)`` s (at most
    ``spray_max_wait_s``) after the last failure.  Tries that go through
    :meth:`attempt` are what the audit needs: which lock refused, and whether
    this is the first refused try of its lockout."""

    def __init__(self, *, clock: Callable[[], float] = time.time, max_failures: int = MAX_FAILURES,
                 window_s: float = FAILURE_WINDOW_S, lockout_s: float = LOCKOUT_S,
                 spray_after: int = SPRAY_AFTER, spray_max_wait_s: float = SPRAY_MAX_WAIT_S,
                 max_keys: int = MAX_KEYS):
        self.clock = clock
        self.max_failures = max_failures
        self.window_s = window_s
        self.lockout_s = lockout_s
        self.spray_after = spray_after
        self.spray_max_wait_s = spray_max_wait_s
        self.max_keys = max_keys
        # A failure older than the window no longer counts, and no lock lasts longer than
        # this after the last failure: a key quiet for that long can be forgotten.
        self._keep_s = max(window_s, lockout_s, spray_max_wait_s)
        # Past spray_after + 16 failures the wait is at its cap (2 ** 16 s): older times change nothing.
        self._keep_n = max(max_failures, spray_after + 16)
        self._lock = threading.Lock()
        self._tracks: dict[tuple[str, ...], _Track] = {}  # least recently failed first
        self._ended: list[Lockout] = []  # forgotten lockouts whose count is not yet reported

    @staticmethod
    def _keys(name: str, address: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return ("name", address, name), ("address", address)

    def _until(self, key: tuple[str, ...], track: _Track) -> float:
        """When ``key``'s lock ends: a past time (or 0) when it is not locked."""
        times = track.failures
        if key[0] == "name":
            return times[-1] + self.lockout_s if len(times) >= self.max_failures else 0.0
        over = len(times) - self.spray_after
        return times[-1] + min(self.spray_max_wait_s, 2.0 ** over) if over > 0 else 0.0

    def _forget(self, now: float) -> None:
        """Drop the keys quiet for ``_keep_s`` and, past ``max_keys``, the least recently failed.

        The dict is ordered by last failure, so this looks at the stale keys and one more."""
        while self._tracks:
            key, track = next(iter(self._tracks.items()))
            if now - track.failures[-1] < self._keep_s and len(self._tracks) <= self.max_keys:
                break
            del self._tracks[key]
            if track.lockout is not None and track.lockout.refused:
                self._ended.append(track.lockout)
        del self._ended[:-self.max_keys]

    def attempt(self, name: str, address: str) -> Verdict:
        """May ``name`` try to sign in from ``address`` now?  A refused try is counted against
        the lockout that refuses it; lockouts found over are handed back for the audit."""
        now = self.clock()
        with self._lock:
            self._forget(now)
            ended, self._ended = self._ended, []
            locked: list[tuple[float, _Track, str]] = []
            for key in self._keys(name, address):
                track = self._tracks.get(key)
                if track is None:
                    continue
                until = self._until(key, track)
                lo = track.lockout
                if lo is not None and (until <= now or until != lo.until):  # over, or a new lockout
                    if lo.refused:
                        ended.append(lo)
                    track.lockout = None
                if until > now:
                    locked.append((until, track, key[0]))
            if not locked:
                return Verdict(ended=tuple(ended))
            until, track, scope = max(locked, key=lambda x: x[0])
            first = track.lockout is None
            track.lockout = (Lockout(scope, name, address, until) if first
                             else replace(track.lockout, refused=track.lockout.refused + 1))
            return Verdict(until - now, track.lockout, first, tuple(ended))

    def wait_s(self, name: str, address: str) -> float:
        """Seconds before ``name`` may try again from ``address`` (0: allowed now); counts nothing."""
        now = self.clock()
        with self._lock:
            untils = [self._until(k, self._tracks[k]) for k in self._keys(name, address) if k in self._tracks]
        return max([0.0] + [u - now for u in untils])

    def __len__(self) -> int:
        """How many names-at-addresses and addresses have failures on record."""
        with self._lock:
            return len(self._tracks)

    def __bool__(self) -> bool:
        """A throttle with nothing on record is still a throttle (``throttle or default`` keeps it)."""
        return True

    def failed(self, name: str, address: str) -> None:
        now = self.clock()
        with self._lock:
            for key in self._keys(name, address):
                track = self._tracks.pop(key, None) or _Track()
                recent = [t for t in track.failures if now - t < self.window_s]
                track.failures = recent[-(self._keep_n - 1):] + [now]
                self._tracks[key] = track  # to the end: the most recently failed
            self._forget(now)

    def succeeded(self, name: str, address: str) -> None:
        """Forget the failures of ``name`` at ``address``.  The address's own count stays:
        signing in to one account must not reset the slowdown of a spray from there."""
        with self._lock:
            track = self._tracks.pop(self._keys(name, address)[0], None)
            if track is not None and track.lockout is not None and track.lockout.refused:
                self._ended.append(track.lockout)
