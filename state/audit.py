"""The audit log: every control action, who asked, from where, and the outcome.

``client`` is the address the request came from.  Code deep in a control
path (the supervisor, the server fleet) writes entries without knowing the
request; the caller that does know it wraps the action in
:func:`acting_from`, and every entry written inside names that client.
Outside such a block the client is ``local`` (this host's command line, the
dashboard's own automation).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Iterator

from state.store import Store

OUTCOMES = ("ok", "refused", "error")
LOCAL = "local"

_client: ContextVar[str] = ContextVar("specdeck_audit_client", default=LOCAL)


@contextmanager
def acting_from(client: str) -> Iterator[None]:
    """Entries recorded inside (in this thread) name ``client``."""
    token = _client.set(client or LOCAL)
    try:
        yield
    finally:
        _client.reset(token)


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
    client: str = ""


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
    client: str | None = None,
) -> AuditEntry:
    """Append one entry; ``outcome`` is ``ok``, ``refused`` or ``error``.

    ``client`` defaults to the one set by :func:`acting_from` (else ``local``)."""
    if outcome not in OUTCOMES:
        raise ValueError(f"audit outcome {outcome!r}: expected one of {', '.join(OUTCOMES)}")
    if not isinstance(actor, str):
        raise TypeError(f"audit actor must be a name, got {type(actor).__name__}")
    if not actor or not source or not action:
        raise ValueError("audit entries need an actor, a source and an action")
    when = time.time() if at is None else float(at)
    where = client or _client.get()
    row_id = store.execute(
        "INSERT INTO audit_log (at, actor, source, action, target, detail, outcome, client)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (when, actor, source, action, target, detail or "", outcome, where),
    )
    return AuditEntry(row_id, when, actor, source, action, target, detail or "", outcome, where)


def recent(store: Store, limit: int = 100, target: str | None = None) -> list[AuditEntry]:
    """The latest ``limit`` entries, newest first (optionally for one target)."""
    if target is None:
        rows = store.query(
            "SELECT id, at, actor, source, action, target, detail, outcome, client FROM audit_log"
            " ORDER BY id DESC LIMIT ?",
            (int(limit),),
        )
    else:
        rows = store.query(
            "SELECT id, at, actor, source, action, target, detail, outcome, client FROM audit_log"
            " WHERE target = ? ORDER BY id DESC LIMIT ?",
            (target, int(limit)),
        )
    return [AuditEntry(**dict(r)) for r in rows]
