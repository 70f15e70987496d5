"""Sign-in for control actions: users (``users.toml``), Argon2id hashes, sessions, and
the decision whether a request may start, stop or relaunch (see ``access``).

Names are imported on first use, so registering the ``users`` command does not
load the hashing library into every command-line run.
"""

from importlib import import_module

_EXPORTS = {
    "Access": "access", "AccessPolicy": "access", "Authority": "access", "PathRefused": "paths", "Caller": "access", "LoginRefused": "access",
    "NotAuthorised": "access", "is_loopback": "access",
    "ABSOLUTE_S": "sessions", "IDLE_S": "sessions", "LoginThrottle": "sessions", "Session": "sessions",
    "SessionStore": "sessions",
    "ROLES": "users", "USERS_FILE": "users", "User": "users", "UsersError": "users", "UserStore": "users",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    globals()[name] = value
    return value
