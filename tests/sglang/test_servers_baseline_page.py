"""AppTest of the Servers page's "vs baseline": the baseline measured at the concurrency the server runs now.

The workspace stores baselines (benchmarks without speculation) of the server's target at concurrency 1
and 16; the server's log is written here line by line, as SGLang prints it, so the concurrency it runs
is known exactly."""

from __future__ import annotations

import calendar
import time
from pathlib import Path

import pytest
from streamlit.proto.Metric_pb2 import Metric as MetricProto
from streamlit.testing.v1 import AppTest

from backend.sglang.runs import RunInfo
from specdeck_types.bench import BenchConfig, BenchFigures, BenchLoad, BenchResult
from state.bench import BenchStore
from tests.helpers import close_runtime, line_chart_json
from tests.simws import make_models, page_workspace

REPO = Path(__file__).resolve().parents[2]
PAGE = str(REPO / "app_pages" / "servers.py")
NOV29 = calendar.timegm((2026, 11, 29, 12, 0, 0))  # noon UTC: 2026-11-29 in any zone within ±11 h


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _decode(t: float, tput: float, running: int) -> str:
    return (f"[{_stamp(t)} TP0] Decode batch. #running-req: {running}, #token: 4000, token usage: 0.25, "
            f"accept len: 2.10, cuda graph: True, gen throughput (token/s): {tput:.2f}, #queue-req: 0, \n")


def _baseline(tok_s: float, concurrency: int, target: str = "Llama-3.1-8B-Instruct") -> BenchResult:
    return BenchResult(source="import:csv", server="bench-box", started_at=NOV29, label="no speculation",
                       config=BenchConfig(target_model=target, algorithm="NONE"),
                       load=BenchLoad(concurrency=concurrency), results=BenchFigures(output_tok_s=tok_s))


@pytest.fixture
def page(tmp_path, monkeypatch):
    target, draft = make_models(tmp_path / "models", target="Llama-3.1-8B-Instruct", draft="draft")
    rt, log = page_workspace(tmp_path, monkeypatch, "baseline", target, draft)
    t0 = time.time() - 300
    log.write_text(f"===== specdeck: sim run r1 starting at {_stamp(t0)}: python -m backend.sim.server\n"
                   f"[{_stamp(t0 + 10)}] The server is fired up and ready to roll!\n")
    # what the supervisor would say of a running process (this test starts none)
    monkeypatch.setattr(rt.fleet, "_run", lambda name: RunInfo("r1", t0 + 0.2, True))
    state = {"t": t0 + 20, "lines": 0}

    def decode(tput: float, running: int) -> AppTest | None:
        """Append a decode line and wait until the monitor has read it."""
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(_decode(state["t"], tput, running))
        state["t"] += 5
        state["lines"] += 1
        deadline = time.time() + 20
        while time.time() < deadline:
            rt.fleet.monitor("sim").refresh(http=False)
            if len(rt.fleet.snapshot("sim").decode["ts"]) >= state["lines"]:
                return
            time.sleep(0.05)
        raise AssertionError("the monitor did not read the decode line")

    yield rt, decode
    close_runtime(tmp_path)


def _colour(metric) -> str:
    return MetricProto.MetricColor.Name(metric.proto.color).lower()


def _run(at: AppTest) -> tuple[dict, str]:
    at.run()
    assert not at.exception, at.exception
    text = "\n".join([str(c.value) for c in at.caption] + [m.value for m in at.markdown])
    return {m.label: m for m in at.metric}, text


