"""The audit log: every control action, who asked, from where, and the outcome."""

from __future__ import annotations

import time
from dataclasses import dataclass

from state.store import Store

OUTCOMES = ("ok", "refused", "error")


@dataclass(frozen=True)
class AuditEntry:
    id: int
    at: float
    actor: str
    source: str
    action: str
    target: str
    detail: str = ""
    outcome: str = "ok"


def record(
    store: Store,
    actor: str,
    source: str,
    action: str,
    target: str,
    detail: str = "",
    outcome: str = "ok",
    *,
    at: float | None = None,
) -> AuditEntry:
    """Append one entry; ``outcome`` is ``ok``, ``refused`` or ``error``."""
    if outcome not in OUTCOMES:
        raise ValueError(f"audit outcome {outcome!r}: expected one of {', '.join(OUTCOMES)}")
    if not actor or not source or not action:
        raise ValueError("audit entries need an actor, a source and an action")
    when = time.time() if at is None else float(at)
    row_id = store.execute(
        "INSERT INTO audit_log (at, actor, source, action, target, detail, outcome) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (when, actor, source, action, target, detail or "", outcome),
    )
    return AuditEntry(row_id, when, actor, source, action, target, detail or "", outcome)


def recent(store: Store, limit: int = 100, target: str | None = None) -> list[AuditEntry]:
    """The latest ``limit`` entries, newest first (optionally for one target)."""
    if target is None:
        rows = store.query(
            "SELECT id, at, actor, source, action, target, detail, outcome FROM audit_log"
            " ORDER BY id DESC LIMIT ?",
            (int(limit),),
        )
    else:
        rows = store.query(
            "SELECT id, at, actor, source, action, target, detail, outcome FROM audit_log"
            " WHERE target = ? ORDER BY id DESC LIMIT ?",
            (target, int(limit)),
        )
    return [AuditEntry(**dict(r)) for r in rows]
