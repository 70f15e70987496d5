"""The Benchmarks page answers "does speculation pay?" first: the Runs table led by configuration, load,
tok/s, accept_len, speedup against the baseline at the same load and a coloured verdict (the other columns
behind a toggle); the key figure "best speedup" with its colour and verdict; one answer on a server's
baseline, shared with the Servers page (a configured single-stream baseline_tok_s where none is stored);
a finished benchmark's key figures where it was started."""

from __future__ import annotations

import math

import pytest

from backend.bench import baseline
from backend.bench.demo_history import install_demo_history
from specdeck_types.bench import BenchConfig, BenchFigures, BenchLoad, BenchResult
from state.bench import BenchStore
from state.store import Store
from tests.helpers import close_runtime, free_port, open_page
from tests.simws import make_models
from ui.bench import charts, data
from ui.bench import run as bench_run

T0 = 1_790_000_000.0
LLAMA = "llama-3.1-70b"


def result(server, target, algorithm, conc, tok, acc=None, draft=None, minutes=0, **kw) -> BenchResult:
    return BenchResult(
        source="run", server=server,
        config=BenchConfig(target_model=target, algorithm=algorithm, draft_model=draft),
        load=BenchLoad(concurrency=conc, input_len=128, output_len=256),
        results=BenchFigures(output_tok_s=tok, accept_len=acc), started_at=T0 + 60 * minutes, **kw)


# -- pure: verdicts, the one baseline answer ------------------------------------------------------

def test_verdict_words_and_levels_follow_the_ratio_and_a_stuck_accept_len():
    spec = result("s", "T", "EAGLE3", 1, 100.0, 2.0)
    assert data.verdict(spec, 1.2, True) == data.Verdict("pays", "good", 1.2)
    assert data.verdict(spec, 0.91, True) == data.Verdict("does not pay", "warn", 0.91)
    assert data.verdict(spec, 0.56, True) == data.Verdict("does not pay", "bad", 0.56)
    assert data.verdict(spec, None, False) == data.Verdict("no baseline at this load", "none")
    # the EAGLE mistake: accept_len 1.0 and no tok/s does not pay, with or without a baseline
    stuck = result("s", "T", "EAGLE", 1, None, 1.0)
    assert data.verdict(stuck, None, True) == data.Verdict("does not pay", "bad")
    assert data.verdict(stuck, None, False).word == "does not pay"
    assert data.verdict(result("s", "T", "NONE", 1, 90.0), None, False) is None  # a baseline has none
    assert data.verdict_text(data.Verdict("pays", "good", 1.2)) == "✓ pays"


def test_server_baseline_uses_the_configured_figure_only_while_none_is_stored():
    stored = [result("glm5", "GLM-5", "NONE", 1, 90.0).with_id(1)]
    none = baseline.server_baseline([], server="llama", model_path="/m/" + LLAMA, served_model_name=None,
                                    configured_tok_s=80.0, running=1)
    assert none.configured_applies and none.configured_tok_s == 80.0 and none.result is None
    other = baseline.server_baseline(stored, server="llama", model_path="/m/" + LLAMA, served_model_name=None,
                                     configured_tok_s=80.0, running=1)
    assert other.configured_applies  # glm5's baseline is another target's
    mine = baseline.server_baseline(stored, server="glm5", model_path="/m/GLM-5", served_model_name=None,
                                    configured_tok_s=80.0, running=1)
    assert not mine.configured_applies and mine.tok_s == 90.0 and mine.exact


def test_speedup_against_the_configured_baseline_only_at_concurrency_1_and_only_without_a_stored_one():
    runs = [result("llama", LLAMA, "EAGLE3", 1, 66.4, 1.9).with_id(1),
            result("llama", LLAMA, "EAGLE3", 4, 200.0, 2.0).with_id(2),
            result("glm5", "GLM-5", "NONE", 1, 90.0).with_id(3),
            result("glm5", "GLM-5", "EAGLE3", 1, 82.3, 2.1).with_id(4)]
    configured = {"llama": ("/m/" + LLAMA, None, 90.0), "glm5": ("/m/GLM-5", None, 50.0)}
    pairs = {p.run.id: p for p in charts.speedups(runs, configured)}
    assert math.isclose(pairs[1].ratio, 66.4 / 90.0) and pairs[1].baseline_text == "configured 90.0 tok/s (single stream)"
    assert pairs[2].ratio is None and "single-stream (concurrency 1)" in pairs[2].why
    assert math.isclose(pairs[4].ratio, 82.3 / 90.0)  # the stored baseline, not glm5's configured 50
    assert pairs[4].baseline_text == "#3: 90.0 tok/s"
    assert {p.run.id for p in charts.speedups(runs) if p.ratio is not None} == {4}  # nothing configured


