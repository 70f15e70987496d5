"""Password hashing with Argon2id (argon2-cffi).

Hashes are PHC strings (``$argon2id$v=19$m=65536,t=3,p=4$salt$hash``): each
carries its own salt and cost parameters, so a hash made with other costs
still verifies.  The default costs are argon2-cffi's, the RFC 9106 "low
memory" profile (64 MiB, 3 passes, 4 lanes).
"""

from __future__ import annotations

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

MIN_LENGTH = 8
MAX_LENGTH = 1024  # a longer "password" is a paste accident or an attempt to burn CPU

_DEFAULT = PasswordHasher()
_dummy_hashes: dict[int, str] = {}


def password_problem(password: str) -> str | None:
    """Why ``password`` cannot be used, or None."""
    if len(password) < MIN_LENGTH:
        return f"a password needs at least {MIN_LENGTH} characters"
    if len(password) > MAX_LENGTH:
        return f"a password may have at most {MAX_LENGTH} characters"
    if password != password.strip():
        return "a password may not start or end with spaces (they are easy to lose when typing it)"
    return None


def hash_password(password: str, hasher: PasswordHasher | None = None) -> str:
    problem = password_problem(password)
    if problem:
        raise ValueError(problem)
    return (hasher or _DEFAULT).hash(password)


def verify_password(stored_hash: str, password: str, hasher: PasswordHasher | None = None) -> bool:
    """True when ``password`` matches ``stored_hash``; a damaged hash never matches.

    An over-long password never matches either, but only after the time of one
    verification: refusing it at once would tell a real user's name (its
    refusal instant) from one that does not exist (a verification burnt)."""
    if len(password) > MAX_LENGTH:
        burn_verify(password, hasher)
        return False
    try:
        return (hasher or _DEFAULT).verify(stored_hash, password)
    except (VerificationError, InvalidHashError):
        return False


def burn_verify(password: str, hasher: PasswordHasher | None = None) -> None:
    """Spend the time of one verification (of at most ``MAX_LENGTH`` characters), for
    a name that is not a user's or a password refused unread, so the answer's
    timing does not tell which names are real."""
    h = hasher or _DEFAULT
    key = id(h)
    if key not in _dummy_hashes:
        _dummy_hashes[key] = h.hash("specdeck-no-such-user")
    verify_password(_dummy_hashes[key], password[:MAX_LENGTH], h)
