"""The workspace's users: ``<workspace>/users.toml``, names, roles and Argon2id hashes.

Why a file of its own and not the state database: users are configuration
that an administrator provisions, backs up and reviews (``state.db`` is the
dashboard's working state and may be deleted to start afresh), and a file
with mode 0600 says plainly who may read the hashes.  The file holds no
password, only hashes::

    [users.alice]
    hash = "$argon2id$v=19$m=65536,t=3,p=4$..."
    role = "operator"
    created = "2026-11-30T09:00:00Z"
    changed = "2026-11-30T09:00:00Z"

A role says what a signed-in user may do, the two roles Grafana and Ray
users know: ``viewer`` sees every page and acts on nothing; ``operator``
also starts, stops and relaunches, starts jobs and follows typed paths.  A
table without ``role`` reads as ``operator``: the file was written before
roles existed, when every user could control, and adding roles must not
take that away silently.  ``changed`` is when the password was last set.

Writers (the ``users`` command) take an exclusive lock on a side file and
replace the file atomically; readers (the dashboard) re-read it when its
size or modification time changes, so an added or removed user counts at
once, without a restart.
"""

from __future__ import annotations

import fcntl
import re
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import tomlkit
from tomlkit.exceptions import ParseError

from backend.auth.passwords import burn_verify, hash_password, verify_password
from backend.filemodes import write_private

USERS_FILE = "users.toml"
NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.@-]{0,63}$")
ROLES = ("viewer", "operator")  # viewer: sees everything, acts on nothing; operator: also controls
DEFAULT_ROLE = "operator"       # a table without ``role``: written when every user could control
HEADER = ("Specdeck users: who may sign in to the dashboard when it is reachable from the\n"
          "network. role = \"operator\" may start, stop and relaunch; role = \"viewer\" only looks.\n"
          "Argon2id hashes only, never passwords.\n"
          "Manage with: python -m backend.cli users add|passwd|role|remove|list")


class UsersError(Exception):
    """A users file that cannot be read or written, or a refused change; the message names the file."""


@dataclass(frozen=True)
class User:
    name: str
    hash: str
    created: str = ""
    changed: str = ""
    role: str = DEFAULT_ROLE


def name_problem(name: str) -> str | None:
    if not NAME_RE.match(name):
        return ("a user name starts with a letter and has up to 64 letters, digits and . _ @ - "
                f"(got {name!r})")
    return None


def role_problem(role: object) -> str | None:
    if role not in ROLES:
        return f"unknown role {role!r} (known: {', '.join(ROLES)})"
    return None


def _now_text(now: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if now is None else now))


def _line_of(text: str, needle: str) -> int | None:
    for i, line in enumerate(text.splitlines(), 1):
        if line.strip().startswith(needle):
            return i
    return None


def _key_line(text: str, table_line: int | str, key: str) -> int | str:
    """The line of ``key = ...`` in the table that starts on ``table_line`` (that line when not found)."""
    if not isinstance(table_line, int):
        return table_line
    pattern = re.compile(rf"^\s*{re.escape(key)}\s*=")
    for i, line in enumerate(text.splitlines()[table_line:], table_line + 1):
        if line.strip().startswith("["):
            break
        if pattern.match(line):
            return i
    return table_line


def parse_users(text: str, path: Path | str) -> dict[str, User]:
    """The users in ``text``; raises :class:`UsersError` naming the file, line and field."""
    try:
        doc = tomlkit.parse(text)
    except ParseError as exc:
        raise UsersError(f"{path}: line {exc.line}: not valid TOML: {exc}") from None
    unknown = [k for k in doc if k != "users"]
    if unknown:
        raise UsersError(f"{path}: line {_line_of(text, unknown[0]) or '?'}: {unknown[0]}: unknown key "
                         "(the file holds only [users.NAME] tables)")
    table = doc.get("users", {})
    if not isinstance(table, dict):
        raise UsersError(f"{path}: line {_line_of(text, 'users') or '?'}: users: expected tables [users.NAME]")
    out: dict[str, User] = {}
    for name, entry in table.items():
        line = _line_of(text, f"[users.{name}]") or _line_of(text, f'[users."{name}"]') or "?"
        where = f"{path}: line {line}"
        problem = name_problem(str(name))
        if problem:
            raise UsersError(f"{where}: users.{name}: {problem}")
        if not isinstance(entry, dict):
            raise UsersError(f"{where}: users.{name}: expected a table with a hash")
        h = entry.get("hash")
        if not isinstance(h, str) or not h.startswith("$argon2"):
            raise UsersError(f"{where}: users.{name}.hash: missing or not an Argon2 hash "
                             "(set it with `python -m backend.cli users passwd NAME`)")
        extra = [k for k in entry if k not in ("hash", "role", "created", "changed")]
        if extra:
            raise UsersError(f"{where}: users.{name}.{extra[0]}: unknown key "
                             "(known: hash, role, created, changed)")
        role = entry.get("role", DEFAULT_ROLE)
        role = str(role) if isinstance(role, str) else role
        problem = role_problem(role)
        if problem:
            raise UsersError(f"{path}: line {_key_line(text, line, 'role')}: users.{name}.role: {problem}")
        out[str(name)] = User(str(name), str(h), str(entry.get("created", "")), str(entry.get("changed", "")),
                              str(role))
    return out


