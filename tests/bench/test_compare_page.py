"""AppTest of the Benchmarks page on a workspace whose store has the demo history plus runs of one more
server at two concurrencies with their baselines (and one at a third concurrency without one); and a
benchmark started from the page's form against a simulated server, stored and shown."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from backend import runtime as runtime_mod
from backend.bench.demo_history import install_demo_history
from specdeck_types.bench import BenchConfig, BenchFigures, BenchLoad, BenchResult, Percentiles
from state.bench import BenchStore
from state.store import Store
from tests.helpers import close_runtime, free_port, open_page, wait_for
from tests.simws import make_models

T0 = 1_790_000_000.0  # 2026-09-21, the runs' start times

# sim8b: baselines at concurrency 1 (100 tok/s) and 4 (300 tok/s), EAGLE3 at 1, 4 and 8 (no baseline at 8)
SPEC = dict(target_model="Sim-8B", draft_model="sim-eagle3", algorithm="EAGLE3", num_steps=3, topk=1,
            num_draft_tokens=4, cuda_graph=True, tp=1)
BASE = dict(target_model="Sim-8B", algorithm="NONE", cuda_graph=True, tp=1)
EXTRA = [  # (config, concurrency, tok/s, accept_len, dataset, minutes after T0)
    (BASE, 1, 100.0, None, "random", 0),
    (SPEC, 1, 120.0, 2.0, "random", 10),
    (BASE, 4, 300.0, None, "random", 20),
    (SPEC, 4, 270.0, 2.2, "sharegpt", 30),
    (SPEC, 8, 400.0, 2.3, "random", 40),
]


def _extra(cfg: dict, conc: int, tok: float, acc: float | None, dataset: str, minutes: int) -> BenchResult:
    return BenchResult(
        source="run", server="sim8b", config=BenchConfig(**cfg),
        load=BenchLoad(concurrency=conc, num_prompts=64, input_len=128, output_len=256, dataset=dataset),
        results=BenchFigures(output_tok_s=tok, request_s=tok / 256, accept_len=acc, completed=64,
                             ttft_ms=Percentiles(median=40.0 + conc, p99=90.0 + conc),
                             tpot_ms=Percentiles(median=8.0, p99=12.0), itl_ms=Percentiles(median=7.0, p99=30.0)),
        started_at=T0 + 60 * minutes, ended_at=T0 + 60 * minutes + 30)


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    target, draft = make_models(tmp_path / "models")
    (tmp_path / "specdeck.toml").write_text(f"""
[workspace]
name = "bench-compare"

[[server]]
name = "spec"
model_path = "{target}"
port = {free_port()}
simulate = true
decode_log_interval = 5
env = {{ SPECDECK_SIM_SPEED = "200", SPECDECK_SIM_ACCEPT_LEN = "2.1" }}

