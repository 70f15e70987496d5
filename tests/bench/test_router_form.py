"""AppTest of the Benchmarks page on a workspace with a [[router]] (a real sglang-router, the cluster
environment's) in front of two simulated servers: the Run form offers the router beside the servers and
says a run through it has no accept_len; a run started from the form goes to the router's URL (its own
request counter grows by every request) and is stored under the router's name with accept_len N/A, which
the page says rather than leaving blank.  The sweep form offers servers only and says why."""

from __future__ import annotations

import json
import os
import re
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest

from backend import runtime as runtime_mod
from tests.helpers import close_runtime, free_port, open_page, wait_for
from tests.simws import make_models

pytestmark = pytest.mark.timeout(300)

CLUSTER_PY = os.environ.get("SPECDECK_CLUSTER_PYTHON") or str(
    Path(__file__).resolve().parents[2] / ".venv-cluster" / "bin" / "python")
FAST = '{ SPECDECK_SIM_SPEED = "200", SPECDECK_SIM_BASELINE_TOK_S = "4000", SPECDECK_SIM_PEAK_TOK_S = "400000" }'
PROMPTS = 8


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    target, _ = make_models(tmp_path / "models")
    root = tmp_path / "ws"
    root.mkdir()
    rport, mport = free_port(), free_port()
    text = '[workspace]\nname = "router-bench"\n\n[telemetry]\nsource = "fake"\n'
    for name in ("a", "b"):
        text += (f'\n[[server]]\nname = "{name}"\nmodel_path = "{target}"\nport = {free_port()}\nsimulate = true\n'
                 f'env = {FAST}\n')
    text += (f'\n[[router]]\nname = "fleet"\nport = {rport}\nmetrics_port = {mport}\npolicy = "round_robin"\n'
             f'health_check_interval_s = 1\nhealth_failure_threshold = 1\npython = "{CLUSTER_PY}"\n')
    (root / "specdeck.toml").write_text(text)
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(root))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    try:
        yield root, rport, mport
    finally:
        close_runtime(root)


