"""Benchmark results in the state store (dataclasses in, dataclasses out).

The whole :class:`~specdeck_types.bench.BenchResult` is stored as JSON; the
columns beside it are copies for filtering.  An imported result is keyed by
its file and line: inserting one whose ``(source_file, source_line)`` is
already stored returns the stored one instead of adding a duplicate.

Nothing impossible is stored: a figure that is not finite (but an unlimited
request rate), or past what SQLite's integers and a measurement can be, is
stored as missing; the importers refuse such results before they get here,
with the line and field named.  Reading never raises on a row: one whose data
is not JSON reads as a result named unreadable, with its raw text.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass, replace

from specdeck_types.bench import BenchResult
from state.store import Store

_COLUMNS = (
    "created_at, started_at, ended_at, source, source_file, source_line, server, target_model,"
    " draft_model, algorithm, concurrency, input_len, output_len, dataset, output_tok_s, accept_len,"
    " data, raw"
)


@dataclass(frozen=True)
class Inserted:
    """The stored result, and whether this call added it (False: it was there already)."""

    result: BenchResult
    new: bool


@dataclass(frozen=True)
class BenchFilter:
    """Filters for :meth:`BenchStore.list`; a ``None`` field does not filter."""

    server: str | None = None
    concurrency: int | None = None
    target_model: str | None = None
    draft_model: str | None = None
    dataset: str | None = None
    source: str | None = None  # exact ("run") or a prefix ending in ":" ("import:")
    since: float | None = None  # started (or stored, if the start is unknown) at or after


class BenchStore:
    def __init__(self, store: Store):
        self._store = store

    def insert(self, result: BenchResult, *, now: float | None = None) -> Inserted:
        """Store ``result`` (its ``id`` is ignored); dedupe on file and line."""
        created = result.created_at if result.created_at is not None else (time.time() if now is None else now)
        stored = _finite(result).with_id(0, created)
        row = self._row(stored)
        with self._store.transaction() as conn:
            if result.source_file is not None and result.source_line is not None:
                found = conn.execute(
                    "SELECT id, data, raw FROM bench_results WHERE source_file = ? AND source_line = ?",
                    (result.source_file, result.source_line),
                ).fetchone()
                if found is not None:
                    return Inserted(_decode(found["id"], found["data"], found["raw"]), False)
            cur = conn.execute(f"INSERT INTO bench_results ({_COLUMNS}) VALUES ({', '.join('?' * 18)})", row)
            new_id = int(cur.lastrowid)
        return Inserted(stored.with_id(new_id), True)

    def get(self, id: int) -> BenchResult | None:
        row = self._store.query_one("SELECT id, data, raw FROM bench_results WHERE id = ?", (id,))
        return _decode(row["id"], row["data"], row["raw"]) if row else None

    def list(self, flt: BenchFilter | None = None, *, limit: int | None = None) -> list[BenchResult]:
        """Results matching ``flt``, oldest first (by start, else by when stored)."""
        flt = flt or BenchFilter()
        where: list[str] = []
        params: list[object] = []
        for column in ("server", "concurrency", "target_model", "draft_model", "dataset"):
            value = getattr(flt, column)
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        if flt.source is not None:
            if flt.source.endswith(":"):
                where.append("substr(source, 1, ?) = ?")
                params += [len(flt.source), flt.source]
            else:
                where.append("source = ?")
                params.append(flt.source)
        if flt.since is not None:
            where.append("COALESCE(started_at, created_at) >= ?")
            params.append(flt.since)
        sql = "SELECT id, data, raw FROM bench_results"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY COALESCE(started_at, created_at), id"
        if limit is not None:  # the newest ``limit``, still oldest first
            sql = (
                "SELECT * FROM (SELECT id, data, raw, COALESCE(started_at, created_at) AS t FROM bench_results"
                + (" WHERE " + " AND ".join(where) if where else "")
                + " ORDER BY t DESC, id DESC LIMIT ?) ORDER BY t, id"
            )
            params.append(int(limit))
        return [_decode(r["id"], r["data"], r["raw"]) for r in self._store.query(sql, params)]

    def delete(self, id: int) -> bool:
        with self._store.transaction() as conn:
            return conn.execute("DELETE FROM bench_results WHERE id = ?", (id,)).rowcount > 0

    def count(self) -> int:
        row = self._store.query_one("SELECT COUNT(*) AS c FROM bench_results")
        return int(row["c"]) if row else 0

    @staticmethod
    def _row(r: BenchResult) -> tuple:
        data = r.to_dict()
        data.pop("raw", None)
        data.pop("id", None)
        return (
            r.created_at,
            r.started_at,
            r.ended_at,
            r.source,
            r.source_file,
            r.source_line,
            r.server,
            r.config.target_model,
            r.config.draft_model,
            r.config.algorithm,
            r.load.concurrency,
            r.load.input_len,
            r.load.output_len,
            r.load.dataset,
            r.results.output_tok_s,
            r.accept_len,
            json.dumps(data, sort_keys=True),
            r.raw,
        )


_LIMIT = 1e12  # past this no figure is a measurement (and an integer would not fit SQLite)


def _clean(name: str, v):
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, int):
        return v if abs(v) <= _LIMIT else None
    if isinstance(v, float):
        if name == "request_rate" and v == math.inf:
            return v
        return v if math.isfinite(v) and abs(v) <= _LIMIT else None
    return v


def _finite(r: BenchResult) -> BenchResult:
    """``r`` with every impossible figure missing (see the module's docstring)."""
    def fix(obj):
        changes = {}
        for f in dataclasses.fields(obj):
            v = getattr(obj, f.name)
            if dataclasses.is_dataclass(v):
                new = fix(v)
                if new is not v:
                    changes[f.name] = new
            else:
                c = _clean(f.name, v)
                if c is not v and not (isinstance(v, float) and isinstance(c, float) and c == v):
                    changes[f.name] = c
        return replace(obj, **changes) if changes else obj

    return replace(r, config=fix(r.config), load=fix(r.load), results=fix(r.results))


def _decode(id: int, data: str, raw: str | None) -> BenchResult:
    try:
        d = json.loads(data)
    except (TypeError, ValueError, RecursionError):
        d = None
    if not isinstance(d, dict):
        return BenchResult(source="import:unreadable", id=int(id), raw=raw or "",
                           label="stored data unreadable")
    d["id"] = int(id)
    if raw is not None:
        d["raw"] = raw
    return BenchResult.from_dict(d)
