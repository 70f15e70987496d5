"""Who may control what: the decision behind every start, stop, restart and relaunch.

The page layer describes each request with plain values (a :class:`Caller`:
the address the dashboard listens on, the TCP peer of the browser session,
the session's sign-in token); :class:`Authority` decides.

A request is *local* when the dashboard listens on loopback only AND the peer
is a loopback address that no proxy vouched for (no forwarding header, and
uvicorn trusts forwarding headers from loopback peers only) AND the browser
opened the dashboard with the token printed at its start (as Jupyter does: a
loopback peer may be another local user, a page on another localhost port or
a TCP forwarder).  The Host header plays no part: any client can send
``Host: localhost``.  A local request may control without signing in (the
audit names it ``local``).

Any other request needs a signed-in user, and sees nothing before signing in
unless the workspace opts in to anonymous viewing (``[access] anonymous_view``),
which shows figures and states only: never prompts, answers, logs or command
lines.  A signed-in ``viewer`` sees everything and acts on nothing; an
``operator`` starts, stops, relaunches, starts jobs and reads typed paths
(under the workspace's roots, see ``backend.auth.paths``).  With no user
configured a network request can do nothing.
"""

from __future__ import annotations

import hmac
import ipaddress
import math
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from backend.auth.paths import PathRefused, resolve_typed
from backend.auth.sessions import LoginThrottle, Session, SessionStore
from backend.auth.users import UserStore, name_problem

log = logging.getLogger(__name__)

ADD_USER_HINT = "python -m backend.cli --workspace {root} users add NAME"


class NotAuthorised(PermissionError):
    """A control action refused for want of a signed-in user (the refusal is audited)."""


class LoginRefused(Exception):
    """A sign-in that did not succeed; the message is safe to show."""


def is_loopback(address: str | None) -> bool:
    """True for 127.0.0.0/8, ::1 (also IPv4-mapped) and ``localhost``; False for all-interfaces."""
    if not address:
        return False
    a = address.strip().strip("[]")
    if a.lower() == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(a.split("%", 1)[0])
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def forwarding_trusted_from_loopback_only(forwarded_allow_ips: str | None) -> bool:
    """uvicorn takes the client address from X-Forwarded-For when the peer is in
    FORWARDED_ALLOW_IPS (default: loopback only).  A wider setting (``*``, a LAN)
    lets a remote client claim to be 127.0.0.1, so a loopback peer proves nothing."""
    if forwarded_allow_ips is None:
        return True
    entries = [e.strip() for e in forwarded_allow_ips.split(",") if e.strip()]
    return all(is_loopback(e) for e in entries)


@dataclass(frozen=True)
class Caller:
    """One dashboard request, in plain values from the page layer.

    ``listen``: the dashboard's ``server.address`` ("" = all interfaces).
    ``peer``: the TCP peer of the browser session; "" when the script runs
    without a server (no network at all); "unknown" when a server runs but the
    peer could not be read.  ``proxied``: the connection carried a forwarding
    header (Forwarded, X-Forwarded-For, X-Real-IP).
    """

    listen: str
    peer: str
    token: str | None = None
    proxied: bool = False
    forwarded_allow_ips: str | None = None
    local_token: str | None = None  # the loopback token this browser session presented, if any

    @property
    def exposed(self) -> bool:
        if not is_loopback(self.listen):
            return True
        if self.peer == "":
            return False  # no server, no network peer (a test, a script)
        return not (is_loopback(self.peer) and not self.proxied
                    and forwarding_trusted_from_loopback_only(self.forwarded_allow_ips))

    @property
    def client(self) -> str:
        """The address the audit records."""
        return self.peer or "local"

    def describe(self) -> str:
        where = self.listen or "all interfaces"
        peer = self.peer or "this host"
        return f"listening on {where}, connected from {peer}" + (" through a proxy" if self.proxied else "")


@dataclass(frozen=True)
class AccessPolicy:
    """The workspace's ``[access]`` settings that decide what a request may see.

    ``local_token``: the token a loopback browser must present (None: not required)."""

    anonymous_view: bool = False
    local_token: str | None = None


