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

The store checks itself and says plainly when it fails.  Opening runs
SQLite's ``PRAGMA quick_check``; a damaged file raises :class:`StoreCorrupt`
and a file that cannot be written raises :class:`StoreUnwritable`, each naming
the file, what is wrong and what to do.  A failed write is checked the same
way, and :meth:`Store.health` keeps the latest finding for the dashboard's
banner; a later successful write (or :meth:`Store.recheck`) clears an
unwritable finding.  Backups use SQLite's online backup API
(:meth:`Store.backup`), and :meth:`Store.backup_daily` keeps one a day in the
``backups/`` folder beside the store.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

from backend.filemodes import create_private, make_private_dirs, tighten_file

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).with_name("migrations")
_MIGRATION_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


BACKUP_DIR = "backups"  # beside the store: manual backups and one a day
DAILY_KEEP = 7  # daily backups kept; older ones are removed after a new one is made

# SQLite's primary result codes (``sqlite3.Error.sqlite_errorcode & 0xff``).
_PERM, _READONLY, _IOERR, _CORRUPT, _FULL, _CANTOPEN, _NOTADB = 3, 8, 10, 11, 13, 14, 26
_UNWRITABLE_CODES = frozenset({_PERM, _READONLY, _IOERR, _FULL, _CANTOPEN})
_CORRUPT_CODES = frozenset({_CORRUPT, _NOTADB})


class StoreClosed(RuntimeError):
    """Raised when a closed store is used."""


class StoreError(sqlite3.DatabaseError):
    """The state store cannot be used: ``str(e)`` names the file, what is wrong and what to do.

    A ``sqlite3.DatabaseError``, so code that already handles SQLite's errors handles these too."""

    kind = "error"

    def __init__(self, path: Path, problem: str, remedy: str):
        super().__init__(f"state store {path}: {problem}. {remedy}")
        self.path = Path(path)
        self.problem = problem
        self.remedy = remedy


class StoreUnwritable(StoreError):
    """The store can be read but not written (permissions, an immutable file, a full disk)."""

    kind = "unwritable"


class StoreCorrupt(StoreError):
    """SQLite reports the file damaged (``quick_check`` failed, or a read found a malformed page)."""

    kind = "corrupt"


@dataclass(frozen=True)
class StoreHealth:
    """The store's latest finding: ``ok``, ``unwritable`` or ``corrupt``."""

    state: str
    path: Path
    problem: str = ""
    remedy: str = ""
    since: float | None = None

    @property
    def ok(self) -> bool:
        return self.state == "ok"

    @property
    def message(self) -> str:
        return "" if self.ok else f"state store {self.path}: {self.problem}. {self.remedy}"


def backup_dir(store_path: str | os.PathLike[str]) -> Path:
    return Path(store_path).parent / BACKUP_DIR


def list_backups(store_path: str | os.PathLike[str]) -> list[Path]:
    """The backups beside the store, newest first (by modification time)."""
    d = backup_dir(store_path)
    try:
        found = [p for p in d.iterdir() if p.suffix == ".db" and p.is_file()]
    except OSError:
        return []
    return sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)


def remedy_corrupt(path: Path) -> str:
    backups = list_backups(path)
    restore = (f"restore the newest backup (cp {backups[0]} {path}, after removing {path.name}-wal and "
               f"{path.name}-shm)" if backups else f"restore a copy of {path.name} from your own backups")
    return (f"Stop the dashboard and every command using this workspace, then either {restore}, or move "
            f"the damaged file aside (mv {path} {path}.damaged, with its -wal and -shm files) and start "
            "again: a new store is made and every live process is re-adopted from the run files in run/")


def remedy_unwritable(path: Path) -> str:
    return (f"Make {path}, its -wal and -shm files and the folder {path.parent} writable again (file "
            "permissions, chattr -i, free disk space); until then the supervisor keeps its state in memory "
            "and writes it back once the file can be written, and commands that change something are refused")