class UserStore:
    """Read and change ``users.toml``; safe to share between threads."""

    def __init__(self, path: str | Path, *, hasher=None):
        self.path = Path(path)
        self._hasher = hasher
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int] | None = None
        self._users: dict[str, User] = {}
        self._error: UsersError | None = None

    # -- reading -------------------------------------------------------------

    def _stat(self) -> tuple[int, int, int] | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def _refresh(self) -> None:
        stamp = self._stat()
        if stamp == self._stamp and stamp is not None:
            return
        self._stamp = stamp
        if stamp is None:
            self._users, self._error = {}, None
            return
        try:
            text = self.path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            self._users, self._error = {}, UsersError(f"{self.path}: not UTF-8 text (byte {exc.start})")
            return
        except OSError as exc:
            self._users, self._error = {}, UsersError(f"{self.path}: cannot be read: {exc.strerror or exc}")
            return
        try:
            self._users, self._error = parse_users(text, self.path), None
        except UsersError as exc:
            self._users, self._error = {}, exc  # a broken file admits nobody

    def users(self) -> dict[str, User]:
        """The configured users (none while the file has an error: see :meth:`error`)."""
        with self._lock:
            self._refresh()
            return dict(self._users)

    def error(self) -> UsersError | None:
        with self._lock:
            self._refresh()
            return self._error

    def get(self, name: str) -> User | None:
        return self.users().get(name)

    def verify(self, name: str, password: str) -> User | None:
        """The user when ``password`` is theirs; None otherwise.

        Every way to fail costs one Argon2 verification: a name that cannot be
        a user's, a name that is not one, and a wrong or over-long password for
        a real user all take about the same time, so timing the answer does not
        tell which names exist."""
        user = self.get(name) if name_problem(name) is None else None
        if user is None:
            burn_verify(password, self._hasher)
            return None
        return user if verify_password(user.hash, password, self._hasher) else None

    # -- writing -------------------------------------------------------------

    @contextmanager
    def _locked_doc(self) -> Iterator[tomlkit.TOMLDocument]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.path.with_name("." + self.path.name + ".lock")
        with open(lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                if self.path.exists():
                    text = self.path.read_text(encoding="utf-8")
                    parse_users(text, self.path)  # refuse to rewrite a file we cannot read
                    doc = tomlkit.parse(text)
                else:
                    doc = tomlkit.document()
                    for line in HEADER.splitlines():
                        doc.add(tomlkit.comment(line))
                if "users" not in doc:
                    doc.add("users", tomlkit.table(is_super_table=True))
                yield doc
                self._write(tomlkit.dumps(doc))
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _write(self, text: str) -> None:
        write_private(self.path, text, fsync=True)  # atomic, 0600: the hashes are nobody else's

    def add(self, name: str, password: str, *, role: str = DEFAULT_ROLE, now: float | None = None) -> User:
        problem = name_problem(name) or role_problem(role)
        if problem:
            raise UsersError(f"{self.path}: {problem}")
        h = hash_password(password, self._hasher)
        with self._locked_doc() as doc:
            if name in doc["users"]:
                raise UsersError(f"{self.path}: user {name!r} exists already "
                                 "(change the password with `users passwd`, the role with `users role`)")
            entry = tomlkit.table()
            entry["hash"] = h
            entry["role"] = role
            entry["created"] = entry["changed"] = _now_text(now)
            doc["users"][name] = entry
        return User(name, h, _now_text(now), _now_text(now), role)

    def set_role(self, name: str, role: str) -> None:
        """Change ``name``'s role; the password and ``changed`` stay as they are.  A running
        dashboard ends the user's sessions (each session holds the role it signed in with)."""
        problem = role_problem(role)
        if problem:
            raise UsersError(f"{self.path}: {problem}")
        with self._locked_doc() as doc:
            if name not in doc["users"]:
                raise UsersError(f"{self.path}: no user named {name!r}")
            doc["users"][name]["role"] = role

    def set_password(self, name: str, password: str, *, now: float | None = None) -> None:
        h = hash_password(password, self._hasher)
        with self._locked_doc() as doc:
            if name not in doc["users"]:
                raise UsersError(f"{self.path}: no user named {name!r}")
            doc["users"][name]["hash"] = h
            doc["users"][name]["changed"] = _now_text(now)

    def remove(self, name: str) -> None:
        with self._locked_doc() as doc:
            if name not in doc["users"]:
                raise UsersError(f"{self.path}: no user named {name!r}")
            del doc["users"][name]
