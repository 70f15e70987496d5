"""The sweep panel (AppTest): it shows a sweep's progress from its state file, and its form
queues a real sweep as a supervised job that runs, restores the server, and is shown finished."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from backend import runtime as runtime_mod
from backend.flows.sweep import preview, read_state
from backend.flows.sweep_plan import SweepPlan
from state import audit
from tests.bench.sweep_kit import SERVER, make_models, wait_until, write_workspace

PAGE = """
from ui.context import runtime
from ui.bench.sweep import sweep_panel

sweep_panel(runtime())
"""


@pytest.fixture
def ws(tmp_path, monkeypatch):
    target, draft = make_models(tmp_path / "models")
    root = write_workspace(tmp_path / "ws", target, draft)
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(root))
    yield root
    for rt in set(runtime_mod._runtimes.values()):
        rt.supervisor.poll()
        for v in rt.supervisor.views():
            if v.live:
                rt.supervisor.stop(v.name, actor="test", source="test", wait=True)
    runtime_mod.close_all()


def _cfg(key, label, status, steps=None, drafts=None, baseline=False, results=None, error=None):
    return {"key": key, "label": label, "baseline": baseline, "steps": steps, "topk": None if baseline else 1,
            "draft_tokens": drafts, "status": status, "error": error, "results": results or {}, "run": None}


def _state(root: Path, **over) -> Path:
    """A sweep two configurations into four: the baseline (90.0 tok/s) and one step (110.8 tok/s at
    accept_len 1.60) measured, three steps being measured (3 of 6 requests)."""
    path = root / "outputs" / "bench" / "sweep-spec-20250101-000000" / "state.json"
    path.parent.mkdir(parents=True)
    now = time.time()
    d = {"sweep_id": "20250101-000000", "server": SERVER,
         "plan": SweepPlan.build(server=SERVER, steps=[1, 3, 5], topk=[1], baseline=True).to_dict(),
         "configs": [_cfg("baseline", "baseline (speculation off)", "done", baseline=True, results={"1": 1}),
                     _cfg("s1-k1-d2", "1 step · top-k 1 · 2 draft tokens", "done", 1, 2, results={"1": 2}),
                     _cfg("s3-k1-d4", "3 steps · top-k 1 · 4 draft tokens", "running", 3, 4),
                     _cfg("s5-k1-d6", "5 steps · top-k 1 · 6 draft tokens", "pending", 5, 6)],
         "original": {}, "state": "running", "phase": "benchmarking", "detail": "concurrency 1", "current": 2,
         "done": 3, "total": 6,
         "results": [{"config": "baseline", "concurrency": 1, "id": 1, "output_tok_s": 90.0, "accept_len": None},
                     {"config": "s1-k1-d2", "concurrency": 1, "id": 2, "output_tok_s": 110.77, "accept_len": 1.6}],
         "check": [{"key": "s1-k1-d2", "label": "1 step · top-k 1 · 2 draft tokens", "concurrency": 1,
                    "baseline_tok_s": 90.0, "measured_tok_s": 110.77, "accept_len": 1.6, "cost_ratio": 1.3,
                    "pays": True, "predicted_tok_s": None, "error_pct": None,
                    "basis": "needs another speculative configuration measured at this load"}],
         "errors": [], "notes": [], "started_at": now - 125, "updated_at": now, "pid": 1, "starts": 1}
    d.update(over)
    path.write_text(json.dumps(d))
    return path


def _texts(at) -> str:
    parts = [m.value for m in at.markdown] + [c.value for c in at.caption] + [e.value for e in at.error] \
        + [e.value for e in at.success] + [e.value for e in at.warning]
    return "\n".join(str(p) for p in parts)


def test_the_panel_shows_a_sweep_in_progress_from_its_state_file(ws):
    _state(ws)
    at = AppTest.from_string(PAGE, default_timeout=30).run()
    assert not at.exception, at.exception
    (bar,) = at.get("progress")
    assert bar.proto.text == ("Configuration 3 of 4: 3 steps · top-k 1 · 4 draft tokens · benchmarking "
                              "(concurrency 1), 3 of 6 requests")
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Configurations measured"] == "2 of 4" and metrics["Results stored"] == "2"
    assert metrics["Best speculative"] == "110.8 tok/s"
    assert [m.delta for m in at.metric if m.label == "Best speculative"] == ["+23% vs baseline"]
    table, check = at.dataframe[0].value, at.dataframe[1].value
    assert list(table["status"]) == ["done", "done", "running", "pending"]
    assert list(table["tok/s @1"]) == ["90.0", "110.8", "N/A", "N/A"]
    assert list(check["break-even accept_len"]) == ["1.30"] and list(check["vs baseline"]) == ["faster"]
    assert "state written" in _texts(at)


def test_a_finished_sweep_says_so_and_shows_the_model_against_the_measurements(ws):
    s = _state(ws, state="done", phase="done", current=None, restored=True)
    d = json.loads(s.read_text())
    d["check"][0].update(predicted_tok_s=104.2, error_pct=-5.9, basis="round = 1 + 0.150 x ...")
    s.write_text(json.dumps(d))
    at = AppTest.from_string(PAGE, default_timeout=30).run()
    assert not at.exception, at.exception
    assert not at.get("progress")
    assert [x.value for x in at.success] == ["Sweep 20250101-000000 finished: 2 of 4 configurations measured; "
                                             "spec restored."]
    check = at.dataframe[1].value
    assert list(check["predicted tok/s"]) == ["104.2"] and list(check["error"]) == ["-5.9%"]


def test_a_bad_value_in_the_form_is_named_and_nothing_is_queued(ws):
    at = AppTest.from_string(PAGE, default_timeout=30).run()
    at.text_input(key="sweep-f-steps").input("3,0")
    at.button[0].click().run()
    assert [e.value for e in at.error] == ["Not queued: steps: values must be between 1 and 64 (got 0)"]
    assert not at.code  # no command to start


@pytest.mark.timeout(240)
def test_the_form_queues_a_sweep_that_runs_as_a_supervised_job_and_is_shown_finished(ws):
    original = (ws / "specdeck.toml").read_text()
    at = AppTest.from_string(PAGE, default_timeout=30).run()
    assert not at.exception, at.exception
    assert "No sweep yet." in _texts(at)
    at.text_input(key="sweep-f-steps").input("1")
    at.text_input(key="sweep-f-conc").input("1")
    at.number_input(key="sweep-f-prompts").set_value(3)
    at.number_input(key="sweep-f-in").set_value(16)
    at.number_input(key="sweep-f-out").set_value(24)
    at.selectbox(key="sweep-f-mode").set_value("builtin")
    at.button[0].click().run()  # Review
    assert not at.exception, at.exception
    plan = SweepPlan.build(server=SERVER, steps=[1], baseline=True, num_prompts=3, input_len=16, output_len=24,
                           mode="builtin")
    assert [c.value for c in at.code] == [preview(plan)]
    assert list(at.dataframe[0].value["configuration"]) == ["baseline (speculation off)",
                                                            "1 step · top-k 1 · 2 draft tokens"]
    at.button(key="sweep-start-go").click().run()
    assert not at.exception, at.exception
    rt = runtime_mod.get_runtime()
    (job,) = [j for j in rt.jobs() if j.meta.get("kind") == "sweep"]
    assert job.spec.kind.value == "benchmark" and job.meta["server"] == SERVER
    assert list(job.spec.argv[job.spec.argv.index("sweep"):][:2]) == ["sweep", SERVER]
    entry = audit.recent(rt.store, target=job.name)[-1]
    assert (entry.action, entry.source, entry.outcome) == ("start", "dashboard", "ok")
    path = Path(job.meta["state_file"])
    final = wait_until(lambda: (s := read_state(path)) is not None and s.finished and s, 180, "the sweep to finish")
    assert final.state == "done" and final.restored is True, (final.errors, rt.supervisor.tail_last(job.name)[0])
    assert [r["config"] for r in final.results] == ["baseline", "s1-k1-d2"]
    assert (ws / "specdeck.toml").read_text() == original
    at.run()
    assert not at.exception, at.exception
    assert any(x.value.startswith(f"Sweep {final.sweep_id} finished: 2 of 2 configurations measured; "
                                  f"{SERVER} restored.") for x in at.success)


@pytest.mark.timeout(120)
def test_stop_asks_first_then_stops_the_job(ws):
    import sys

    from specdeck_types.process import Kind, ProcessSpec

    path = _state(ws)
    rt = runtime_mod.get_runtime()
    name = "sweep-spec-20250101-000000"
    spec = ProcessSpec(name=name, kind=Kind.BENCHMARK, log_path=str(ws / "logs" / f"{name}.log"),
                       cwd=str(Path(__file__).resolve().parents[2]), stop_grace_s=5,
                       argv=(sys.executable, "-m", "backend.demo", "ticker", "--interval", "0.2"))
    rt.start_job(spec, {"kind": "sweep", "server": SERVER, "state_file": str(path)}, actor="alice",
                 source="dashboard")
    wait_until(lambda: (rt.supervisor.poll() or True) and rt.supervisor.view(name).live, 30, "the job running")
    at = AppTest.from_string(PAGE, default_timeout=30).run()
    assert not at.exception, at.exception
    at.button(key="sweep-stop").click().run()
    assert rt.supervisor.view(name).live  # not before the confirmation
    assert any("restores the server's original configuration" in w.value for w in at.warning)
    at.button(key="sweep-confirm-stop-yes").click().run()
    assert not at.exception, at.exception
    v = wait_until(lambda: (rt.supervisor.poll() or True) and (v := rt.supervisor.view(name)).state.value == "EXITED"
                   and v, 30, "the job stopped")
    assert v.state.value == "EXITED"
    entry = [e for e in audit.recent(rt.store, target=name) if e.action == "stop"][-1]
    assert (entry.source, entry.outcome) == ("dashboard", "ok")


@pytest.mark.timeout(120)
def test_a_stopped_sweep_can_be_resumed_from_the_panel(ws):
    import sys

    from specdeck_types.process import Kind, ProcessSpec

    path = _state(ws, state="stopped", phase="stopped", current=None, restored=True)
    rt = runtime_mod.get_runtime()
    name = "sweep-spec-20250101-000000"
    spec = ProcessSpec(name=name, kind=Kind.BENCHMARK, log_path=str(ws / "logs" / f"{name}.log"),
                       cwd=str(Path(__file__).resolve().parents[2]), stop_grace_s=5,
                       argv=(sys.executable, "-m", "backend.demo", "ticker", "--interval", "0.2"))
    rt.start_job(spec, {"kind": "sweep", "server": SERVER, "state_file": str(path)}, actor="alice",
                 source="dashboard")
    rt.supervisor.stop(name, actor="alice", source="dashboard", wait=True)
    first = rt.supervisor.view(name).run_id
    at = AppTest.from_string(PAGE, default_timeout=30).run()
    assert not at.exception, at.exception
    assert [x.value for x in at.warning] == ["Sweep 20250101-000000 stopped: 2 of 4 configurations measured; "
                                             "spec restored."]
    assert all(b.key != "sweep-stop" for b in at.button)  # nothing to stop
    at.button(key="sweep-resume").click().run()
    assert not at.exception, at.exception
    v = rt.supervisor.view(name)
    assert v.live and v.run_id != first  # the same job, started again
    entry = [e for e in audit.recent(rt.store, target=name) if e.action == "start"][-1]
    assert (entry.source, entry.outcome) == ("dashboard", "ok")


REDRAW_PAGE = """
import streamlit as st
from ui.bench import run as bench_run
from ui.bench.sweep import sweep_panel
from ui.context import runtime

st.session_state["runs"] = st.session_state.get("runs", 0) + 1
st.session_state[bench_run.SEEN] = {seen!r}  # what the Runs table showed in this run
sweep_panel(runtime())
"""


@pytest.mark.parametrize("seen, runs", [([1], 2), ([1, 2], 1)])
def test_a_result_the_sweep_stored_since_the_table_was_drawn_redraws_the_page_once(ws, seen, runs):
    # The state file lists results #1 and #2. A table that showed only #1 is out of date: the page runs
    # once more (and not again for the same result); a table that showed both is left alone.
    _state(ws)
    at = AppTest.from_string(REDRAW_PAGE.format(seen=seen), default_timeout=30).run()
    assert not at.exception, at.exception
    assert at.session_state["runs"] == runs
    at.run()
    assert at.session_state["runs"] == runs + 1  # a later run of the page does not redraw for #2 again
