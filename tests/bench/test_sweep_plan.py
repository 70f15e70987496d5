"""The sweep's plan (validation, the grid, SGLang's top-k 1 rule), its break-even check on
hand-made numbers, and the command line's refusals of bad plans and unusable state files."""

from __future__ import annotations

import io
import json

import pytest

from backend.bench.sweep_check import check_sweep
from backend.flows.sweep_plan import PlanError, SweepConfig, SweepPlan, expand
from backend.cli import main
from tests.bench.sweep_kit import SERVER, make_models, write_workspace
from tests.sglang.conftest import server_cfg


@pytest.fixture
def server(tmp_path):
    target, draft = make_models(tmp_path)
    return server_cfg(target, draft, name=SERVER)  # EAGLE3, 3 steps, top-k 1, 4 draft tokens


def test_the_grid_follows_sglangs_top_k_1_rule_and_runs_the_baseline_first(server):
    plan = SweepPlan.build(server=SERVER, steps=[3, 5], topk=[1, 4], draft_tokens=[4, 8], baseline=True)
    configs, notes = expand(plan, server)
    assert [c.key for c in configs] == ["baseline", "s3-k1-d4", "s3-k4-d4", "s3-k4-d8", "s5-k1-d6",
                                        "s5-k4-d4", "s5-k4-d8"]
    assert notes == ["3 steps at top-k 1: 8 draft tokens become 4 (SGLang sets steps + 1 at top-k 1)",
                     "5 steps at top-k 1: 4 draft tokens become 6 (SGLang sets steps + 1 at top-k 1)",
                     "5 steps at top-k 1: 8 draft tokens become 6 (SGLang sets steps + 1 at top-k 1)"]


def test_an_axis_left_out_keeps_the_servers_value(server):
    configs, _ = expand(SweepPlan.build(server=SERVER), server)
    assert [c.key for c in configs] == ["s3-k1-d4"]
    configs, _ = expand(SweepPlan.build(server=SERVER, steps=[2, 6]), server)
    assert [c.key for c in configs] == ["s2-k1-d3", "s6-k1-d7"]
    configs, _ = expand(SweepPlan.build(server=SERVER, baseline_only=True), server)
    assert [c.key for c in configs] == ["baseline"]


def test_a_configuration_applies_to_the_servers_config(server):
    base = SweepConfig(True).apply(server)
    assert base.speculative.algorithm is None and base.speculative.draft_model_path == server.speculative.draft_model_path
    spec = SweepConfig(False, 5, 4, 8).apply(server)
    assert (spec.speculative.algorithm, spec.speculative.num_steps, spec.speculative.eagle_topk,
            spec.speculative.num_draft_tokens) == ("EAGLE3", 5, 4, 8)
    assert spec.port == server.port and spec.model_path == server.model_path


@pytest.mark.parametrize("values, message", [
    ({"steps": [3, 0]}, "steps: values must be between 1 and 64 (got 0)"),
    ({"topk": [65]}, "topk: values must be between 1 and 64 (got 65)"),
    ({"draft_tokens": [4, 4]}, "draft_tokens: a value is listed twice (4, 4)"),
    ({"concurrency": []}, "concurrency: give at least one concurrency"),
    ({"num_prompts": 0}, "num_prompts: Input should be greater than or equal to 1"),
    ({"mode": "fast"}, "mode: Input should be 'auto', 'builtin' or 'sglang'"),
    ({"backend": "vllm"}, "backend: use one of sglang, sglang-oai-chat"),
    ({"baseline_only": True, "steps": [3]}, "baseline_only: runs the baseline alone"),
    ({"warmup": 3}, "warmup: unknown field"),
])
def test_bad_plans_name_the_field(values, message):
    with pytest.raises(PlanError) as exc:
        SweepPlan.build(server=SERVER, **values)
    assert message in str(exc.value)