def test_table_leads_with_the_answer_and_keeps_every_other_column():
    runs = [result("glm5", "GLM-5", "NONE", 1, 90.0, minutes=0).with_id(1),
            result("glm5", "GLM-5", "EAGLE3", 1, 82.3, 2.1, draft="d", minutes=1).with_id(2)]
    df = data.table(runs, charts.verdicts(charts.speedups(runs)))
    assert list(df.columns[:len(data.LEAD)]) == list(data.LEAD)
    assert len(df.columns) == len(data.COLUMNS) and {"TTFT p99 ms", "label", "stored"} <= set(df.columns)
    row = df.set_index("id").loc[2]
    assert row["verdict"] == "✗ does not pay" and math.isclose(row["speedup"], 82.3 / 90.0)
    assert row["configuration"] == "glm5 · EAGLE3 · d" and row["load"] == "c1 · 128/256 tok"
    assert row["accept_len"] == 2.1
    base = df.set_index("id").loc[1]
    assert base["verdict"] == "baseline" and math.isnan(base["speedup"])


def test_a_finished_benchmark_shows_its_figures_and_verdict():
    runs = [result("glm5", "GLM-5", "NONE", 1, 90.0).with_id(1),
            result("glm5", "GLM-5", "EAGLE3", 1, 82.3, 2.1).with_id(2),
            result("llama", LLAMA, "EAGLE3", 8, 300.0, 2.0).with_id(3),
            result("glm5", "GLM-5", "EAGLE3", 1, 100.0, 2.5, invalid="two server runs").with_id(4)]
    rows = {r["result"]: r for r in bench_run.result_rows(runs, [1, 2, 3, 4], {})}
    assert rows["#2"]["tok/s"] == "82.3 tok/s" and rows["#2"]["accept_len"] == "2.10"
    assert rows["#2"]["speedup"] == "0.91×" and rows["#2"]["verdict"] == "✗ does not pay"
    assert rows["#2"]["_level"] == "warn" and rows["#2"]["baseline"] == "#1: 90.0 tok/s"
    assert rows["#1"]["verdict"] == "baseline (no speculation)"
    assert rows["#3"]["verdict"] == "– no baseline at this load" and rows["#3"]["speedup"] == "N/A"
    assert rows["#4"]["verdict"] == "invalid: two server runs" and rows["#4"]["speedup"] == "N/A"


# -- the page ----------------------------------------------------------------------------------------

@pytest.fixture
def workspace(tmp_path, monkeypatch):
    target, draft = make_models(tmp_path / "models")
    (tmp_path / "specdeck.toml").write_text(f"""
[workspace]
name = "bench-verdicts"

[[server]]
name = "llama"
model_path = "{target}"
served_model_name = "{LLAMA}"
port = {free_port()}
simulate = true
baseline_tok_s = 90.0

[server.speculative]
algorithm = "EAGLE3"
draft_model_path = "{draft}"
num_steps = 3
eagle_topk = 1
num_draft_tokens = 4
""")
    assert install_demo_history(tmp_path) == 4
    with Store(tmp_path / "state.db") as store:
        bench = BenchStore(store)
        bench.insert(result("llama", LLAMA, "EAGLE3", 1, 66.4, 1.8, draft="llama-eagle3", minutes=5))
        bench.insert(result("glm5", "GLM-5-NVFP4", "EAGLE3", 1, 500.0, 4.0, minutes=6,
                            invalid="measured across two server runs"))
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
    yield tmp_path
    close_runtime(tmp_path)


def test_runs_table_header_and_verdicts_on_the_page(workspace):
    at = open_page("app_pages/benchmarks.py")
    (table,) = [d for d in at.dataframe if "verdict" in d.value.columns]
    assert list(table.proto.column_order) == list(data.LEAD)  # the rest behind the toggle
    df = table.value.set_index("id")
    by_label = df.set_index("label")
    assert by_label.loc["EAGLE3 + CUDA graphs + 5 draft tokens", "verdict"] == "✗ does not pay"
    assert by_label.loc["the other drafter", "verdict"] == "✗ does not pay"
    assert by_label.loc["EAGLE flag instead of EAGLE3: draft got final-layer states only", "verdict"] == \
        "✗ does not pay"
    llama = df[df["server"] == "llama"].iloc[0]
    # the Servers page's answer: the configured 90 tok/s, not "no baseline"
    assert llama["verdict"] == "✗ does not pay" and math.isclose(llama["speedup"], 66.4 / 90.0)
    styles = table.proto.arrow_data.styler.styles
    assert "#b91c1c" in styles and "#b45309" in styles  # red and amber verdicts coloured
    best = next(m for m in at.metric if m.label == "best speedup at the same load")
    assert best.value == "0.91×"  # the invalid 500 tok/s run stays out
    assert "does not pay" in best.proto.delta and best.proto.color == best.proto.ORANGE

    at.toggle(key="bench-all-columns").set_value(True).run()
    (table,) = [d for d in at.dataframe if "verdict" in d.value.columns]
    assert list(table.proto.column_order) == []
    assert not at.exception, at.exception
