"""Sign-in for control actions: users (``users.toml``), Argon2id hashes, sessions, and
the decision whether a request may start, stop or relaunch (see ``access``)."""

from backend.auth.access import Access, Authority, Caller, LoginRefused, NotAuthorised, is_loopback
from backend.auth.sessions import ABSOLUTE_S, IDLE_S, LoginThrottle, Session, SessionStore
from backend.auth.users import USERS_FILE, User, UsersError, UserStore

__all__ = ["ABSOLUTE_S", "IDLE_S", "USERS_FILE", "Access", "Authority", "Caller", "LoginRefused",
           "LoginThrottle", "NotAuthorised", "Session", "SessionStore", "User", "UserStore", "UsersError",
           "is_loopback"]
