"""Who may control what: the decision behind every start, stop, restart and relaunch.

The page layer describes each request with plain values (a :class:`Caller`:
the address the dashboard listens on, the TCP peer of the browser session,
the session's sign-in token); :class:`Authority` decides.

A request is *local* when the dashboard listens on loopback only AND the peer
is a loopback address that no proxy vouched for (no forwarding header, and
uvicorn trusts forwarding headers from loopback peers only).  The Host header
plays no part: any client can send ``Host: localhost``.  A local request may
control without signing in (the audit names it ``local``).  Any other request
needs a signed-in user; with no user configured the dashboard is read-only.
"""

from __future__ import annotations

import ipaddress
import math
import logging
from dataclasses import dataclass
from typing import Callable

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
class Access:
    mode: str               # "local", "signed-in", "sign-in" (a user exists) or "read-only" (none does)
    actor: str              # the name the audit records
    client: str             # the address the audit records
    reason: str = ""        # why control is refused; "" when allowed
    session: Session | None = None
    notice: str = ""        # e.g. "the session ended after 30 min without activity"
    users_error: str = ""   # a users file that cannot be read (nobody can sign in)
    can_sign_in: bool = False

    @property
    def can_control(self) -> bool:
        return self.mode in ("local", "signed-in")


AuditFn = Callable[..., None]  # (actor, source, action, target, detail, outcome, client)


class Authority:
    """Users, sessions and the sign-in throttle of one workspace."""

    def __init__(self, users: UserStore, *, sessions: SessionStore | None = None,
                 throttle: LoginThrottle | None = None, audit: AuditFn | None = None,
                 workspace_root: str = "DIR"):
        self.users = users
        self.sessions = sessions or SessionStore()
        self.throttle = throttle or LoginThrottle(clock=self.sessions.clock)
        self._audit = audit
        self._root = workspace_root

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
        notice = ""
        if caller.token:
            s, why = self.sessions.check(caller.token, caller.client, touch=touch)
            if s is not None:
                u = users.get(s.user)
                if u is not None and u.hash == s.hash:
                    return Access("signed-in", s.user, caller.client, session=s, can_sign_in=True)
                self.sessions.end(s.token)
                why = "the user was removed or the password changed"
            notice = f"Signed out: {why}."
        if not caller.exposed:
            return Access("local", "local", caller.client, notice=notice, users_error=users_error,
                          can_sign_in=bool(users))
        if users:
            return Access("sign-in", "anonymous", caller.client, notice=notice, can_sign_in=True,
                          reason=f"Sign in to start, stop or relaunch: this dashboard is reachable from the "
                                 f"network ({caller.describe()}).")
        why = (f"the users file has an error ({users_error})" if users_error else "no user is configured")
        return Access("read-only", "anonymous", caller.client, notice=notice, users_error=users_error,
                      reason=f"Read-only: this dashboard is reachable from the network ({caller.describe()}) "
                             f"and {why}, so nothing can be started, stopped or relaunched from here. "
                             f"Add a user on the dashboard's host with `{self.add_user_hint()}`, then sign in.")

    def authorise(self, caller: Caller, action: str, target: str, source: str) -> Access:
        """The access that allows ``action``; raises :class:`NotAuthorised` (audited) otherwise."""
        acc = self.access(caller, touch=True)
        if not acc.can_control:
            self._record(acc.actor, source, action, target, acc.reason, "refused", acc.client)
            raise NotAuthorised(acc.reason)
        return acc

    # -- sign-in -----------------------------------------------------------------

    def login(self, caller: Caller, name: str, password: str, *, source: str = "dashboard") -> Session:
        name = name.strip()
        keys = (f"client:{caller.client}", f"user:{name}")
        wait = self.throttle.wait_s(*keys)
        who = name if name and not name_problem(name) else "(invalid name)"
        if wait > 0:
            self._record(who, source, "login", who, "too many failed sign-ins; try refused", "refused",
                         caller.client)
            raise LoginRefused(f"Too many failed sign-ins: try again in {math.ceil(wait)} s.")
        err = self.users.error()
        if err is not None:
            raise LoginRefused(f"Nobody can sign in until the users file is fixed: {err}")
        user = self.users.verify(name, password) if who == name else None
        if user is None:
            self.throttle.failed(*keys)
            self._record(who, source, "login", who, "unknown name or wrong password", "refused", caller.client)
            raise LoginRefused("Unknown user name or wrong password.")
        self.throttle.succeeded(*keys)
        self.sessions.end(caller.token)
        s = self.sessions.create(user.name, caller.client, user.hash)
        self._record(user.name, source, "login", user.name,
                     f"signed in ({caller.describe()})", "ok", caller.client)
        return s

    def logout(self, caller: Caller, *, source: str = "dashboard") -> None:
        s = self.sessions.end(caller.token)
        if s is not None:
            self._record(s.user, source, "logout", s.user, "signed out", "ok", caller.client)