def test_a_server_without_speculation_can_only_run_the_baseline(tmp_path):
    target, _ = make_models(tmp_path)
    plain = server_cfg(target, None, algorithm=None, name=SERVER)
    with pytest.raises(PlanError, match="speculation is off in its config"):
        expand(SweepPlan.build(server=SERVER, steps=[3]), plain)
    assert [c.key for c in expand(SweepPlan.build(server=SERVER, baseline_only=True), plain)[0]] == ["baseline"]


def test_too_many_configurations_are_refused(server):
    with pytest.raises(PlanError, match="65 configurations; at most 64"):
        expand(SweepPlan.build(server=SERVER, steps=list(range(1, 14)), topk=[2, 3, 4, 5, 6]), server)


# -- the break-even check, on hand-made numbers ------------------------------------------------

def _configs(*keys_steps_drafts):
    out = [{"key": "baseline", "label": "baseline", "baseline": True}]
    for key, s, d in keys_steps_drafts:
        out.append({"key": key, "label": key, "baseline": False, "steps": s, "draft_tokens": d})
    return out


def _res(key, conc, tok, acc=None, steps=None, drafts=None):
    return {"config": key, "concurrency": conc, "output_tok_s": tok, "accept_len": acc, "num_steps": steps,
            "num_draft_tokens": drafts}


def test_the_check_predicts_each_configuration_from_the_others_at_top_k_1():
    # a round costs 1 + 0.3 x steps plain steps; baseline 90 tok/s; tok/s = 90 x accept_len / cost:
    # 1 step: 90 x 1.6 / 1.3 = 110.77; 3 steps: 90 x 2.0 / 1.9 = 94.74; 5 steps: 90 x 2.2 / 2.5 = 79.20
    configs = _configs(("a", 1, 2), ("b", 3, 4), ("c", 5, 6))
    results = [_res("baseline", 1, 90.0), _res("a", 1, 110.77, 1.6, 1, 2), _res("b", 1, 94.74, 2.0, 3, 4),
               _res("c", 1, 79.20, 2.2, 5, 6)]
    rows = {r["key"]: r for r in check_sweep(configs, results)}
    assert rows["a"]["cost_ratio"] == pytest.approx(1.3, abs=1e-3)
    assert rows["c"]["cost_ratio"] == pytest.approx(2.5, abs=1e-3)
    for key, tok in (("a", 110.77), ("b", 94.74), ("c", 79.20)):
        assert rows[key]["predicted_tok_s"] == pytest.approx(tok, rel=1e-3)
        assert abs(rows[key]["error_pct"]) < 0.1
    assert rows["a"]["pays"] is True and rows["c"]["pays"] is False
    assert "fitted on b, c" in rows["a"]["basis"]


def test_the_check_separates_steps_from_draft_tokens_when_top_k_is_above_1():
    # cost = 1 + 0.2 x steps + 0.05 x (draft tokens - 1): (3, 8) 1.95; (5, 4) 2.15; (2, 2) 1.45; baseline 100
    configs = _configs(("x", 3, 8), ("y", 5, 4), ("z", 2, 2))
    results = [_res("baseline", 4, 100.0), _res("x", 4, 100 * 2.4 / 1.95, 2.4, 3, 8),
               _res("y", 4, 100 * 2.5 / 2.15, 2.5, 5, 4), _res("z", 4, 100 * 1.7 / 1.45, 1.7, 2, 2)]
    rows = {r["key"]: r for r in check_sweep(configs, results)}
    assert rows["x"]["predicted_tok_s"] == pytest.approx(100 * 2.4 / 1.95, rel=1e-6)
    assert rows["y"]["predicted_tok_s"] == pytest.approx(100 * 2.5 / 2.15, rel=1e-6)
    assert "round = 1 + 0.200 × steps + 0.050 × (draft tokens − 1) plain steps" in rows["z"]["basis"]


