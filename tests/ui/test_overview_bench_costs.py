"""The Overview's cost tile takes each settled benchmark result's cost from the keeping the Benchmarks page's
Runs table uses (ui.bench.cost): a new visitor's first run does not read every result's power history again."""

from __future__ import annotations

import time
from types import SimpleNamespace

from backend.flows import cost as job_cost
from specdeck_types.bench import BenchConfig, BenchFigures, BenchLoad, BenchResult
from ui import overview_data
from ui.bench import cost as bench_cost


def test_settled_results_are_costed_once_for_the_overview_and_the_runs_table(monkeypatch, tmp_path):
    now = time.time()
    settled = BenchResult(source="run", server="sim", config=BenchConfig(target_model="T"), load=BenchLoad(),
                          results=BenchFigures(output_tok_s=90.0), started_at=now - 7200, ended_at=now - 3600)
    fresh = BenchResult(source="run", server="sim", config=BenchConfig(target_model="T"), load=BenchLoad(),
                        results=BenchFigures(output_tok_s=90.0), started_at=now - 60, ended_at=now - 5)
    results = [settled.with_id(1), fresh.with_id(2)]
    rt = SimpleNamespace(store=SimpleNamespace(path=str(tmp_path / "state.db")), fleet=None, telemetry=None)
    calls: list[int] = []
    monkeypatch.setattr(job_cost, "bench_cost", lambda r, fleet, power=None: calls.append(r.id) or ("cost", r.id))

    first = overview_data.bench_costs(rt, results)  # one visitor's Overview
    assert first == {1: ("cost", 1), 2: ("cost", 2)} and calls == [1, 2]
    again = overview_data.bench_costs(rt, results)  # the next visitor's: only the result still settling
    assert again == first and calls == [1, 2, 2]
    assert bench_cost.result_costs(rt, results) == first and calls == [1, 2, 2, 2]  # the Runs table: the same
    bench_cost.forget(rt.store.path, [1])
