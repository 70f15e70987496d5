"""Alert history, acknowledgements and mutes in the state store.

One row per firing of a key (``rule:subject``): :meth:`AlertStore.fire` opens it,
:meth:`~AlertStore.update` keeps its severity and text current while it lasts,
:meth:`~AlertStore.clear` closes it.  A mute names a key or a rule and lasts until a time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from state.store import Store

_COLS = ("id, key, rule, subject, severity, title, action, link, since, fired_at, updated_at, cleared_at,"
         " acked_at, acked_by, notified_at")


@dataclass(frozen=True)
class AlertRecord:
    id: int
    key: str
    rule: str
    subject: str
    severity: str
    title: str
    action: str
    link: str
    since: float
    fired_at: float
    updated_at: float
    cleared_at: float | None = None
    acked_at: float | None = None
    acked_by: str | None = None
    notified_at: float | None = None

    @property
    def active(self) -> bool:
        return self.cleared_at is None

    @property
    def acked(self) -> bool:
        return self.acked_at is not None


@dataclass(frozen=True)
class Mute:
    target: str  # a key (rule:subject) or a rule
    until: float
    muted_by: str
    muted_at: float

    def covers(self, key: str, rule: str) -> bool:
        return self.target in (key, rule)


class UnknownAlert(LookupError):
    """No alert has that id."""


class AlertStore:
    def __init__(self, store: Store):
        self._store = store

    @staticmethod
    def _rec(row) -> AlertRecord:
        return AlertRecord(**{k: row[k] for k in row.keys()})

    def fire(self, *, key: str, rule: str, subject: str, severity: str, title: str, action: str, link: str,
             since: float, now: float | None = None) -> AlertRecord:
        """Open a firing of ``key``; an active one of that key is returned as it is."""
        now = time.time() if now is None else now
        with self._store.transaction() as conn:
            row = conn.execute(f"SELECT {_COLS} FROM alerts WHERE key = ? AND cleared_at IS NULL", (key,)).fetchone()
            if row is not None:
                return self._rec(row)
            cur = conn.execute(
                "INSERT INTO alerts(key, rule, subject, severity, title, action, link, since, fired_at, updated_at)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (key, rule, subject, severity, title, action, link, since, now, now))
            new_id = cur.lastrowid
        return self.get(int(new_id))  # type: ignore[arg-type]

    def update(self, alert_id: int, *, severity: str, title: str, action: str, link: str,
               now: float | None = None) -> None:
        self._store.execute(
            "UPDATE alerts SET severity = ?, title = ?, action = ?, link = ?, updated_at = ? WHERE id = ?",
            (severity, title, action, link, time.time() if now is None else now, alert_id))

    def clear(self, alert_id: int, now: float | None = None) -> None:
        now = time.time() if now is None else now
        self._store.execute("UPDATE alerts SET cleared_at = ?, updated_at = ? WHERE id = ? AND cleared_at IS NULL",
                            (now, now, alert_id))

    def mark_notified(self, alert_id: int, now: float | None = None) -> None:
        self._store.execute("UPDATE alerts SET notified_at = ? WHERE id = ?",
                            (time.time() if now is None else now, alert_id))

    def ack(self, alert_id: int, by: str, now: float | None = None) -> AlertRecord:
        """Acknowledge alert ``alert_id`` (an acknowledged alert stays in the history and the
        active list, marked, and sends no more notifications)."""
        rec = self.get(alert_id)
        if rec.acked_at is None:
            self._store.execute("UPDATE alerts SET acked_at = ?, acked_by = ? WHERE id = ?",
                                (time.time() if now is None else now, by, alert_id))
        return self.get(alert_id)

    def get(self, alert_id: int) -> AlertRecord:
        row = self._store.query_one(f"SELECT {_COLS} FROM alerts WHERE id = ?", (alert_id,))
        if row is None:
            raise UnknownAlert(f"no alert #{alert_id} in {self._store.path}")
        return self._rec(row)

    def active(self) -> list[AlertRecord]:
        rows = self._store.query(f"SELECT {_COLS} FROM alerts WHERE cleared_at IS NULL ORDER BY fired_at, id")
        return [self._rec(r) for r in rows]

    def history(self, limit: int = 500) -> list[AlertRecord]:
        """Every firing, newest first."""
        rows = self._store.query(f"SELECT {_COLS} FROM alerts ORDER BY fired_at DESC, id DESC LIMIT ?", (limit,))
        return [self._rec(r) for r in rows]

    # -- mutes ------------------------------------------------------------------------------------

    def mute(self, target: str, until: float, by: str, now: float | None = None) -> Mute:
        now = time.time() if now is None else now
        self._store.execute(
            "INSERT INTO alert_mutes(target, until, muted_by, muted_at) VALUES (?, ?, ?, ?)"
            " ON CONFLICT(target) DO UPDATE SET until = excluded.until, muted_by = excluded.muted_by,"
            " muted_at = excluded.muted_at", (target, until, by, now))
        return Mute(target, until, by, now)

    def unmute(self, target: str) -> bool:
        """Lift the mute of ``target``; False when there was none."""
        with self._store.transaction() as conn:
            return conn.execute("DELETE FROM alert_mutes WHERE target = ?", (target,)).rowcount > 0

    def mutes(self, now: float | None = None) -> list[Mute]:
        """Mutes in force at ``now``."""
        now = time.time() if now is None else now
        rows = self._store.query("SELECT target, until, muted_by, muted_at FROM alert_mutes WHERE until > ?"
                                 " ORDER BY target", (now,))
        return [Mute(r["target"], r["until"], r["muted_by"], r["muted_at"]) for r in rows]

    def muted(self, key: str, rule: str, now: float | None = None) -> Mute | None:
        return next((m for m in self.mutes(now) if m.covers(key, rule)), None)