[server.speculative]
algorithm = "EAGLE3"
draft_model_path = "{draft}"
num_steps = 3
eagle_topk = 1
num_draft_tokens = 4
""")
    assert install_demo_history(tmp_path) == 4
    with Store(tmp_path / "state.db") as store:
        for row in EXTRA:
            BenchStore(store).insert(_extra(*row))
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
    yield tmp_path
    close_runtime(tmp_path)


def _page(timeout: float = 60, tab: str | None = None) -> AppTest:
    return open_page("app_pages/benchmarks.py", timeout, tab=tab)


def _rows(at: AppTest):
    """The Runs table; from another tab, by opening the Runs tab (only the open tab is built) and then the
    tab that was open again."""
    was = at.session_state["bench-tab"] if "bench-tab" in at.session_state else "Runs"
    if was != "Runs":
        at.session_state["bench-tab"] = "Runs"
        at.run()
    (df,) = [d.value for d in at.dataframe if "verdict" in d.value.columns]  # the Runs table
    if was != "Runs":
        at.session_state["bench-tab"] = was
        at.run()
        assert not at.exception, at.exception
    return df


def _table_text(at: AppTest, label: str):
    (t,) = [t for t in at.table if label in list(t.value.columns)]
    return t.value


def test_table_lists_every_result_and_filters_change_the_rows(workspace):
    at = _page()
    df = _rows(at)
    assert len(df) == 9  # 4 of the demo history, 5 of sim8b
    assert next(m for m in at.metric if m.label == "results").value == "9"
    demo = df[df["server"] == "glm5"].set_index("label")
    # N/A stays missing, never 0: the baseline's accept_len, the flag mistake's tok/s, the lengths
    assert math.isnan(demo.loc["baseline without speculation", "accept_len (run)"])
    assert math.isnan(demo.loc["EAGLE flag instead of EAGLE3: draft got final-layer states only", "output tok/s"])
    assert demo["input len"].isna().all()
    assert demo.loc["EAGLE3 + CUDA graphs + 5 draft tokens", "output tok/s"] == 82.3
    assert demo.loc["EAGLE3 + CUDA graphs + 5 draft tokens", "draft tokens"] == 5

    assert at.multiselect(key="bench-flt-concurrency").options == ["1", "4", "8"]
    at.multiselect(key="bench-flt-concurrency").set_value(["4"]).run()
    df = _rows(at)
    assert sorted(df["output tok/s"]) == [270.0, 300.0]
    at.multiselect(key="bench-flt-concurrency").set_value([]).run()
    at.multiselect(key="bench-flt-target").set_value(["Sim-8B"]).run()
    assert len(_rows(at)) == 5 and set(_rows(at)["server"]) == {"sim8b"}
    at.multiselect(key="bench-flt-dataset").set_value(["sharegpt"]).run()
    assert list(_rows(at)["output tok/s"]) == [270.0]
    at.multiselect(key="bench-flt-dataset").set_value([]).run()
    at.multiselect(key="bench-flt-target").set_value([]).run()
    # a draft filter keeps the baselines, whose draft is none
    at.multiselect(key="bench-flt-draft").set_value(["AQ-MedAI EAGLE-3"]).run()
    df = _rows(at)
    assert sorted(df["output tok/s"].dropna()) == [50.5, 90.0, 100.0, 300.0]
    assert not at.exception, at.exception


def test_speedup_is_against_the_baseline_at_the_same_concurrency_only(workspace):
    at = _page()
    at.session_state["bench-tab"] = "Charts"  # the speedup table is in the Charts tab, built while it is open
    at.multiselect(key="bench-flt-target").set_value(["Sim-8B"]).run()
    rows = _table_text(at, "speedup").set_index("load")
    # 120 / 100 at concurrency 1; 270 / 300 at concurrency 4 (not 270 / 100, the baseline at another load)
    assert rows.loc["concurrency 1, 128/256 tok", "speedup"] == "1.20×"
    assert rows.loc["concurrency 4, 128/256 tok", "speedup"] == "0.90×"
    assert rows.loc["concurrency 4, 128/256 tok", "baseline"].endswith("300.0 tok/s")
    assert rows.loc["concurrency 8, 128/256 tok", "speedup"].startswith(
        "N/A: no baseline of this server at concurrency 8")
    assert any("No baseline for **sim8b** at concurrency 8" in i.value for i in at.info)
    assert next(m for m in at.metric if m.label == "best speedup at the same load").value == "1.20×"


def test_break_even_on_the_seeds_history_says_why_speculation_did_not_pay(workspace):
    at = _page(tab="Break-even")
    at.selectbox(key="bench-be-server").set_value("glm5").run()
    text = "\n".join(m.value for m in at.markdown)
    # 2.1 / 82.3 s = 25.5 ms a round, 1 / 90 s = 11.1 ms a plain step: 2.3 plain steps
    assert "2.10 / 82.3 s = **25.5 ms**" in text
    assert "1 / 90.0 s = **11.1 ms**" in text
    assert "**2.3 plain steps**" in text and "could not pay for it" in text
    assert "Break-even was **accept_len 2.30**" in text
    assert "83,288 samples" in text and "fewer draft tokens or steps" in text
    assert next(m for m in at.metric if m.label == "speculative round").value == "25.5 ms"
    assert next(m for m in at.metric if m.label == "plain decode step").value == "11.1 ms"
    # the model and its assumptions are stated
    assert "a plain decode step takes ``c / baseline tok/s``" in text
    assert "whatever number of draft tokens is accepted" in text
    # what accept_len 3 would give at this round's cost: 3 / 25.52 ms = 82.3 × 3 / 2.1 = 117.6 tok/s
    at.number_input(key="bench-be-asked").set_value(3.0).run()
    got = next(m for m in at.metric if m.label.startswith("predicted at accept_len 3.00"))
    assert got.value == "117.6 tok/s"
    # runs the model cannot explain say why: the flag mistake has no tok/s, the other drafter no accept_len
    reasons = list(_table_text(at, "why")["why"])
    assert "tok/s of this run was not recorded" in reasons and "accept_len of this run was not recorded" in reasons


def test_break_even_of_a_run_that_pays_and_of_one_at_concurrency_4_that_does_not(workspace):
    at = _page(tab="Break-even")
    at.selectbox(key="bench-be-server").set_value("sim8b").run()
    load = at.selectbox(key="bench-be-load")
    # only loads with a baseline are offered: concurrency 8 has none
    assert [x for x in load.options] == ["concurrency 1, 128/256 tok", "concurrency 4, 128/256 tok"]
    load.set_value((1, 128, 256)).run()
    # the run picked is this server's (ids 1-4 are the demo history, 5-9 sim8b's in EXTRA's order)
    assert at.selectbox(key="bench-be-run").value == 6
    assert at.selectbox(key="bench-be-run").options == ["#6 EAGLE3 · sim-eagle3 · 3 steps · topk 1 · 4 draft tokens · "
                                                        "CUDA graph"]
    text = "\n".join(m.value for m in at.markdown)
    # 2.0 / 120 s = 16.7 ms against 1 / 100 s = 10.0 ms: 1.7 steps, break-even 1.67, accept_len 2.0 pays
    assert "2.00 / 120.0 s = **16.7 ms**" in text and "1 / 100.0 s = **10.0 ms**" in text
    assert "pays for the round" in text and "**accept_len 1.67**" in text
    at.selectbox(key="bench-be-load").set_value((4, 128, 256)).run()
    text = "\n".join(m.value for m in at.markdown)
    # each step serves 4 sequences: 4 × 2.2 / 270 s = 32.6 ms a round, 4 / 300 s = 13.3 ms a step; 2.44 steps
    assert "4 × 2.20 / 270.0 s = **32.6 ms**" in text and "4 / 300.0 s = **13.3 ms**" in text
    assert "**2.4 plain steps**" in text and "Break-even was **accept_len 2.44**" in text
    # not the seeds' run: the data note is the general one
    assert "a regeneration has the target answer the training prompts again" in text and "83,288" not in text


# --------------------------------------------------------------------------------------
# Running a benchmark from the page against the simulator
# --------------------------------------------------------------------------------------
def _start_server(rt) -> None:
    rt.start("spec", actor="test", source="test")
    wait_for(lambda: (v := rt.supervisor.view("spec")) is not None and v.state.value == "RUNNING", 90,
             "the simulated server to be ready", every=0.2)


def _fill_form(at: AppTest, *, conc: str, prompts: int, out_len: int) -> None:
    at.selectbox(key="bench-f-server").set_value("spec")
    at.text_input(key="bench-f-conc").input(conc)
    at.number_input(key="bench-f-prompts").set_value(prompts)
    at.number_input(key="bench-f-in").set_value(16)
    at.number_input(key="bench-f-out").set_value(out_len)
    at.radio(key="bench-f-mode").set_value("builtin")
    at.run()
    assert not at.exception, at.exception


def test_only_the_open_tab_is_built_and_a_forms_fields_are_kept_while_it_is_not(workspace):
    at = _page(tab="Run a benchmark")
    assert not [d for d in at.dataframe if "verdict" in d.value.columns]  # the Runs table is not built
    assert not at.get("plotly_chart")  # nor the charts of the other tabs
    _fill_form(at, conc="1, 4", prompts=7, out_len=64)
    for tab in ("Runs", "Break-even", "Sweep", "Run a benchmark"):
        at.session_state["bench-tab"] = tab
        at.run()
        assert not at.exception, (tab, at.exception)
        assert ("bench-f-conc" in [t.key for t in at.text_input]) == (tab == "Run a benchmark")
    assert at.text_input(key="bench-f-conc").value == "1, 4"
    assert at.number_input(key="bench-f-prompts").value == 7 and at.number_input(key="bench-f-out").value == 64
    assert at.radio(key="bench-f-mode").value == "builtin" and at.selectbox(key="bench-f-server").value == "spec"
    assert any(c.value.startswith("python -m backend.cli bench run spec --concurrency 1 4 --num-prompts 7")
               for c in at.code)


def _bench_job(rt):
    jobs = [j for j in rt.jobs() if j.meta.get("kind") == "bench"]
    assert len(jobs) == 1, jobs
    return jobs[0]


@pytest.mark.timeout(240)
def test_a_benchmark_started_from_the_form_is_stored_and_shown(workspace):
    from backend.flows.bench_job import read_progress
    from state import audit

    at = _page(tab="Run a benchmark")
    rt = runtime_mod.get_runtime()
    _start_server(rt)
    _fill_form(at, conc="1, 2", prompts=4, out_len=32)
    shown = [c.value for c in at.code]
    assert any(v.startswith("python -m backend.cli bench run spec --concurrency 1 2 --num-prompts 4 --input-len 16 "
                            "--output-len 32") and v.endswith("--builtin") for v in shown), shown
    at.button(key="bench-start").click().run()
    assert not at.exception, at.exception
    job = _bench_job(rt)
    progress = Path(job.meta["progress"])
    wait_for(lambda: (p := read_progress(progress)) is not None and p.state == "done", 150,
             f"the benchmark to finish (its log: {workspace / 'logs' / (job.name + '.log')})", every=0.2)
    view = wait_for(lambda: (v := rt.supervisor.view(job.name)) is not None and v.state.value == "EXITED" and v,
                    30, "the supervisor to see the job exit", every=0.2)
    assert view.exit_code == 0
    at.run()
    assert not at.exception, at.exception
    df = _rows(at)
    assert len(df) == 11  # 9 before, one per concurrency
    new = df[df["server"] == "spec"].sort_values("concurrency")
    assert list(new["concurrency"]) == [1, 2] and set(new["source"]) == {"run here"}
    assert set(new["input len"]) == {16} and set(new["output len"]) == {32}
    assert set(new["algorithm"]) == {"EAGLE3"} and set(new["draft tokens"]) == {4}
    assert (new["output tok/s"] > 0).all() and new["accept_len (run)"].between(1.5, 2.8).all()
    # the progress display of the job: done, both results stored
    assert next(m for m in at.metric if m.label == "state").value == "DONE"
    assert next(m for m in at.metric if m.label == "results stored").value == "2"
    assert any(f"{job.name}" in m.value and "FINISHED (exit 0)" in m.value for m in at.markdown)
    # where it was started: each stored result's figures and verdict (no baseline of spec's target is stored)
    ids = sorted(int(i) for i in new["id"])
    figures = [m.value for m in at.markdown if m.value.startswith("#") and " · concurrency " in m.value]
    for i, (_, row) in zip(ids, new.sort_values("id").iterrows()):
        line = next(v for v in figures if v.startswith(f"#{i} · concurrency {row['concurrency']}, 16/32 tok"))
        assert f"**{row['output tok/s']:,.1f} tok/s**" in line and f"accept_len **{row['accept_len (run)']:.2f}**" in line
        assert "speedup **N/A**" in line and "no baseline at this load" in line
    starts = [e for e in audit.recent(rt.store, target=job.name) if e.action == "start"]
    assert starts and starts[0].source == "dashboard" and starts[0].outcome == "ok"


@pytest.mark.timeout(240)
def test_stop_from_the_page_ends_the_benchmark_and_keeps_what_was_stored(workspace):
    from backend.flows.bench_job import read_progress

    at = _page(tab="Run a benchmark")
    rt = runtime_mod.get_runtime()
    _start_server(rt)
    _fill_form(at, conc="2", prompts=50, out_len=2000)
    at.button(key="bench-start").click().run()
    job = _bench_job(rt)
    progress = Path(job.meta["progress"])
    wait_for(lambda: (p := read_progress(progress)) is not None and p.phase == "running", 90,
             "requests in flight", every=0.1)
    at.run()
    assert not at.button(key="bench-stop").disabled
    at.button(key="bench-stop").click().run()
    at.button(key="bench-confirm-stop-yes").click().run()
    assert not at.exception, at.exception
    wait_for(lambda: (v := rt.supervisor.view(job.name)) is not None and v.state.value == "EXITED", 60,
             "the stopped job to exit", every=0.2)
    p = read_progress(progress)
    assert p.state == "stopped" and p.results == [] and p.error is None
    at.run()
    assert next(m for m in at.metric if m.label == "state").value == "STOPPED"
    assert any("STOPPED" in m.value and job.name in m.value for m in at.markdown)
    assert len(_rows(at)) == 9  # nothing half-measured was stored


@pytest.mark.timeout(120)
def test_a_benchmark_of_a_server_that_is_not_running_fails_and_the_page_says_why(workspace):
    from backend.flows.bench_job import read_progress

    at = _page(tab="Run a benchmark")
    rt = runtime_mod.get_runtime()
    _fill_form(at, conc="1", prompts=2, out_len=8)
    assert any("**spec** is NOT STARTED" in w.value for w in at.warning)
    at.button(key="bench-start").click().run()
    job = _bench_job(rt)
    wait_for(lambda: (p := read_progress(Path(job.meta["progress"]))) is not None and p.state == "failed", 60,
             "the job to fail", every=0.1)
    wait_for(lambda: (v := rt.supervisor.view(job.name)) is not None and v.state.value == "EXITED", 30,
             "the job to exit", every=0.1)
    at.run()
    assert next(m for m in at.metric if m.label == "state").value == "FAILED"
    (err,) = [e.value for e in at.error if "The benchmark failed" in e.value]
    assert "is not ready" in err and "start the server" in err and f"{job.name}.log" in err
    assert len(_rows(at)) == 9


# --------------------------------------------------------------------------------------
# The page's pure parts
# --------------------------------------------------------------------------------------
def test_concurrency_field_reads_a_list_and_names_what_is_wrong():
    from ui.bench.run import FormError, parse_concurrency

    assert parse_concurrency("1 4, 16;4") == [1, 4, 16]
    for text, why in (("", "give at least one value"), ("1 x", "`x` is not a whole number"),
                      ("2 0", "`0` must be at least 1"), ("1.5", "`1.5` is not a whole number")):
        with pytest.raises(FormError, match=why):
            parse_concurrency(text)


def test_series_side_by_side_never_share_a_colour():
    from ui import charts
    from ui.bench.charts import colours

    names = [f"server{i} · EAGLE3" for i in range(len(charts.PALETTE))]
    got = colours(names)
    assert len(set(got.values())) == len(charts.PALETTE)  # ten names, ten colours (the hash alone repeats some)
    assert len({charts.colour_for(n) for n in names}) < len(charts.PALETTE)
    assert colours(names[:1]) == {names[0]: charts.colour_for(names[0])}  # alone: its usual colour


def test_long_legend_names_wrap_at_their_joins():
    from ui.bench.charts import wrap

    name = "demo-llama70b-eagle3 · EAGLE3 · Llama-3.1-70B-Instruct-EAGLE3 · 3 steps · topk 1 · 4 draft tokens"
    assert wrap(name, 40) == ("demo-llama70b-eagle3 · EAGLE3<br>Llama-3.1-70B-Instruct-EAGLE3 · 3 steps<br>"
                              "topk 1 · 4 draft tokens")
    assert wrap("short", 40) == "short"


def test_a_lone_baseline_is_grey_and_several_each_get_their_own_colour():
    from ui.bench.charts import BASELINE_COLOUR, page_palette

    one = [_extra(*row) for row in EXTRA]
    assert page_palette(one)["sim8b · no speculation"] == BASELINE_COLOUR
    two = one + [BenchResult(source="run", server="other", config=BenchConfig(algorithm="NONE"),
                             results=BenchFigures(output_tok_s=50.0))]
    pal = page_palette(two)
    assert BASELINE_COLOUR not in pal.values()
    assert len(set(pal.values())) == len(pal) == 3  # two baselines and the speculative configuration


def test_a_result_stored_from_a_terminal_shows_on_the_open_tab(workspace, monkeypatch):
    """No benchmark job of the dashboard runs: the page still reads the table's fingerprint every 10 s, on every
    tab, and a result stored by another process (a terminal's ``bench run`` or ``bench import``) draws it again."""
    import streamlit

    import ui.auth
    from ui.bench import stored as bench_stored

    watchers = []
    real = ui.auth.live_fragment

    def spy(fn=None, *, run_every=None):
        def wrap(f):
            watchers.append((f.__name__, run_every, f))
            return real(f, run_every=run_every)
        return wrap(fn) if fn is not None else wrap

    monkeypatch.setattr(ui.auth, "live_fragment", spy)
    at = _page(tab="Charts")
    (watch,) = [(every, f) for name, every, f in watchers if name == "_new_results"]
    assert watch[0] == bench_stored.WATCH_IDLE_S
    assert len(_rows(at)) == 9
    reruns = []
    with monkeypatch.context() as m:
        m.setattr(streamlit, "rerun", lambda **kw: reruns.append(kw))
        watch[1]()
        assert reruns == []  # nothing new: the page is not drawn again
        with Store(workspace / "state.db") as store:  # another process stores a result
            BenchStore(store).insert(_extra(SPEC, 2, 180.0, 2.1, "random", 50))
        watch[1]()
        assert reruns == [{"scope": "app"}]
    at.run()  # what the rerun does
    assert len(_rows(at)) == 10


def test_the_watch_cadence_per_tab_and_job():
    from ui.bench.stored import WATCH_IDLE_S, WATCH_JOB_S, watch_every

    live = ("Run a benchmark", "Sweep")
    assert watch_every("Runs", False, live) == WATCH_IDLE_S and watch_every("Sweep", False, live) == WATCH_IDLE_S
    assert watch_every("Runs", True, live) == WATCH_JOB_S < WATCH_IDLE_S
    assert watch_every("Run a benchmark", True, live) is None and watch_every("Sweep", True, live) is None