def test_the_check_says_what_it_lacks():
    configs = _configs(("a", 1, 2), ("b", 3, 4))
    results = [_res("a", 1, 110.0, 1.6, 1, 2), _res("b", 1, 94.0, 2.0, 3, 4), _res("baseline", 8, 400.0),
               _res("a", 8, 420.0, 1.6, 1, 2)]
    rows = {(r["key"], r["concurrency"]): r for r in check_sweep(configs, results)}
    assert rows[("a", 1)]["basis"] == "no baseline at this concurrency"
    assert rows[("a", 1)]["predicted_tok_s"] is None and rows[("a", 1)]["cost_ratio"] is None
    assert rows[("a", 8)]["basis"] == "needs another speculative configuration measured at this load"
    # a baseline stored before the sweep, at the same load, stands in
    rows = {(r["key"], r["concurrency"]): r for r in check_sweep(configs, results, {1: 90.0})}
    assert rows[("a", 1)]["baseline_tok_s"] == 90.0 and rows[("a", 1)]["predicted_tok_s"] is not None


# -- the command line refuses ------------------------------------------------------------

@pytest.fixture
def ws(tmp_path):
    target, draft = make_models(tmp_path / "models")
    return write_workspace(tmp_path / "ws", target, draft)


def _cli(ws, *argv):
    out, err = io.StringIO(), io.StringIO()
    rc = main(["--workspace", str(ws), "bench", "sweep", *argv], out=out, err=err)
    return rc, out.getvalue() + err.getvalue()


def test_the_command_line_refuses_bad_plans(ws):
    assert _cli(ws, SERVER, "--steps", "3,0") == (2, "error: --steps: values must be between 1 and 64 (got 0)\n")
    assert _cli(ws, SERVER, "--steps", "3,x") == (2, "error: --steps: 'x' is not a whole number\n")
    rc, text = _cli(ws, SERVER, "--baseline-only", "--draft-tokens", "4")
    assert rc == 2 and "--baseline-only: runs the baseline alone" in text
    rc, text = _cli(ws, "nosuch", "--steps", "3")
    assert rc == 1 and "no server named 'nosuch'" in text


def test_a_state_file_that_is_not_a_sweeps_or_of_another_plan_is_refused_and_kept(ws, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{\"torn\": ")
    rc, text = _cli(ws, SERVER, "--steps", "3", "--state-file", str(bad))
    assert rc == 1 and f"{bad}: not a sweep's state file" in text
    assert bad.read_text() == "{\"torn\": "
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"sweep_id": "x1", "server": SERVER, "configs": [], "original": {},
                                 "plan": {**SweepPlan.build(server=SERVER, steps=[3, 5]).to_dict()}}))
    before = other.read_text()
    rc, text = _cli(ws, SERVER, "--steps", "3", "--state-file", str(other))
    assert rc == 1 and "holds sweep x1 with another plan (steps [3, 5] there, [3] here)" in text
    assert other.read_text() == before


