"""A benchmark through a real sglang-router (the cluster environment's) in front of two simulated servers
with EAGLE3: the stored result has the servers' configuration (EAGLE3, not a baseline) and their
request-weighted accept_len over the run, the Benchmarks page's Runs table shows it, and its cost is the
GPUs of the servers behind the router.  Mixed speculation behind one router is recorded as mixed, and
bench_cost gives the right reason for a router and for a server without gpus."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from dataclasses import replace
from types import SimpleNamespace

import pytest

from backend import runtime as runtime_mod
from tests.helpers import close_runtime, free_port, open_page, wait_for
from tests.simws import make_models

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[2]
CLUSTER_PY = os.environ.get("SPECDECK_CLUSTER_PYTHON") or str(ROOT / ".venv-cluster" / "bin" / "python")
FAST = '{ SPECDECK_SIM_SPEED = "200", SPECDECK_SIM_BASELINE_TOK_S = "4000", SPECDECK_SIM_PEAK_TOK_S = "400000" }'
PROMPTS = 8


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    target, draft = make_models(tmp_path / "models")
    root = tmp_path / "ws"
    root.mkdir()
    text = '[workspace]\nname = "router-spec"\n\n[telemetry]\nsource = "fake"\n'
    for name, gpus in (("a", "[0]"), ("b", "[1]")):
        text += (f'\n[[server]]\nname = "{name}"\nmodel_path = "{target}"\nport = {free_port()}\nsimulate = true\n'
                 f'gpus = {gpus}\nenv = {FAST}\n\n[server.speculative]\nalgorithm = "EAGLE3"\n'
                 f'draft_model_path = "{draft}"\n')
    text += (f'\n[[router]]\nname = "fleet"\nport = {free_port()}\nmetrics_port = {free_port()}\n'
             'policy = "round_robin"\nhealth_check_interval_s = 1\nhealth_failure_threshold = 1\n'
             f'python = "{CLUSTER_PY}"\n')
    (root / "specdeck.toml").write_text(text)
    home = tmp_path / "home"
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(root))
    monkeypatch.setenv("HOME", str(home))
    try:
        yield root, home
    finally:
        close_runtime(root)


def _running(rt, name: str) -> bool:
    v = rt.supervisor.view(name)
    return v is not None and v.state.value == "RUNNING"


def test_a_run_through_the_router_records_its_servers_speculation_and_accept_len(workspace):
    from backend.flows.bench_runner import ROUTER_KEY
    from backend.flows.cost import bench_cost
    from state.bench import BenchStore
    from ui.bench import data

    root, home = workspace
    at = open_page("app_pages/benchmarks.py", 90)
    rt = runtime_mod.get_runtime()
    for name in ("a", "b", "fleet"):
        rt.start(name, actor="test", source="test", force=True)
    for name in ("a", "b", "fleet"):
        wait_for(lambda n=name: _running(rt, n), 90, f"{name} RUNNING", every=0.2)
    wait_for(lambda: (v := rt.router_sync.view("fleet")) is not None and v.healthy_workers == 2, 90,
             "both servers healthy behind the router", every=0.2)

    env = {**os.environ, "SPECDECK_WORKSPACE": str(root), "HOME": str(home)}
    proc = subprocess.run([sys.executable, "-m", "backend.cli", "bench", "run", "fleet", "--concurrency", "2",
                           "--num-prompts", str(PROMPTS), "--input-len", "16", "--output-len", "16",
                           "--builtin", "--backend", "sglang-oai-chat", "--json"],
                          cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    (result,) = BenchStore(rt.store).list()
    assert result.server == "fleet" and not result.invalid, result.invalid
    assert result.config.algorithm == "EAGLE3" and result.config.speculative is True
    assert not result.is_baseline and result.config.draft_model
    part = json.loads(result.raw)[ROUTER_KEY]
    assert part["servers"] == ["a", "b"] and part["accept_len_why"] is None
    per = {p["server"]: p for p in part["per_server"]}
    # round robin: both servers took requests, and each gave its accept length over the run
    assert per["a"]["requests"] > 0 and per["b"]["requests"] > 0
    assert sum(p["requests"] for p in per.values()) >= PROMPTS
    want = sum(p["accept_len"] * p["requests"] for p in per.values()) / sum(p["requests"] for p in per.values())
    assert result.results.accept_len == pytest.approx(want) and result.results.accept_len > 1.0
    assert result.results.accept_len_lifetime is None

    # the Runs table shows the figure; the cost is the GPUs of both servers behind the router
    df = data.with_accept_text(data.table([result]), [result], ["fleet"])
    assert df.loc[0, "accept_len"] == f"{result.results.accept_len:.2f}"
    at.run()
    assert not at.exception, at.exception
    (table,) = [d for d in at.dataframe if "verdict" in d.value.columns]
    assert list(table.value["accept_len"]) == [f"{result.results.accept_len:.2f}"]
    assert table.value.loc[0, "verdict"] != "baseline"  # measured with speculation, compared with a baseline
    c = bench_cost(result, rt.fleet)
    assert c.gpus == (0, 1) and "behind router fleet (a, b)" in c.gpus_from
    assert c.gpu_hours == pytest.approx(2 * (result.ended_at - result.started_at) / 3600.0)


def _info(algorithm: str | None, draft: str | None = "D") -> SimpleNamespace:
    raw = {"model_path": "M", "tp_size": 1}
    if algorithm:
        raw.update(speculative_algorithm=algorithm, speculative_draft_model_path=draft, speculative_num_steps=3)
    from backend.sglang.client import ServerInfo
    return ServerInfo.from_json(raw)


def test_mixed_speculation_behind_a_router_is_recorded_as_mixed_with_each_server():
    from backend.flows.bench_runner import MIXED, ROUTER_KEY, Mark, Target, router_accept_why, with_router
    from specdeck_types.bench import BenchConfig, BenchFigures, BenchLoad, BenchResult
    from ui.bench import data

    members = (Target("http://127.0.0.1:1", name="a"), Target("http://127.0.0.1:2", name="b"))
    target = Target("http://127.0.0.1:3", name="fleet", members=members)
    before = [Mark(0.0, _info("EAGLE3"), 100.0, 50.0, None, 10.0), Mark(0.0, _info(None), 100.0, None, None, 10.0)]
    after = [Mark(1.0, _info("EAGLE3"), 400.0, 150.0, None, 14.0), Mark(1.0, _info(None), 300.0, None, None, 14.0)]
    base = BenchResult(id=7, source="run", server="fleet", config=BenchConfig(algorithm="NONE"),
                       load=BenchLoad(concurrency=1, num_prompts=8), results=BenchFigures(output_tok_s=10.0),
                       raw=json.dumps({"tool": "specdeck-builtin"}))
    r = with_router(base, target, before, after)
    assert r.config.algorithm == MIXED and r.config.draft_model is None and r.config.target_model == "M"
    assert not r.is_baseline
    assert r.results.accept_len is None
    why = router_accept_why(r)
    assert "a: EAGLE3" in why and "b: no speculation" in why and "a 3.00" in why
    assert json.loads(r.raw)[ROUTER_KEY]["servers"] == ["a", "b"]
    assert "through router fleet to a, b (a: EAGLE3" in r.label
    df = data.with_accept_text(data.table([r]), [r], ["fleet"])
    assert df.loc[0, "accept_len"] == f"N/A (through router fleet: {why})"

    # alike: request-weighted (a: 3.00 over 4 requests, b: 2.00 over 6)
    before[1] = Mark(0.0, _info("EAGLE3"), 100.0, 50.0, None, 10.0)
    after[1] = Mark(1.0, _info("EAGLE3"), 300.0, 150.0, None, 16.0)
    r = with_router(base, target, before, after)
    assert r.config.algorithm == "EAGLE3" and r.config.num_steps == 3
    assert r.label.endswith("through router fleet to a, b, configured alike; accept length of the servers behind "
                            "it, weighted by their requests")
    assert r.results.accept_len == pytest.approx((3.0 * 4 + 2.0 * 6) / 10)
    # a server without a request counter: N/A with the reason, never one server's figure
    after[1] = Mark(1.0, _info("EAGLE3"), 300.0, 150.0, None, None)
    r = with_router(base, target, before, after)
    assert r.results.accept_len is None and "sglang:num_requests_total" in router_accept_why(r)
    # a counter that went back: a restart of a server behind the router marks the result invalid
    after[1] = Mark(1.0, _info("EAGLE3"), 50.0, 10.0, None, 1.0)
    assert "b's generated tokens counter went back" in with_router(base, target, before, after).invalid
    # a result stored before the reason was kept still says it was through the router
    old = BenchResult(id=8, source="run", server="fleet", results=BenchFigures(output_tok_s=1.0))
    assert data.accept_text(old, ["fleet"]).startswith("N/A (through router fleet: ")
    assert data.accept_text(old, []) is None
    # an imported file's result named after the router was not measured here: the plain N/A
    assert data.accept_text(replace(old, source="import:csv"), ["fleet"]) is None


class _Fleet:
    def __init__(self, servers: dict, routers: dict):
        self.servers, self.routers = servers, routers

    def names(self):
        return list(self.servers)

    def config(self, name):
        return SimpleNamespace(gpus=self.servers[name])

    def router_names(self):
        return list(self.routers)

    def router_members(self, name):
        return self.routers[name]


def test_bench_cost_reasons_for_a_router_and_a_server_without_gpus():
    from backend.flows.cost import bench_cost
    from specdeck_types.bench import BenchConfig, BenchResult

    def res(server, tp=None):
        return BenchResult(source="run", server=server, config=BenchConfig(tp=tp), started_at=0.0, ended_at=1800.0)

    fleet = _Fleet({"a": [0], "b": [2, 3], "c": []}, {"fleet": ["a", "b"], "half": ["a", "c"], "empty": []})
    c = bench_cost(res("fleet"), fleet)
    assert c.gpus == (0, 2, 3) and c.gpu_hours == pytest.approx(1.5) and "router fleet (a, b)" in c.gpus_from
    c = bench_cost(res("half"), fleet)
    assert c.gpu_hours is None and "through router half: server c's config sets no gpus" in c.gpu_hours_why
    assert "not in this workspace" not in c.gpu_hours_why
    c = bench_cost(res("empty"), fleet)
    assert c.gpu_hours is None and "router empty has no server behind it" in c.gpu_hours_why
    c = bench_cost(res("c"), fleet)
    assert "server c's config sets no gpus" in c.gpu_hours_why and "no server recorded" not in c.gpu_hours_why
    assert bench_cost(res("c", tp=2), fleet).gpu_hours == pytest.approx(1.0)
    assert "server gone is not in this workspace" in bench_cost(res("gone"), fleet).gpu_hours_why
    assert "no server recorded" in bench_cost(res(None), fleet).gpu_hours_why