@dataclass(frozen=True)
class Access:
    mode: str               # "local", "token" (loopback, no token yet), "signed-in", "sign-in" (a user
    #                         exists) or "read-only" (none does)
    actor: str              # the name the audit records
    client: str             # the address the audit records
    reason: str = ""        # why control is refused; "" when allowed
    session: Session | None = None
    notice: str = ""        # e.g. "the session ended after 30 min without activity"
    users_error: str = ""   # a users file that cannot be read (nobody can sign in)
    can_sign_in: bool = False
    role: str = ""          # the signed-in user's role ("operator" or "viewer")
    anonymous_view: bool = False  # the workspace lets a network request see figures without signing in

    @property
    def can_control(self) -> bool:
        """Start, stop, relaunch, start jobs, run a program, read a typed path."""
        return self.mode == "local" or (self.mode == "signed-in" and self.role == "operator")

    @property
    def can_view(self) -> bool:
        """See the pages at all (figures, states, charts)."""
        return self.mode in ("local", "signed-in") or (self.mode in ("sign-in", "read-only") and self.anonymous_view)

    @property
    def can_see_data(self) -> bool:
        """See prompts, answers, log lines, command lines, the audit log and the workspace's paths."""
        return self.mode in ("local", "signed-in")

    @property
    def data_reason(self) -> str:
        """Why data is hidden ("" when it is shown)."""
        if self.can_see_data:
            return ""
        return ("Hidden until you sign in: prompts, answers, logs and command lines are shown only to "
                "signed-in users.")


AuditFn = Callable[..., None]  # (actor, source, action, target, detail, outcome, client)