def _chat_requests(mport: int) -> float:
    """The router's own count of chat completions it was sent (its Prometheus exporter)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=5) as r:
        text = r.read().decode()
    n = 0.0
    for line in text.splitlines():
        if line.startswith("smg_http_requests_total{") and 'path="/v1/chat/completions"' in line:
            n += float(line.rsplit(" ", 1)[1])
    return n


def _running(rt, name: str) -> bool:
    v = rt.supervisor.view(name)
    return v is not None and v.state.value == "RUNNING"


def test_the_form_offers_the_router_and_a_run_goes_through_its_url(workspace):
    from backend.flows.bench_job import read_progress
    from state.bench import BenchStore
    from ui.bench.run import ROUTER_ACCEPT

    root, rport, mport = workspace
    at = open_page("app_pages/benchmarks.py", 90, tab="Run a benchmark")
    rt = runtime_mod.get_runtime()

    # the Run form lists the router beside the servers, labelled with the servers behind it
    box = at.selectbox(key="bench-f-server")
    assert box.options == ["a", "b", "fleet (router: a, b)"] and box.label == "Server or router"
    assert "[[router]]" in box.help and "servers behind it" in box.help
    box.set_value("fleet")
    at.run()
    assert not at.exception, at.exception
    assert any("Router **fleet** is NOT STARTED" in w.value for w in at.warning), [w.value for w in at.warning]
    assert any("accept_len through a router" in i.value and "weighted by the requests" in i.value for i in at.info)
    assert any(f"http://127.0.0.1:{rport}" in c.value and "round_robin" in c.value for c in at.caption)
    # the sweep relaunches one server: the router is not offered, and its help says why
    at.session_state["bench-tab"] = "Sweep"
    at.run()
    sweep = at.selectbox(key="sweep-f-server")
    assert sweep.options == ["a", "b"]
    assert "A [[router]] is not offered" in sweep.help and "fleet" in sweep.help
    at.session_state["bench-tab"] = "Run a benchmark"
    at.run()

    for name in ("a", "b", "fleet"):
        rt.start(name, actor="test", source="test", force=True)
    for name in ("a", "b", "fleet"):
        wait_for(lambda n=name: _running(rt, n), 90, f"{name} RUNNING", every=0.2)
    wait_for(lambda: (v := rt.router_sync.view("fleet")) is not None and v.healthy_workers == 2, 90,
             "both servers healthy behind the router", every=0.2)
    at.run()
    assert not any("Router **fleet**" in w.value for w in at.warning), [w.value for w in at.warning]

    at.text_input(key="bench-f-conc").input("2")
    at.number_input(key="bench-f-prompts").set_value(PROMPTS)
    at.number_input(key="bench-f-in").set_value(16)
    at.number_input(key="bench-f-out").set_value(16)
    at.radio(key="bench-f-mode").set_value("builtin")
    at.radio(key="bench-f-backend").set_value("sglang-oai-chat")
    at.run()
    assert not at.exception, at.exception
    assert any(c.value.startswith("python -m backend.cli bench run fleet --concurrency 2") for c in at.code)
    before = _chat_requests(mport)
    at.button(key="bench-start").click().run()
    assert not at.exception, at.exception

    (job,) = [j for j in rt.jobs() if j.meta.get("kind") == "bench"]
    assert job.meta["server"] == "fleet" and list(job.spec.argv).count("fleet") == 1
    progress = Path(job.meta["progress"])
    log = root / "logs" / f"{job.name}.log"
    wait_for(lambda: (p := read_progress(progress)) is not None and p.state == "done", 180,
             f"the benchmark through the router to finish (its log: {log})", every=0.2)
    view = wait_for(lambda: (v := rt.supervisor.view(job.name)) is not None and v.state.value == "EXITED" and v,
                    60, "the supervisor to see the job exit", every=0.2)
    assert view.exit_code == 0
    # the requests went to the router's URL: the router counted every one of them (and the warm-up)
    assert _chat_requests(mport) - before >= PROMPTS
    assert read_progress(progress).server == "fleet"

    (result,) = BenchStore(rt.store).list()
    assert result.server == "fleet" and not result.invalid
    assert result.results.completed == PROMPTS and result.results.output_tok_s > 0
    assert result.accept_len is None
    # the configuration is the servers' behind the router (theirs run without speculation), and the
    # missing accept_len says why
    from backend.flows.bench_runner import router_accept_why
    assert result.config.algorithm == "NONE" and router_accept_why(result) == "its servers run without speculation"
    at.run()
    assert not at.exception, at.exception
    line = next(m.value for m in at.markdown if m.value.startswith(f"#{result.id} · concurrency 2"))
    assert "accept_len **N/A (through router fleet: its servers run without speculation)**" in line
    # the configuration was read from the servers behind the router, so the result is a baseline
    assert "baseline (no speculation)" in line and "speculation not known" not in line
    assert any(c.value == f"accept_len N/A: {ROUTER_ACCEPT}." for c in at.caption)
    # the Runs table says why rather than leaving the cell blank
    at.session_state["bench-tab"] = "Runs"
    at.run()
    (table,) = [d for d in at.dataframe if "verdict" in d.value.columns]
    assert list(table.value["accept_len"]) == ["N/A (through router fleet: its servers run without speculation)"]


def test_stored_rows_say_why_a_router_result_has_no_accept_len():
    from specdeck_types.bench import BenchConfig, BenchFigures, BenchLoad, BenchResult
    from ui.bench.run import result_rows

    def res(i: int, server: str, acc: float | None) -> BenchResult:
        return BenchResult(id=i, source="run", server=server, config=BenchConfig(target_model="M", algorithm="EAGLE3"),
                           load=BenchLoad(concurrency=1, num_prompts=4, input_len=8, output_len=8),
                           results=BenchFigures(output_tok_s=50.0, accept_len=acc, completed=4))

    rows = result_rows([res(1, "fleet", None), res(2, "a", None), res(3, "a", 2.5)], [1, 2, 3], {}, ["fleet"])
    assert [r["accept_len"] for r in rows] == [
        "N/A (through router fleet: recorded before the servers behind a router were read (a router has no decode "
        "lines))", "N/A", "2.50"]
    assert [r["_router"] for r in rows] == [True, False, False]
    base = replace(res(4, "fleet", None), config=BenchConfig(algorithm="NONE"))
    (row,) = result_rows([base], [4], {}, ["fleet"])
    assert row["verdict"].startswith("speculation not known")
    (row,) = result_rows([replace(base, server="a")], [4], {}, ["fleet"])
    assert row["verdict"] == "baseline (no speculation)"
    assert re.fullmatch(r"\d+\.\d tok/s", rows[0]["tok/s"].replace(",", ""))
    assert json.dumps(rows)  # plain values the page can render
