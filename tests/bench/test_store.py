"""The benchmark result store: insert, get, list with filters, dedupe of imports."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest

from specdeck_types.bench import BenchConfig, BenchFigures, BenchLoad, BenchResult, Percentiles
from state.bench import BenchFilter, BenchStore
from state.store import Store

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "s.db") as s:
        yield BenchStore(s)


def _result(**kw) -> BenchResult:
    base = dict(
        source="import:csv",
        server="glm5",
        config=BenchConfig(target_model="GLM-5", algorithm="EAGLE3", num_draft_tokens=5, cuda_graph=True),
        load=BenchLoad(concurrency=1, input_len=1024, output_len=512, dataset="random", request_rate=math.inf),
        results=BenchFigures(
            output_tok_s=82.3, accept_len=2.1, ttft_ms=Percentiles(mean=41.5, p99=88.0), completed=200
        ),
        source_file="/data/bench.csv",
        source_line=2,
        raw="glm5,82.3,2.1",
    )
    base.update(kw)
    return BenchResult(**base)


def test_insert_get_round_trip_keeps_every_group_and_infinity(store):
    ins = store.insert(_result(), now=1000.0)
    assert ins.new and ins.result.id is not None and ins.result.created_at == 1000.0
    got = store.get(ins.result.id)
    assert got == ins.result
    assert got.load.request_rate == math.inf
    assert got.results.ttft_ms.p99 == 88.0 and got.results.ttft_ms.median is None
    assert got.config.cuda_graph is True and got.raw == "glm5,82.3,2.1"
    assert got.speculative and got.format == "csv"


def test_same_file_and_line_is_stored_once(store):
    first = store.insert(_result())
    again = store.insert(_result(results=BenchFigures(output_tok_s=1.0)))
    assert not again.new
    assert again.result.id == first.result.id
    assert again.result.results.output_tok_s == 82.3
    assert again.result.raw == "glm5,82.3,2.1"
    other_line = store.insert(_result(source_line=3))
    assert other_line.new
    # results of runs have no file: never deduped against each other
    run1 = store.insert(_result(source="run", source_file=None, source_line=None))
    run2 = store.insert(_result(source="run", source_file=None, source_line=None))
    assert run1.new and run2.new and run1.result.id != run2.result.id
    assert store.count() == 4


def test_list_filters_and_order(store):
    store.insert(_result(source_line=1, started_at=30.0))
    store.insert(_result(source_line=2, started_at=10.0, load=BenchLoad(concurrency=16)))
    store.insert(_result(source_line=3, started_at=20.0, server="other"))
    store.insert(_result(source="run", source_file=None, source_line=None, started_at=40.0,
                         config=BenchConfig(target_model="GLM-5", algorithm="NONE")))
    assert [r.source_line for r in store.list()] == [2, 3, 1, None]
    assert [r.source_line for r in store.list(BenchFilter(server="glm5"))] == [2, 1, None]
    assert [r.source_line for r in store.list(BenchFilter(concurrency=16))] == [2]
    assert [r.source_line for r in store.list(BenchFilter(source="import:"))] == [2, 3, 1]
    assert [r.source for r in store.list(BenchFilter(source="run"))] == ["run"]
    assert [r.source_line for r in store.list(BenchFilter(since=20.0))] == [3, 1, None]
    assert [r.source_line for r in store.list(limit=2)] == [1, None]
    baseline = store.list(BenchFilter(source="run"))[0]
    assert baseline.speculative is False and baseline.is_baseline
    assert store.list(BenchFilter(server="other"))[0].speculative is True
    assert BenchConfig().speculative is None  # not known is not a baseline


def test_delete(store):
    r = store.insert(_result()).result
    assert store.delete(r.id) and store.get(r.id) is None and not store.delete(r.id)


def test_value_type_module_imports_only_the_standard_library():
    for path in (REPO / "specdeck_types").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                top = (node.module or "").split(".")[0]
            elif isinstance(node, ast.Import):
                top = node.names[0].name.split(".")[0]
            else:
                continue
            assert top not in {"backend", "state", "streamlit", "app_pages", "ui"}, f"{path}: imports {top}"