def quick_check(conn: sqlite3.Connection, limit: int = 5) -> list[str]:
    """SQLite's ``PRAGMA quick_check``: [] when the file is sound, else up to ``limit`` findings."""
    try:
        rows = conn.execute(f"PRAGMA quick_check({int(limit)})").fetchall()
    except sqlite3.DatabaseError as exc:  # damage bad enough that the check itself cannot read
        return [str(exc)]
    found = [str(r[0]) for r in rows]
    return [] if found == ["ok"] else found


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

    def __init__(self, path: str | Path, *, busy_timeout_s: float = 10.0, check: bool = True,
                 clock: Callable[[], float] = time.time):
        """``check``: run ``PRAGMA quick_check`` before anything else (raises
        :class:`StoreCorrupt` naming what it found).  ``clock`` dates health
        findings and daily backups."""
        self.path = Path(path)
        self._clock = clock
        self._health = StoreHealth("ok", self.path)
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
            try:
                self._conn.execute("PRAGMA journal_mode=WAL")
            except sqlite3.OperationalError as exc:
                # A store that cannot be written keeps its journal mode; reads still work.
                if (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF not in _UNWRITABLE_CODES:
                    raise
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute("PRAGMA foreign_keys=ON")
            if check:
                found = quick_check(self._conn)
                if found:
                    raise self._mark(StoreCorrupt, f"SQLite's quick_check finds it damaged: {'; '.join(found)}")
            self._migrate()
        except StoreError:
            self.close()  # a failed open must not leak the connection
            raise
        except sqlite3.Error as exc:
            self.close()
            raise self._classify(exc, writing=True, check=False) from exc
        except BaseException:
            self.close()
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

    # -- health ----------------------------------------------------------

    def health(self) -> StoreHealth:
        """The latest finding (``ok`` until a check or a write says otherwise)."""
        return self._health

    def _mark(self, cls: type[StoreError], problem: str) -> StoreError:
        """Record a finding and return the error that reports it."""
        remedy = remedy_corrupt(self.path) if cls is StoreCorrupt else remedy_unwritable(self.path)
        old = self._health
        if old.state != cls.kind or old.problem != problem:
            since = old.since if old.state == cls.kind else self._clock()
            self._health = StoreHealth(cls.kind, self.path, problem, remedy, since)
            if old.state != cls.kind:
                log.error("state store %s: %s. %s", self.path, problem, remedy)
        return cls(self.path, problem, remedy)

    def _healed(self) -> None:
        if self._health.state == "unwritable":
            log.warning("state store %s can be written again", self.path)
            self._health = StoreHealth("ok", self.path)

    def _classify(self, exc: sqlite3.Error, *, writing: bool, check: bool = True) -> Exception:
        """The error to raise for SQLite's ``exc``: :class:`StoreCorrupt` for a damaged file,
        :class:`StoreUnwritable` for a write the file refused (checked with quick_check first,
        once per episode), else ``exc`` itself (a busy database, a constraint, a bad statement)."""
        if isinstance(exc, StoreError):
            return exc
        code = (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF
        text = str(exc)
        if code in _CORRUPT_CODES or "malformed" in text or "not a database" in text:
            return self._mark(StoreCorrupt, f"SQLite reports it damaged: {text}")
        if writing and code in _UNWRITABLE_CODES:
            if check and self._health.state == "ok" and self._conn is not None:
                found = quick_check(self._conn)
                if found:
                    return self._mark(StoreCorrupt, f"a write failed ({text}) and SQLite's quick_check "
                                                    f"finds it damaged: {'; '.join(found)}")
            return self._mark(StoreUnwritable, f"it cannot be written: {text}")
        return exc

    def check(self) -> StoreHealth:
        """Run ``PRAGMA quick_check`` now; a damaged file is recorded (and stays recorded)."""
        with self._lock:
            found = quick_check(self._connection())
            if found:
                self._mark(StoreCorrupt, f"SQLite's quick_check finds it damaged: {'; '.join(found)}")
            return self._health

    def recheck(self) -> StoreHealth:
        """While unwritable: try again (see :meth:`writable`); the finding clears once a write goes through."""
        if self._health.state == "unwritable":
            self.writable()
        return self._health

    def writable(self) -> bool:
        """Try a write that changes nothing (the schema's user_version set to itself) and record
        what it finds: False (and :meth:`health` says why) when the store cannot be written."""
        with self._lock:
            conn = self._connection()
            try:
                version = int(conn.execute("PRAGMA user_version").fetchone()[0])
                conn.execute(f"PRAGMA user_version = {version}")
            except sqlite3.Error as exc:
                err = self._classify(exc, writing=True)
                if not isinstance(err, StoreError):
                    raise err from exc
                return False
            self._healed()
            return True

    # -- backups ---------------------------------------------------------

    def backup(self, dest: str | os.PathLike[str] | None = None) -> Path:
        """Copy the store to ``dest`` (default: ``backups/state-YYYYmmdd-HHMMSS.db`` beside it) with
        SQLite's online backup API: a consistent copy while others go on writing.  The copy is 0600;
        an existing ``dest`` is never replaced (``FileExistsError``).  A damaged store is not copied
        (:class:`StoreCorrupt`)."""
        if dest is None:
            stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(self._clock()))
            target = make_private_dirs(backup_dir(self.path)) / f"state-{stamp}.db"
        else:
            target = Path(dest).expanduser()
            if target.is_dir():
                raise IsADirectoryError(f"{target} is a folder; give the backup file's path")
            if not target.parent.is_dir():
                raise FileNotFoundError(f"{target.parent} does not exist; create it or choose another path")
        if target.exists():
            raise FileExistsError(f"{target} exists already; it was left as it is (choose another path)")
        with self._lock:
            found = quick_check(self._connection())
        if found:
            raise self._mark(StoreCorrupt, f"SQLite's quick_check finds it damaged: {'; '.join(found)}")
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        create_private(tmp)
        try:
            src = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=30.0)
            try:
                dst = sqlite3.connect(str(tmp))
                try:
                    src.backup(dst)
                    dst.execute("PRAGMA journal_mode=DELETE")  # one self-contained file
                finally:
                    dst.close()
            finally:
                src.close()
            os.link(tmp, target)  # never over a file that appeared meanwhile
        finally:
            for tail in ("", "-journal", "-wal", "-shm"):
                Path(f"{tmp}{tail}").unlink(missing_ok=True)
        return target

    def backup_daily(self, now: float | None = None, keep: int = DAILY_KEEP) -> Path | None:
        """Make today's automatic backup (``backups/state-daily-YYYY-MM-DD.db``) unless it exists;
        keep the newest ``keep`` daily ones.  Returns the new file, or None when there was nothing
        to do or the store is damaged (then recorded in :meth:`health`, and no backup is removed).
        ``now`` (default: the store's clock) picks the day."""
        day = time.strftime("%Y-%m-%d", time.localtime(self._clock() if now is None else now))
        target = backup_dir(self.path) / f"state-daily-{day}.db"
        if target.exists():
            return None
        make_private_dirs(target.parent)
        try:
            made = self.backup(target)
        except StoreCorrupt:
            return None
        except FileExistsError:
            return None
        daily = sorted(target.parent.glob("state-daily-*.db"), reverse=True)
        for old in daily[keep:]:
            old.unlink(missing_ok=True)
        return made

    # -- migrations ----------------------------------------------------

    def _migrate(self) -> None:
        with self._lock:
            conn = self._connection()
            migrations = load_migrations()
            has_table = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'").fetchone()
            if has_table:
                applied = {int(r[0]) for r in conn.execute("SELECT version FROM schema_migrations")}
                if all(v in applied for v, _, _ in migrations):
                    return  # nothing to write: a store that cannot be written still opens
            conn.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
            )
            for version, name, sql in migrations:
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

    # A failed write raises StoreUnwritable or StoreCorrupt (see _classify); a
    # failed read of a damaged page raises StoreCorrupt.

    def execute(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> int:
        """Run one writing statement; return the last row id."""
        with self._lock:
            conn = self._connection()
            before = conn.total_changes
            try:
                cur = conn.execute(sql, params)
            except sqlite3.Error as exc:
                raise self._classify(exc, writing=True) from exc
            if conn.total_changes != before:  # a write went through (a read through execute proves nothing)
                self._healed()
            return int(cur.lastrowid or 0)

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        with self.transaction() as conn:
            conn.executemany(sql, rows)

    def query(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            try:
                return self._connection().execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise self._classify(exc, writing=False) from exc

    def query_one(self, sql: str, params: Sequence[Any] | dict[str, Any] = ()) -> sqlite3.Row | None:
        with self._lock:
            try:
                return self._connection().execute(sql, params).fetchone()
            except sqlite3.Error as exc:
                raise self._classify(exc, writing=False) from exc

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """Hold the lock and an IMMEDIATE transaction for several statements."""
        with self._lock:
            conn = self._connection()
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise self._classify(exc, writing=True) from exc
            before = conn.total_changes
            try:
                yield conn
            except sqlite3.Error as exc:
                self._rollback(conn)
                raise self._classify(exc, writing=True) from exc
            except BaseException:
                self._rollback(conn)
                raise
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback(conn)
                raise self._classify(exc, writing=True) from exc
            if conn.total_changes != before:
                self._healed()

    @staticmethod
    def _rollback(conn: sqlite3.Connection) -> None:
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # the failure being reported matters more


def _split_sql(sql: str) -> list[str]:
    """Split a migration file into statements.

    ``--`` comments are dropped first; statements must not contain semicolons
    or ``--`` inside string literals.
    """
    code = "\n".join(line.split("--", 1)[0] for line in sql.splitlines())
    return [s.strip() for s in code.split(";") if s.strip()]
