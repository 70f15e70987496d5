"""accept_len and tok/s per dataset for a server, side by side (backend.bench.per_dataset and the Benchmarks
page's Per dataset tab); each result's GPU-hours in the Runs table; the page's filters, tab and server in the
URL's query, a bad value ignored with a note."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from backend.bench import per_dataset
from specdeck_types.bench import BenchConfig, BenchFigures, BenchLoad, BenchResult
from state.bench import BenchStore
from state.store import Store
from tests.helpers import REPO, close_runtime
from ui.bench import data

T0 = 1_790_000_000.0
SPEC = dict(target_model="Sim-8B", draft_model="sim-eagle3", algorithm="EAGLE3", num_steps=3, topk=1,
            num_draft_tokens=4, tp=2)
BASE = dict(target_model="Sim-8B", algorithm="NONE", tp=2)


def _r(cfg, dataset, tok, acc, minutes, server="sim8b", conc=1, invalid=None) -> BenchResult:
    return BenchResult(source="run", server=server, config=BenchConfig(**cfg),
                       load=BenchLoad(concurrency=conc, num_prompts=64, input_len=128, output_len=256,
                                      dataset=dataset),
                       results=BenchFigures(output_tok_s=tok, accept_len=acc),
                       started_at=T0 + 60 * minutes, ended_at=T0 + 60 * minutes + 1800, invalid=invalid)


RESULTS = [
    _r(BASE, "sharegpt", 100.0, None, 0),
    _r(SPEC, "sharegpt", 150.0, 2.6, 10),
    _r(SPEC, "sharegpt", 160.0, 2.7, 20),  # newer: this one is shown
    _r(SPEC, "humaneval", 190.0, 3.4, 30),
    _r(SPEC, "gsm8k", 90.0, 1.2, 40, invalid="the server restarted while it was measured"),
    _r(SPEC, None, 120.0, 2.0, 50),  # no dataset: not in the table
    _r(SPEC, "sharegpt", 99.0, 2.2, 60, server="other"),
]


def _table(results, server="sim8b"):
    return per_dataset.table(results, server, server_of=data.server_of, config_of=data.config_label,
                             load_of=data.load_short, when=data.when)


def test_one_row_per_configuration_and_load_and_a_cell_per_dataset():
    assert per_dataset.servers_with_datasets(RESULTS, data.server_of) == ["sim8b", "other"]
    t = _table(RESULTS)
    assert t.datasets == ("humaneval", "sharegpt")  # the invalid gsm8k result is left out
    base, spec = t.rows  # the baseline first
    assert base.baseline and set(base.cells) == {"sharegpt"} and base.cells["sharegpt"].tok_s == 100.0
    assert not spec.baseline
    assert spec.cells["sharegpt"].accept_len == 2.7 and spec.cells["sharegpt"].tok_s == 160.0
    assert spec.cells["sharegpt"].results == 2
    assert spec.cells["humaneval"].accept_len == 3.4 and spec.cells["humaneval"].tok_s == 190.0
    assert [r.configuration for r in _table(RESULTS, "other").rows] == [data.config_label(RESULTS[-1])]
    assert per_dataset.servers_with_datasets([RESULTS[5]], data.server_of) == []


def test_the_frame_puts_datasets_side_by_side_with_na_where_not_measured():
    from ui.bench.datasets import frame

    df = frame(_table(RESULTS))
    assert list(df.columns) == ["configuration", "load", "humaneval · accept_len", "humaneval · tok/s",
                                "sharegpt · accept_len", "sharegpt · tok/s"]
    base = df.iloc[0]
    assert base["humaneval · tok/s"] != base["humaneval · tok/s"]  # NaN: not measured, shown N/A, never 0
    assert base["sharegpt · accept_len"] != base["sharegpt · accept_len"]  # a baseline has no draft
    assert df.iloc[1]["humaneval · accept_len"] == 3.4


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    (tmp_path / "specdeck.toml").write_text('[workspace]\nname = "per-dataset"\n')
    with Store(tmp_path / "state.db") as store:
        for r in RESULTS:
            BenchStore(store).insert(r)
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
    yield tmp_path
    close_runtime(tmp_path)


def _page(query: dict | None = None) -> AppTest:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=60).run()
    for k, v in (query or {}).items():
        at.query_params[k] = v
    at.switch_page("app_pages/benchmarks.py")
    at.run()
    assert not at.exception, at.exception
    return at


def _frames(at: AppTest) -> list:
    return [d.value for d in at.dataframe]


@pytest.mark.timeout(180)
def test_the_per_dataset_tab_and_the_runs_tables_cost(workspace):
    at = _page({"tab": "Per dataset"})
    ds = next(df for df in _frames(at) if "sharegpt · accept_len" in df.columns)
    assert ds.iloc[1]["sharegpt · accept_len"] == 2.7 and ds.iloc[1]["humaneval · tok/s"] == 190.0
    assert at.selectbox(key="bench-ds-server").value == "sim8b"
    assert not [df for df in _frames(at) if "verdict" in df.columns]  # only the open tab is built
    at.session_state["bench-tab"] = "Runs"
    at.run()
    runs = next(df for df in _frames(at) if "verdict" in df.columns)
    # no server of this name in the workspace: its tensor parallelism (2) × 30 min, energy unknown
    by_id = runs.set_index("id")
    assert by_id["GPU-hours"].dropna().round(3).eq(1.0).all() and len(by_id["GPU-hours"].dropna()) == len(RESULTS)
    assert by_id["energy kWh"].isna().all()


@pytest.mark.timeout(180)
def test_filters_tab_and_server_come_from_the_link_and_bad_values_are_noted(workspace):
    at = _page({"dataset": ["humaneval", "no-such-set"], "tab": "Per dataset", "server": "other"})
    assert at.multiselect(key="bench-flt-dataset").value == ["humaneval"]
    assert at.session_state["bench-tab"] == "Per dataset"
    assert at.selectbox(key="bench-ds-server").value == "other"
    notes = " ".join(str(c.value) for c in at.caption)
    assert "no-such-set" in notes and "ignored" in notes
    # the page writes its state back: a reload of this URL shows the same view
    assert at.query_params["dataset"] == ["humaneval"] or at.query_params["dataset"] == "humaneval"
    assert at.query_params["tab"] in ("Per dataset", ["Per dataset"])
    at.session_state["bench-tab"] = "Runs"  # the filters hold on the Runs tab too
    at.run()
    runs = next(df for df in _frames(at) if "verdict" in df.columns)
    assert set(runs["load"]) and len(runs) == 1  # only the humaneval result
    # a bad tab and a bad concurrency: ignored with a note, never an exception
    at = _page({"tab": "Nope", "concurrency": "x"})
    notes = " ".join(str(c.value) for c in at.caption)
    assert "tab=Nope" in notes and "concurrency=x" in notes
    assert at.multiselect(key="bench-flt-concurrency").value == []
