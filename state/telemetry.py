"""Downsampled telemetry history in the state store (min/mean/max per bucket).

The sampler keeps the last hour at full rate in memory and hands closed
buckets here; pages read older history through the sampler, which reads it
from here.  Rows are keyed by (scope, index, field, width, bucket start), so
writing the same bucket twice replaces it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from state.store import Store

HOST_INDEX = -1


@dataclass(frozen=True)
class Bucket:
    scope: str  # "gpu" | "host"
    idx: int  # GPU index, or HOST_INDEX
    field: str
    t0: float  # bucket start, epoch seconds
    width_s: float
    n: int
    vmin: float
    vmean: float
    vmax: float


class TelemetryStore:
    def __init__(self, store: Store):
        self._store = store

    def write(self, buckets: Iterable[Bucket]) -> int:
        rows = [
            (b.scope, b.idx, b.field, b.t0, b.width_s, b.n, b.vmin, b.vmean, b.vmax)
            for b in buckets
            if b.n > 0
        ]
        if rows:
            self._store.executemany(
                "INSERT OR REPLACE INTO telemetry_buckets"
                " (scope, idx, field, t0, width_s, n, vmin, vmean, vmax)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )
        return len(rows)

    def read(
        self,
        scope: str,
        idx: int,
        field: str,
        since: float,
        until: float | None = None,
        width_s: float | None = None,
    ) -> list[Bucket]:
        sql = (
            "SELECT scope, idx, field, t0, width_s, n, vmin, vmean, vmax FROM telemetry_buckets"
            " WHERE scope = ? AND idx = ? AND field = ? AND t0 >= ?"
        )
        params: list[object] = [scope, idx, field, since]
        if until is not None:
            sql += " AND t0 < ?"
            params.append(until)
        if width_s is not None:
            sql += " AND width_s = ?"
            params.append(width_s)
        sql += " ORDER BY t0"
        return [Bucket(*tuple(r)) for r in self._store.query(sql, params)]

    def prune(self, older_than: float) -> int:
        """Delete buckets that start before ``older_than``; return how many."""
        row = self._store.query_one("SELECT COUNT(*) AS c FROM telemetry_buckets WHERE t0 < ?", (older_than,))
        n = int(row["c"]) if row else 0
        if n:
            self._store.execute("DELETE FROM telemetry_buckets WHERE t0 < ?", (older_than,))
        return n

    def span(self) -> tuple[float, float] | None:
        row = self._store.query_one("SELECT MIN(t0) AS a, MAX(t0) AS b FROM telemetry_buckets")
        if not row or row["a"] is None:
            return None
        return float(row["a"]), float(row["b"])
