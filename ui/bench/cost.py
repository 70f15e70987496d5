"""What each benchmark result cost (GPU-hours and energy, backend.flows.cost), for the Runs table.

A result's cost reads its server's power history once: a result that ended minutes ago (its readings all
stored) is kept here by its store and id, so a page of 500 results does not read them on every run."""

from __future__ import annotations

import threading
import time

from backend.flows import cost as job_cost

SETTLED_S = 300.0  # a result that ended this long ago has every power reading it will get
_lock = threading.Lock()
_kept: dict[tuple[str, int], job_cost.Cost] = {}


def result_costs(rt, results, *, now: float | None = None) -> dict[int, job_cost.Cost]:
    """{result id: its cost} for ``results``."""
    now = time.time() if now is None else now
    # the dashboard sampler's readings: its energy counter first, its power history where the counter falls short
    power = job_cost.telemetry_power(getattr(rt, "telemetry", None))
    store = str(getattr(rt.store, "path", id(rt.store)))
    out: dict[int, job_cost.Cost] = {}
    for r in results:
        if r.id is None:
            continue
        key = (store, r.id)
        with _lock:
            c = _kept.get(key)
        if c is None:
            c = job_cost.bench_cost(r, rt.fleet, power=power)
            if r.ended_at is not None and now - r.ended_at > SETTLED_S:
                with _lock:
                    _kept[key] = c
        out[r.id] = c
    return out


def forget(store_path: str, ids) -> None:
    """Drop the kept costs of deleted results."""
    with _lock:
        for i in ids:
            _kept.pop((store_path, i), None)
