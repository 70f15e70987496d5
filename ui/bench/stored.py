"""The stored benchmark results, decoded once per change of the table and shared by the pages.

Decoding every stored result (JSON into nested dataclasses) is the larger part of what the Overview and the
Benchmarks page do on a run: the Overview needs the list three times a run (the pipeline strip, the benchmark
tile and the cost tile) and every tab opened anew decodes it again.  :func:`results` reads a fingerprint of the
table instead (its row count, the sum and the largest of its ids, the sum of the times the rows were stored and
the size of their data: one aggregate query) and decodes the rows only when that changed: a result stored,
imported or deleted, by this dashboard or by the command line.  Results are only ever inserted or deleted
(never updated in place), and a row stored again under a deleted row's id has another storing time.
"""

from __future__ import annotations

import threading

from specdeck_types.bench import BenchResult
from state.bench import BenchStore

FINGERPRINT = ("SELECT COUNT(*), MAX(id), TOTAL(id), TOTAL(created_at), TOTAL(LENGTH(data)), TOTAL(LENGTH(raw)) "
               "FROM bench_results")
WATCH_JOB_S = 3.0  # how often a page reads the fingerprint while a benchmark or sweep job of the workspace runs
WATCH_IDLE_S = 10.0  # and otherwise: a result stored from a terminal, an import, another dashboard
_KEEP = 8  # stores remembered at once (one per open workspace; tests open many)

_lock = threading.Lock()
_cache: dict[int, tuple[object, tuple, tuple[BenchResult, ...]]] = {}  # id(store) -> (store, fingerprint, results)


def fingerprint(store) -> tuple:
    """What changes whenever a result is stored or deleted."""
    row = store.query_one(FINGERPRINT)
    return tuple(row) if row is not None else ()


def results(store) -> list[BenchResult]:
    """Every stored result, oldest first, as ``BenchStore(store).list()`` gives them (a new list each call;
    the results themselves are frozen and shared)."""
    key = fingerprint(store)
    with _lock:
        hit = _cache.get(id(store))
    if hit is not None and hit[0] is store and hit[1] == key:
        return list(hit[2])
    found = tuple(BenchStore(store).list())
    # a result stored between the fingerprint and the list makes the next call's fingerprint differ: read again
    with _lock:
        if len(_cache) >= _KEEP and id(store) not in _cache:
            _cache.clear()
        _cache[id(store)] = (store, key, found)
    return list(found)


def watch_every(tab: str, job_live: bool, live_tabs: tuple[str, ...]) -> float | None:
    """Seconds between the reads of the fingerprint by the Benchmarks page with ``tab`` open, so that a result
    stored anywhere shows there: ``WATCH_JOB_S`` while a benchmark or sweep job of the workspace runs,
    ``WATCH_IDLE_S`` otherwise (a run or import from a terminal or another dashboard); None on ``live_tabs``
    while such a job runs, whose live parts draw the page again for each result of their job at once."""
    if job_live:
        return None if tab in live_tabs else WATCH_JOB_S
    return WATCH_IDLE_S
