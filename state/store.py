"""One owner of the SQLite connection.

The store opens a single connection in WAL mode, applies the numbered
migrations in ``state/migrations/`` (``NNNN_name.sql``) in order, and
serialises every statement through one lock, so there is exactly one writer
per process.  Other processes (the command-line entry, a second dashboard)
may open their own store on the same file: WAL and the busy timeout make
that safe.

Domain modules (``state/processes.py``, ``state/telemetry.py`` ...) build a
small value API on top of :meth:`Store.execute`, :meth:`Store.query` and
:meth:`Store.transaction`; nothing outside ``state/`` sees a cursor.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from backend.filemodes import create_private, make_private_dirs, tighten_file

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
_MIGRATION_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


class StoreClosed(RuntimeError):
    """Raised when a closed store is used."""


def load_migrations(directory: Path = MIGRATIONS_DIR) -> list[tuple[int, str, str]]:
    """Return ``(version, file name, sql)`` for every migration, in order.

    Two files with the same number, or a gap in the numbering, is a
    programming error and raises ``ValueError`` naming the files.
    """
    found: dict[int, Path] = {}
    for path in sorted(directory.glob("*.sql")):
        m = _MIGRATION_NAME.match(path.name)
        if not m:
            raise ValueError(f"{path}: migration files are named NNNN_name.sql")
        version = int(m.group(1))
        if version in found:
            raise ValueError(f"{path}: migration {version} already defined by {found[version].name}")
        found[version] = path
    versions = sorted(found)
    if versions and versions != list(range(1, len(versions) + 1)):
        raise ValueError(f"{directory}: migration numbers must run 1..N without gaps, found {versions}")
    return [(v, found[v].name, found[v].read_text(encoding="utf-8")) for v in versions]


def _create_private(path: Path) -> None:
    """Make the database file 0600 before SQLite opens it (SQLite would create it with the umask's
    0644, and the audit log, sessions and results in it are not for other accounts).  SQLite creates
    ``-wal``, ``-shm`` and ``-journal`` with the database's own mode, so they follow.  A database an
    earlier version left readable is tightened with its companions, when this user owns them."""
    make_private_dirs(path.parent)
    if not create_private(path):
        for p in (path, *(path.with_name(path.name + tail) for tail in ("-wal", "-shm", "-journal"))):
            tighten_file(p)


class Store:
    """A SQLite database with migrations and one serialised connection."""

    def __init__(self, path: str | Path, *, busy_timeout_s: float = 10.0):
        self.path = Path(path)
        _create_private(self.path)
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = sqlite3.connect(
            str(self.path),
            timeout=busy_timeout_s,
            check_same_thread=False,
            isolation_level=None,  # autocommit; transactions are explicit
        )
        try:
            self._conn.row_factory = sqlite3.Row
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._migrate()
        except BaseException:
            self.close()  # a failed open must not leak the connection
            raise

    # -- lifecycle -----------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._conn is None

    def close(self) -> None:
        """Close the connection; calling it again does nothing."""
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.close()
                finally:
                    self._conn = None

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreClosed(f"state store {self.path} is closed")
        return self._conn

    # -- migrations ----------------------------------------------------

    def _migrate(self) -> None:
        with self._lock:
            conn = self._connection()
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
            )
            for version, name, sql in load_migrations():
                # Check inside the write transaction: another process opening
                # the same new database may have applied it a moment ago.
                conn.execute("BEGIN IMMEDIATE")
                try:
                    if conn.execute("SELECT 1 FROM schema_migrations WHERE version = ?", (version,)).fetchone():
                        conn.execute("COMMIT")
                        continue
                    for statement in _split_sql(sql):
                        conn.execute(statement)
                    conn.execute(
                        "INSERT INTO schema_migrations(version, name, applied_at)"
                        " VALUES (?, ?, strftime('%s','now'))",
                        (version, name),
                    )
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise

    def schema_version(self) -> int:
        row = self.query_one("SELECT MAX(version) AS v FROM schema_migrations")
        return int(row["v"] or 0) if row else 0

    # -- statements ----------------------------------------------------

    def execute(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> int:
        """Run one writing statement; return the last row id."""
        with self._lock:
            cur = self._connection().execute(sql, params)
            return int(cur.lastrowid or 0)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.executemany(sql, rows)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    def query(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._connection().execute(sql, params).fetchall()

    def query_one(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> sqlite3.Row | None:
        with self._lock:
            return self._connection().execute(sql, params).fetchone()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """Hold the lock and an IMMEDIATE transaction for several statements."""
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            else:
                conn.execute("COMMIT")


def _split_sql(sql: str) -> list[str]:
    """Split a migration file into statements.

    ``--`` comments are dropped first; statements must not contain semicolons
    or ``--`` inside string literals.
    """
    code = "\n".join(line.split("--", 1)[0] for line in sql.splitlines())
    return [s.strip() for s in code.split(";") if s.strip()]