def test_a_load_with_failed_requests_is_stored_with_a_note(tmp_path, monkeypatch, server):
    """run_sweep with the relaunch and the benchmark replaced: the bookkeeping alone."""
    from types import SimpleNamespace

    import backend.flows.sweep as sweep
    from backend.flows.relaunch import LaunchResult, Original
    from specdeck_types.bench import BenchConfig, BenchFigures, BenchLoad, BenchResult
    from state import Store

    original = Original(SERVER, server.model_dump(mode="json"), "", True)
    monkeypatch.setattr(sweep, "remember", lambda session, name: original)
    monkeypatch.setattr(sweep, "relaunch_and_wait",
                        lambda *a, **k: LaunchResult(SERVER, (), (), "r1", 1, 0.5))
    restored = []
    monkeypatch.setattr(sweep, "restore", lambda *a, **k: restored.append(a[2]))
    monkeypatch.setattr(sweep, "target_of", lambda session, name: None)
    monkeypatch.setattr(sweep, "run_benchmark", lambda target, load, **k: BenchResult(
        source="run", config=BenchConfig(algorithm="EAGLE3", num_steps=3, num_draft_tokens=4), server=SERVER,
        load=BenchLoad(concurrency=load.concurrency, num_prompts=load.num_prompts, input_len=8, output_len=8),
        results=BenchFigures(output_tok_s=50.0, accept_len=2.0, completed=2)))
    store = Store(tmp_path / "state.db")
    try:
        plan = SweepPlan.build(server=SERVER, num_prompts=3, input_len=8, output_len=8)
        session = SimpleNamespace(store=store, ws=SimpleNamespace(run_dir=tmp_path / "run"))
        lock = sweep.lock_path(session.ws, SERVER)
        lock.parent.mkdir()
        lock.write_text(json.dumps({"pid": 2 ** 22 + 7, "state_file": "gone"}))  # left by a sweep that is gone
        st = sweep.run_sweep(session, plan, state_path=tmp_path / "s" / "state.json", actor="t", sweep_id="x1")
        assert not lock.exists()  # taken over, and given back at the end
        assert st.state == "done" and restored == [original] and len(st.results) == 1
        assert st.notes == [f"3 steps · top-k 1 · 4 draft tokens at concurrency 1: 1 of 3 requests failed; its "
                            f"figures are of the 2 that completed (details in {tmp_path / 's' / 's3-k1-d4' / 'c1'})"]
        assert st.results[0]["label"] == "sweep x1 · 3 steps · top-k 1 · 4 draft tokens"
    finally:
        store.close()


def test_a_second_sweep_of_the_same_server_is_refused_while_the_first_runs(ws, tmp_path):
    import subprocess
    import sys

    from backend.flows.sweep import lock_path
    from backend.flows.workspace import load_workspace

    # a live process that reads as a sweep
    other = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", "bench", "sweep", SERVER],
                             stdin=subprocess.PIPE)
    try:
        lock = lock_path(load_workspace(str(ws)), SERVER)
        lock.parent.mkdir(parents=True, exist_ok=True)
        lock.write_text(json.dumps({"pid": other.pid, "state_file": "/x/state.json"}))
        rc, text = _cli(ws, SERVER, "--steps", "3", "--state-file", str(tmp_path / "state.json"))
        assert rc == 1 and f"a sweep of {SERVER} is already running (pid {other.pid}, state in /x/state.json)" in text
        assert not (tmp_path / "state.json").exists() and json.loads(lock.read_text())["pid"] == other.pid
    finally:
        other.stdin.close()
        other.wait(10)


def test_a_stopped_sweep_restores_within_the_stops_grace_period(tmp_path, monkeypatch, server):
    import threading
    from types import SimpleNamespace

    import backend.flows.sweep as sweep
    from backend.flows.relaunch import Original, RelaunchFailed
    from state import Store

    original = Original(SERVER, server.model_dump(mode="json"), "", True)
    monkeypatch.setattr(sweep, "remember", lambda session, name: original)
    calls = []
    monkeypatch.setattr(sweep, "restore", lambda *a, **k: calls.append(k["timeout_s"]))
    store = Store(tmp_path / "state.db")
    try:
        session = SimpleNamespace(store=store, ws=SimpleNamespace(run_dir=tmp_path / "run"))
        plan = SweepPlan.build(server=SERVER, ready_timeout_s=1800)
        stop = threading.Event()
        stop.set()  # SIGTERM before the first configuration
        st = sweep.run_sweep(session, plan, state_path=tmp_path / "state.json", actor="t", stop=stop)
        assert st.state == "stopped" and st.restored is True
        assert calls == [240.0]  # the grace period (300 s) less a minute, not the plan's 1800 s
        def fails(*a, **k):
            raise RelaunchFailed("spec did not become ready: EXITED")

        monkeypatch.setattr(sweep, "relaunch_and_wait", fails)
        st = sweep.run_sweep(session, plan, state_path=tmp_path / "state.json", actor="t")  # resumed, not stopped
        assert st.starts == 2 and st.errors == ["3 steps · top-k 1 · 4 draft tokens: spec did not become ready: EXITED"]
        assert calls[-1] == 1800.0
    finally:
        store.close()