@pytest.mark.timeout(120)
def test_the_baseline_measured_at_the_concurrency_the_server_runs(page, monkeypatch):
    rt, decode = page
    bench = BenchStore(rt.store)
    for r in (_baseline(90.0, 1), _baseline(620.0, 16), _baseline(300.0, 4, target="GLM-5-NVFP4")):
        bench.insert(r)

    # one request: 82.3 against the 90.0 measured at concurrency 1 (0.91); these lines are minutes old, so the
    # headline gives no verdict (one needs a steady window of recent lines at the baseline's load)
    decode(82.3, 1)
    at = AppTest.from_file(PAGE, default_timeout=30)
    m, text = _run(at)
    agg = m["aggregate tok/s"]
    assert agg.value == "82.3" and agg.delta == "no verdict: idle" and _colour(agg) == "gray"
    assert not m["per-request tok/s"].delta  # the measured baseline meets the aggregate, not this
    assert ("aggregate 82.3 tok/s at 1 running request vs baseline 90.0 tok/s measured at concurrency 1, "
            "2026-11-29 (0.91×)") in text
    assert "Fallback" not in text and "single-stream baseline 90.0" not in text
    fig = line_chart_json(at)[2]  # the aggregate chart carries the baseline it met
    assert "baseline at concurrency 1: 90.0" in fig

    # sixteen requests: 744.0 against the 620.0 measured at 16 (1.20)
    decode(744.0, 16)
    m, text = _run(at)
    agg = m["aggregate tok/s"]
    assert agg.delta == "no verdict: idle" and _colour(agg) == "gray"
    assert ("aggregate 744.0 tok/s at 16 running requests vs baseline 620.0 tok/s measured at concurrency 16, "
            "2026-11-29 (1.20×)") in text
    assert "baseline at concurrency 16: 620.0" in line_chart_json(at)[2]

    # twelve requests: none measured there; the nearest (16) is named, the ratio left uncoloured,
    # and the page offers to measure at 12 (the GLM baseline at 4 is another target's)
    decode(700.0, 12)
    m, text = _run(at)
    agg = m["aggregate tok/s"]
    assert agg.delta == "no verdict: idle" and _colour(agg) == "gray"
    assert "(nearest measured: 16, the server runs 12): 1.13×, but not at the same load" in text
    assert "**No baseline measured at concurrency 12** (measured at 1, 16)" in text
    assert "`python -m backend.cli bench sweep sim --baseline-only --concurrency 12`" in text

    # the offer, taken: the form starts a baseline-only sweep at the concurrency the server runs
    started = []
    monkeypatch.setattr(rt, "start_job", lambda spec, meta, **kw: started.append((spec, meta, kw)))
    at.button(key="srv-measure").click().run()
    assert not at.exception, at.exception
    assert at.text_input(key="srv-measure-conc").value == "12"
    decode(310.0, 4)  # the server moves on; the open form keeps the concurrency it opened with
    at.number_input(key="srv-measure-n").set_value(40).run()
    assert at.text_input(key="srv-measure-conc").value == "12"
    preview = [c.value for c in at.code if "bench sweep" in c.value]
    assert preview == ["python -m backend.cli bench sweep sim --baseline-only --concurrency 12 --num-prompts 40 "
                       "--input-len 1024 --output-len 512 --mode auto --backend sglang --ready-timeout 1800"]
    at.button(key="srv-measure-go").click().run()
    assert not at.exception, at.exception
    (spec, meta, kw), = started
    argv = list(spec.argv)
    assert argv[argv.index("sweep"):argv.index("sweep") + 6] == ["sweep", "sim", "--baseline-only",
                                                                   "--concurrency", "12", "--num-prompts"]
    assert "--state-file" in argv and meta["kind"] == "baseline-sweep" and meta["server"] == "sim"
    assert meta["state"] == argv[argv.index("--state-file") + 1] and kw["source"] == "dashboard"
    assert not any(b.key == "srv-measure-go" for b in at.button)  # the form closed


@pytest.mark.timeout(120)
def test_no_baseline_stored_says_so_offers_to_measure_and_falls_back_to_the_configured_one(page):
    rt, decode = page
    BenchStore(rt.store).insert(_baseline(300.0, 4, target="GLM-5-NVFP4"))  # another target only
    decode(136.5, 4)
    at = AppTest.from_file(PAGE, default_timeout=30)
    m, text = _run(at)
    assert ("**No measured baseline of this target is stored** (a benchmark without speculation on "
            "`Llama-3.1-8B-Instruct`)") in text
    assert "Measure it at concurrency 4 with **Measure baseline…** under Control, or run " \
           "`python -m backend.cli bench sweep sim --baseline-only --concurrency 4`" in text
    # the fallback, labelled: per request against the configured single-stream 90.0
    assert "Fallback, configured: " in text
    assert "per-request decode (4 running requests) 34.1 tok/s (= aggregate 136.5 ÷ 4) vs single-stream " \
           "baseline 90.0 tok/s (0.38×)" in text
    assert m["per-request tok/s"].delta == "no verdict: idle" and _colour(m["per-request tok/s"]) == "gray"
    assert not m["aggregate tok/s"].delta

    # a baseline measured afterwards is picked up at the next refresh, without a reload
    BenchStore(rt.store).insert(_baseline(350.0, 4))
    m, text = _run(at)
    assert m["aggregate tok/s"].delta == "no verdict: idle" and _colour(m["aggregate tok/s"]) == "gray"
    assert "baseline 350.0 tok/s measured at concurrency 4" in text and "(0.39×)" in text
    assert "Fallback" not in text and "No measured baseline" not in text


@pytest.mark.timeout(120)
def test_the_last_measurement_says_how_it_ended(page):
    """A baseline measurement's state file (as the sweep job writes it) is read on the page."""
    import json

    from backend.flows.sweep import state_path, sweep_process_spec
    from backend.supervisor.adhoc import save_job

    rt, decode = page
    spec = sweep_process_spec(rt.workspace, "sim", "20261129-120000", ["--baseline-only", "--concurrency", "12"])
    path = state_path(rt.workspace, "sim", "20261129-120000")
    save_job(rt.workspace.run_dir, spec, {"kind": "baseline-sweep", "server": "sim", "state": str(path),
                                          "concurrency": [12]})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({
        "sweep_id": "20261129-120000", "server": "sim", "plan": {"concurrency": [12], "baseline_only": True},
        "configs": [{"status": "done", "results": {"12": 7}}], "original": {}, "state": "done", "phase": "done",
        "results": [{"id": 7}], "restored": True}))
    decode(700.0, 12)
    at = AppTest.from_file(PAGE, default_timeout=30)
    _m, text = _run(at)
    assert ("Last baseline measurement (sweep-sim-20261129-120000, concurrency 12): done, 1 result(s) stored, "
            "server restored.") in text

    # one that could not give the server back is a warning, with its error
    state = json.loads(path.read_text())
    state.update(state="failed", restored=False, errors=["relaunch failed: port 1 in use"], results=[])
    path.write_text(json.dumps(state))
    at.run()
    assert not at.exception, at.exception
    warned = [w.value for w in at.warning if "Last baseline measurement" in w.value]
    assert warned and ("failed, 0 result(s) stored, the server could NOT be restored: check it. Error: relaunch "
                       "failed: port 1 in use") in warned[0]