class Authority:
    """Users, sessions and the sign-in throttle of one workspace."""

    PATH_AUDIT_EVERY_S = 600.0  # a path followed again by the same user is audited again after this

    def __init__(self, users: UserStore, *, sessions: SessionStore | None = None,
                 throttle: LoginThrottle | None = None, audit: AuditFn | None = None,
                 workspace_root: str = "DIR", policy: Callable[[], AccessPolicy] | None = None):
        self.users = users
        self.sessions = sessions or SessionStore()
        self.throttle = throttle if throttle is not None else LoginThrottle(clock=self.sessions.clock)
        self._audit = audit
        self._root = workspace_root
        self._policy = policy or AccessPolicy
        self._paths_lock = threading.Lock()
        self._paths_audited: dict[tuple[str, str, str, str], float] = {}

    def policy(self) -> AccessPolicy:
        return self._policy()

    def token_matches(self, presented: str | None) -> bool:
        """True when ``presented`` is this dashboard's loopback token (compared in constant time)."""
        want = self.policy().local_token
        return bool(want and presented) and hmac.compare_digest(str(presented).encode(), want.encode())

    def add_user_hint(self) -> str:
        return ADD_USER_HINT.format(root=self._root)

    def _record(self, actor, source, action, target, detail, outcome, client) -> None:
        if self._audit is None:
            return
        try:
            self._audit(actor, source, action, target, detail, outcome, client)
        except Exception:  # the decision must not depend on the audit write
            log.exception("could not audit %s %s", action, target)

    # -- decisions ---------------------------------------------------------------

    def access(self, caller: Caller, *, touch: bool = False) -> Access:
        users = self.users.users()
        err = self.users.error()
        users_error = str(err) if err else ""
        policy = self.policy()
        notice = ""
        if caller.token:
            s, why = self.sessions.check(caller.token, caller.client, touch=touch)
            if s is not None:
                u = users.get(s.user)
                role = getattr(u, "role", "operator")
                if u is not None and u.hash == s.hash and role == getattr(s, "role", role):
                    reason = "" if role == "operator" else (
                        f"Signed in as {s.user} with the viewer role: viewers see everything and act on "
                        f"nothing. An operator role is given on the dashboard's host: "
                        f"`python -m backend.cli --workspace {self._root} users role {s.user} operator`.")
                    return Access("signed-in", s.user, caller.client, session=s, can_sign_in=True, role=role,
                                  reason=reason)
                self.sessions.end(s.token)
                why = "the user was removed, or their password or role changed"
            notice = f"Signed out: {why}."
        if not caller.exposed:
            if caller.peer == "" or not policy.local_token or self.token_matches(caller.local_token):
                return Access("local", "local", caller.client, notice=notice, users_error=users_error,
                              can_sign_in=bool(users))
            return Access("token", "anonymous", caller.client, notice=notice, users_error=users_error,
                          can_sign_in=bool(users),
                          reason="Open the dashboard with the URL it printed at its start (it carries a token), "
                                 "enter that token" + (", or sign in." if users else "."))
        if users:
            return Access("sign-in", "anonymous", caller.client, notice=notice, can_sign_in=True,
                          anonymous_view=policy.anonymous_view,
                          reason=f"Sign in to start, stop or relaunch: this dashboard is reachable from the "
                                 f"network ({caller.describe()}).")
        why = (f"the users file has an error ({users_error})" if users_error else "no user is configured")
        return Access("read-only", "anonymous", caller.client, notice=notice, users_error=users_error,
                      anonymous_view=policy.anonymous_view,
                      reason=f"Read-only: this dashboard is reachable from the network ({caller.describe()}) "
                             f"and {why}, so nothing can be started, stopped or relaunched from here. "
                             f"Add a user on the dashboard's host with "
                             f"`python -m backend.cli --workspace WORKSPACE users add NAME`, then sign in.")

    def authorise(self, caller: Caller, action: str, target: str, source: str) -> Access:
        """The access that allows ``action``; raises :class:`NotAuthorised` (audited) otherwise."""
        acc = self.access(caller, touch=True)
        if not acc.can_control:
            self._record(acc.actor, source, action, target, acc.reason, "refused", acc.client)
            raise NotAuthorised(acc.reason)
        return acc

    def authorise_path(self, caller: Caller, typed: str, roots: Sequence[Path], *, action: str = "read",
                       source: str = "dashboard", base: Path | None = None) -> Path:
        """The resolved path of ``typed`` for a request allowed to read it: an operator action
        (:class:`NotAuthorised` otherwise) on a path under ``roots`` (:class:`PathRefused` otherwise).
        Refusals are audited; a granted path once per user, address and path per
        ``PATH_AUDIT_EVERY_S`` (a followed log is read again every few seconds)."""
        acc = self.authorise(caller, action, str(typed)[:300], source)
        try:
            path = resolve_typed(typed, roots, base=base)
        except PathRefused as exc:
            self._record(acc.actor, source, action, str(typed)[:300], str(exc), "refused", acc.client)
            raise
        key = (acc.actor, acc.client, action, str(path))
        now = self.sessions.clock()
        with self._paths_lock:
            last = self._paths_audited.get(key)
            fresh = last is None or now - last >= self.PATH_AUDIT_EVERY_S
            if fresh:
                if len(self._paths_audited) > 4096:
                    self._paths_audited.clear()
                self._paths_audited[key] = now
        if fresh:
            self._record(acc.actor, source, action, str(path), "typed path read", "ok", acc.client)
        return path

    # -- sign-in -----------------------------------------------------------------

    def login(self, caller: Caller, name: str, password: str, *, source: str = "dashboard") -> Session:
        """A session for ``name`` when ``password`` is theirs; :class:`LoginRefused` otherwise.

        Every refusal that checks the password costs one Argon2 verification,
        whether the name is a user's, is not, or cannot be one, so timing the
        answer does not tell which names exist.  A try refused by the throttle
        is answered before any hashing, for every name alike; the audit records
        the first such try of a lockout, and how many more it refused once it
        is over."""
        name = name.strip()
        who = name if name and not name_problem(name) else "(invalid name)"
        verdict = self.throttle.attempt(who, caller.client)
        for over in verdict.ended:
            actor = over.name if over.scope == "name" else "(any name)"
            self._record(actor, source, "login", actor, over.summary_detail(), "refused", over.address)
        if verdict.lockout is not None:
            if verdict.first:
                self._record(who, source, "login", who, verdict.lockout.first_detail(), "refused", caller.client)
            where = "" if verdict.lockout.scope == "name" else " from this address"
            raise LoginRefused(f"Too many failed sign-ins{where}: try again in {math.ceil(verdict.wait_s)} s.")
        err = self.users.error()
        if err is not None:  # the same answer, as fast, for every name: nobody can sign in
            raise LoginRefused(f"Nobody can sign in until the users file is fixed: {err}")
        user = self.users.verify(name, password)  # an invalid name costs a verification too
        if user is None:
            self.throttle.failed(who, caller.client)
            self._record(who, source, "login", who, "unknown name or wrong password", "refused", caller.client)
            raise LoginRefused("Unknown user name or wrong password.")
        self.throttle.succeeded(who, caller.client)
        self.sessions.end(caller.token)
        s = self.sessions.create(user.name, caller.client, user.hash, user.role)
        self._record(user.name, source, "login", user.name,
                     f"signed in as {user.role} ({caller.describe()})", "ok", caller.client)
        return s

    def logout(self, caller: Caller, *, source: str = "dashboard") -> None:
        s = self.sessions.end(caller.token)
        if s is not None:
            self._record(s.user, source, "logout", s.user, "signed out", "ok", caller.client)
