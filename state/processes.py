"""Managed processes in the state store: the latest record per name and the
timestamped history of its state transitions.

Values go in and come out as dataclasses.  A transition updates the
``processes`` row and appends to ``process_events`` in one transaction, and
can be made conditional on the state it expects to find (compare-and-set),
so two supervisors sharing a workspace (the dashboard and the command line)
never overwrite each other's newer state.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import weakref
from dataclasses import dataclass, fields, replace
from typing import Any

from specdeck_types.process import ProcessSpec, ProcState
from state.store import Store, StoreError

_UNSET: Any = object()
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProcessRecord:
    name: str
    kind: str
    spec: ProcessSpec
    state: ProcState
    state_since: float
    pid: int | None = None  # the child's pid (not the wrapper's)
    create_time: float | None = None  # the child's start (backend.supervisor.starts): half its identity
    wrapper_pid: int | None = None
    run_id: str | None = None
    started_at: float | None = None
    ended_at: float | None = None
    exit_code: int | None = None  # negative: killed by that signal number
    tries: int = 0  # restarts made by the restart policy since the last manual start
    log_path: str = ""
    detail: str = ""
    wrapper_create_time: float | None = None
    log_start: int | None = None  # log offset where the current run's own output begins
    pending_spec: ProcessSpec | None = None  # changed config, applied at the next start
    term_at: float | None = None  # when SIGTERM was delivered for the current stop
    pending_restart: str | None = None  # STOPPING: start again once stopped (the reason)

    @property
    def effective_spec(self) -> ProcessSpec:
        """The spec the next start uses."""
        return self.pending_spec or self.spec


@dataclass(frozen=True)
class StateEvent:
    id: int
    name: str
    at: float
    from_state: str | None
    to_state: str
    pid: int | None = None
    exit_code: int | None = None
    run_id: str | None = None
    detail: str = ""


_COLUMNS = (
    "name", "kind", "spec_json", "pending_spec_json", "state", "state_since", "pid",
    "create_time", "wrapper_pid", "wrapper_create_time", "run_id", "started_at", "ended_at",
    "exit_code", "tries", "log_path", "log_start", "detail", "term_at", "pending_restart",
)
_FIELD_NAMES = {f.name for f in fields(ProcessRecord)}

# Bumped on every write through any ProcessRepo on a store, so readers that
# cache records in this process can tell when to reload (other processes'
# writes show up in PRAGMA data_version instead).
_serials: "weakref.WeakKeyDictionary[Store, int]" = weakref.WeakKeyDictionary()
_serials_lock = threading.Lock()


def _as_expected(current: "ProcessRecord", expect_run_id: Any, expect_fields: dict[str, Any] | None) -> bool:
    """The compare of a compare-and-set update: the row still belongs to ``expect_run_id`` (when given)
    and each field of ``expect_fields`` still holds its value; an unknown field name is a TypeError."""
    if expect_run_id is not _UNSET and current.run_id != expect_run_id:
        return False
    if expect_fields:
        unknown = set(expect_fields) - _FIELD_NAMES
        if unknown:
            raise TypeError(f"unknown process record fields: {sorted(unknown)}")
        if any(getattr(current, k) != v for k, v in expect_fields.items()):
            return False
    return True


class ProcessRepo:
    """Read and write process records and their history.

    >>> repo = ProcessRepo(store)
    >>> repo.upsert(ProcessRecord(name="a", kind="other", spec=spec, state=ProcState.NEVER, state_since=now))
    >>> repo.transition("a", ProcState.STARTING, at=now, expect=ProcState.NEVER, pid=123)
    """

    def __init__(self, store: Store):
        self.store = store
        self._spec_cache: dict[str, ProcessSpec] = {}

    # -- change tracking ---------------------------------------------------

    def version(self) -> tuple[int, int]:
        """Changes when any connection (this process or another) wrote."""
        row = self.store.query_one("PRAGMA data_version")
        with _serials_lock:
            local = _serials.get(self.store, 0)
        return (int(row[0]) if row else 0, local)

    def _bump(self) -> None:
        with _serials_lock:
            _serials[self.store] = _serials.get(self.store, 0) + 1

    # -- reads -------------------------------------------------------------

    def get(self, name: str) -> ProcessRecord | None:
        row = self.store.query_one(f"SELECT {', '.join(_COLUMNS)} FROM processes WHERE name = ?", (name,))
        return self._from_row(row) if row is not None else None

    def list(self) -> list[ProcessRecord]:
        rows = self.store.query(f"SELECT {', '.join(_COLUMNS)} FROM processes ORDER BY name")
        return [self._from_row(r) for r in rows]

    def history(self, name: str, limit: int = 200) -> list[StateEvent]:
        """The latest ``limit`` transitions of ``name``, oldest first."""
        rows = self.store.query(
            "SELECT id, name, at, from_state, to_state, pid, exit_code, run_id, detail"
            " FROM process_events WHERE name = ? ORDER BY id DESC LIMIT ?",
            (name, int(limit)),
        )
        return [StateEvent(**dict(r)) for r in reversed(rows)]

    # -- writes ------------------------------------------------------------

    def upsert(self, record: ProcessRecord) -> ProcessRecord:
        """Insert or replace the whole row (no history event)."""
        values = self._to_row(record)
        self.store.execute(
            f"INSERT OR REPLACE INTO processes ({', '.join(_COLUMNS)})"
            f" VALUES ({', '.join('?' for _ in _COLUMNS)})",
            [values[c] for c in _COLUMNS],
        )
        self._bump()
        return record

    def update(
        self,
        name: str,
        *,
        expect_run_id: Any = _UNSET,
        expect_fields: dict[str, Any] | None = None,
        **changes: Any,
    ) -> ProcessRecord | None:
        """Change fields without a state transition (e.g. the pid once known).

        With ``expect_run_id`` the change applies only if the row still
        belongs to that run, and with ``expect_fields`` only if each named
        field still holds the given value (compare-and-set, e.g. claiming
        ``term_at`` while it is None).  Returns the new record, or None if
        the row is gone or has moved on.
        """
        with self.store.transaction() as conn:
            row = conn.execute(f"SELECT {', '.join(_COLUMNS)} FROM processes WHERE name = ?", (name,)).fetchone()
            if row is None:
                return None
            current = self._from_row(row)
            if not _as_expected(current, expect_run_id, expect_fields):
                return None
            new = self._apply(current, changes)
            self._write(conn, new)
        self._bump()
        return new

    def transition(
        self,
        name: str,
        to_state: ProcState,
        *,
        at: float,
        expect: ProcState | tuple[ProcState, ...] | None = None,
        expect_run_id: Any = _UNSET,
        detail: str = "",
        **changes: Any,
    ) -> ProcessRecord | None:
        """Move ``name`` to ``to_state`` and append the event, atomically.

        ``expect`` (a state or tuple of states) and ``expect_run_id`` make it
        conditional: when the row has moved on meanwhile, nothing is written
        and None is returned.  ``changes`` set other fields in the same write.
        """
        to_state = ProcState(to_state)
        with self.store.transaction() as conn:
            row = conn.execute(f"SELECT {', '.join(_COLUMNS)} FROM processes WHERE name = ?", (name,)).fetchone()
            if row is None:
                return None
            current = self._from_row(row)
            if expect is not None:
                allowed = (expect,) if isinstance(expect, ProcState) else tuple(expect)
                if current.state not in allowed:
                    return None
            if expect_run_id is not _UNSET and current.run_id != expect_run_id:
                return None
            new = self._apply(current, dict(changes, state=to_state, state_since=at, detail=detail))
            self._write(conn, new)
            conn.execute(
                "INSERT INTO process_events (name, at, from_state, to_state, pid, exit_code, run_id, detail)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (name, at, current.state.value, to_state.value, new.pid, new.exit_code, new.run_id, detail),
            )
        self._bump()
        return new

    def delete(self, name: str) -> None:
        """Forget the record (its history stays)."""
        self.store.execute("DELETE FROM processes WHERE name = ?", (name,))
        self._bump()

    # -- rows <-> records --------------------------------------------------

    def _spec(self, text: str) -> ProcessSpec:
        spec = self._spec_cache.get(text)
        if spec is None:
            spec = ProcessSpec.from_json(text)
            if len(self._spec_cache) > 4096:
                self._spec_cache.clear()
            self._spec_cache[text] = spec
        return spec

    def _from_row(self, row: Any) -> ProcessRecord:
        d = dict(row)
        try:
            spec = self._spec(d.pop("spec_json"))
            pending_text = d.pop("pending_spec_json")
            pending = self._spec(pending_text) if pending_text else None
        except (ValueError, TypeError, KeyError, json.JSONDecodeError) as exc:
            raise ValueError(f"{self.store.path}: processes row {d.get('name')!r}: field spec_json: {exc}") from exc
        try:
            state = ProcState(d.pop("state"))
        except ValueError as exc:
            raise ValueError(f"{self.store.path}: processes row {d.get('name')!r}: field state: {exc}") from exc
        return ProcessRecord(spec=spec, pending_spec=pending, state=state, **d)

    @staticmethod
    def _to_row(r: ProcessRecord) -> dict[str, Any]:
        return {
            "name": r.name,
            "kind": str(getattr(r.kind, "value", r.kind)),
            "spec_json": r.spec.to_json(),
            "pending_spec_json": r.pending_spec.to_json() if r.pending_spec is not None else None,
            "state": ProcState(r.state).value,
            "state_since": float(r.state_since),
            "pid": r.pid,
            "create_time": r.create_time,
            "wrapper_pid": r.wrapper_pid,
            "wrapper_create_time": r.wrapper_create_time,
            "run_id": r.run_id,
            "started_at": r.started_at,
            "ended_at": r.ended_at,
            "exit_code": r.exit_code,
            "tries": int(r.tries),
            "log_path": r.log_path,
            "log_start": r.log_start,
            "detail": r.detail or "",
            "term_at": r.term_at,
            "pending_restart": r.pending_restart,
        }

    @staticmethod
    def _apply(current: ProcessRecord, changes: dict[str, Any]) -> ProcessRecord:
        unknown = set(changes) - _FIELD_NAMES
        if unknown:
            raise TypeError(f"unknown process record fields: {sorted(unknown)}")
        return replace(current, **changes)

    def _write(self, conn: Any, record: ProcessRecord) -> None:
        values = self._to_row(record)
        cols = [c for c in _COLUMNS if c != "name"]
        conn.execute(
            f"UPDATE processes SET {', '.join(f'{c} = ?' for c in cols)} WHERE name = ?",
            [values[c] for c in cols] + [record.name],
        )


class HeldRepo(ProcessRepo):
    """A :class:`ProcessRepo` that goes on when the store cannot be written or read.

    A write the store refuses (:class:`state.store.StoreError`) is applied to a
    copy in memory instead, with the same compare-and-set checks, and its
    history event is queued; reads show the stored rows with the held changes
    over them (the last rows read when the store cannot be read either).
    :meth:`flush` writes the held changes back in one transaction once the
    store takes writes again; a row another writer changed meanwhile keeps
    that writer's version.  While anything is held, writes go to memory
    without trying the store, so a refusing store costs one try per flush.
    """

    def __init__(self, store: Store, clock: Any = None):
        super().__init__(store)
        self._clock = clock or time.time
        self._held: dict[str, ProcessRecord | None] = {}  # name -> record (None: deleted)
        self._base: dict[str, ProcessRecord | None] = {}  # the stored row the held change replaces
        self._events: list[tuple[Any, ...]] = []
        self._last: dict[str, ProcessRecord] = {}  # the rows last read from the store
        self._serial = 0
        self.held_since: float | None = None
        self.last_error: str = ""

    # -- state -------------------------------------------------------------

    @property
    def held(self) -> int:
        """How many records have changes not yet written to the store."""
        return len(self._held)

    def _hold(self, exc: Exception) -> None:
        if not self._held:
            log.warning(
                "%s; the supervisor keeps the processes' state in memory until it can be written", exc)
            self.held_since = self._clock()
        self.last_error = str(exc)

    # -- reads -------------------------------------------------------------

    def version(self) -> tuple[int, ...]:  # type: ignore[override]
        try:
            stored = super().version()
        except StoreError:
            stored = (-1, -1)
        return (*stored, self._serial)

    def _stored(self) -> dict[str, ProcessRecord]:
        try:
            self._last = {r.name: r for r in super().list()}
        except StoreError as exc:
            self.last_error = str(exc)
        return dict(self._last)

    def list(self) -> list[ProcessRecord]:  # type: ignore[override]
        rows = self._stored()
        for name, rec in self._held.items():
            if rec is None:
                rows.pop(name, None)
            else:
                rows[name] = rec
        return [rows[n] for n in sorted(rows)]

    def get(self, name: str) -> ProcessRecord | None:
        if name in self._held:
            return self._held[name]
        try:
            return super().get(name)
        except StoreError:
            return self._last.get(name)

    def history(self, name: str, limit: int = 200) -> list[StateEvent]:
        try:
            stored = super().history(name, limit)
        except StoreError:
            stored = []
        held = [StateEvent(id=-1 - i, name=e[0], at=e[1], from_state=e[2], to_state=e[3], pid=e[4],
                           exit_code=e[5], run_id=e[6], detail=e[7])
                for i, e in enumerate(self._events) if e[0] == name]
        return (stored + held)[-int(limit):]

    # -- writes ------------------------------------------------------------

    def _keep(self, name: str, new: ProcessRecord | None, base: ProcessRecord | None) -> None:
        if name not in self._base:
            self._base[name] = base
        self._held[name] = new
        self._serial += 1

    def upsert(self, record: ProcessRecord) -> ProcessRecord:
        if not self._held:
            try:
                return super().upsert(record)
            except StoreError as exc:
                self._hold(exc)
        self._keep(record.name, record, self.get(record.name))
        return record

    def delete(self, name: str) -> None:
        if not self._held:
            try:
                super().delete(name)
                return
            except StoreError as exc:
                self._hold(exc)
        self._keep(name, None, self.get(name))

    def update(self, name: str, *, expect_run_id: Any = _UNSET, expect_fields: dict[str, Any] | None = None,
               **changes: Any) -> ProcessRecord | None:
        if not self._held:
            try:
                return super().update(name, expect_run_id=expect_run_id, expect_fields=expect_fields, **changes)
            except StoreError as exc:
                self._hold(exc)
        current = self.get(name)
        if current is None or not _as_expected(current, expect_run_id, expect_fields):
            return None
        new = self._apply(current, changes)
        self._keep(name, new, current)
        return new

    def transition(self, name: str, to_state: ProcState, *, at: float,
                   expect: ProcState | tuple[ProcState, ...] | None = None, expect_run_id: Any = _UNSET,
                   detail: str = "", **changes: Any) -> ProcessRecord | None:
        if not self._held:
            try:
                return super().transition(name, to_state, at=at, expect=expect, expect_run_id=expect_run_id,
                                          detail=detail, **changes)
            except StoreError as exc:
                self._hold(exc)
        to_state = ProcState(to_state)
        current = self.get(name)
        if current is None:
            return None
        if expect is not None:
            allowed = (expect,) if isinstance(expect, ProcState) else tuple(expect)
            if current.state not in allowed:
                return None
        if expect_run_id is not _UNSET and current.run_id != expect_run_id:
            return None
        new = self._apply(current, dict(changes, state=to_state, state_since=at, detail=detail))
        self._keep(name, new, current)
        self._events.append((name, at, current.state.value, to_state.value, new.pid, new.exit_code, new.run_id,
                             detail))
        return new

    def flush(self) -> bool:
        """Write the held changes to the store; True when nothing is held any more.

        A record whose stored row is no longer the one the held change was made
        on (another writer changed it meanwhile) keeps the stored row."""
        if not self._held:
            return True
        kept: list[str] = []
        try:
            with self.store.transaction() as conn:
                for name, rec in self._held.items():
                    row = conn.execute(f"SELECT {', '.join(_COLUMNS)} FROM processes WHERE name = ?",
                                       (name,)).fetchone()
                    stored = self._from_row(row) if row is not None else None
                    if stored != self._base.get(name):
                        continue  # another writer moved it on: that version stands
                    kept.append(name)
                    if rec is None:
                        conn.execute("DELETE FROM processes WHERE name = ?", (name,))
                        continue
                    values = self._to_row(rec)
                    conn.execute(f"INSERT OR REPLACE INTO processes ({', '.join(_COLUMNS)})"
                                 f" VALUES ({', '.join('?' for _ in _COLUMNS)})", [values[c] for c in _COLUMNS])
                conn.executemany(
                    "INSERT INTO process_events (name, at, from_state, to_state, pid, exit_code, run_id, detail)"
                    " VALUES (?, ?, ?, ?, ?, ?, ?, ?)", [e for e in self._events if e[0] in kept])
        except StoreError as exc:
            self.last_error = str(exc)
            return False
        dropped = sorted(set(self._held) - set(kept))
        log.warning(
            "state store %s can be written again: wrote %d held record(s)%s", self.store.path, len(kept),
            f"; kept the stored version of {', '.join(dropped)} (changed by another writer)" if dropped else "")
        self._held.clear()
        self._base.clear()
        self._events.clear()
        self._serial += 1
        self.held_since = None
        self.last_error = ""
        self._bump()
        return True
