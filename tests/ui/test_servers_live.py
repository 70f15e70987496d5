"""AppTest of the Servers page's live figures: like with like, coloured by the ratio, one run at a time."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from streamlit.proto.Metric_pb2 import Metric as MetricProto
from streamlit.testing.v1 import AppTest

from backend.sglang.runs import RunInfo
from tests.helpers import close_runtime, line_chart_json
from tests.simws import make_models, page_workspace

REPO = Path(__file__).resolve().parents[2]
PAGE = str(REPO / "app_pages" / "servers.py")


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _decode(t: float, accept: float, tput: float, running: int) -> str:
    return (f"[{_stamp(t)} TP0] Decode batch. #running-req: {running}, #token: 4000, token usage: 0.25, "
            f"accept len: {accept:.2f}, cuda graph: True, gen throughput (token/s): {tput:.2f}, #queue-req: 2, \n")


@pytest.fixture
def page(tmp_path, monkeypatch):
    target, draft = make_models(tmp_path / "m", draft="draft")
    rt, log = page_workspace(tmp_path, monkeypatch, "live", target, draft)
    runs: dict[str, RunInfo] = {}
    # what the supervisor would say of a running process (this test starts none)
    monkeypatch.setattr(rt.fleet, "_run", lambda name: runs.get(name))
    yield rt, log, runs
    close_runtime(tmp_path)


def _wait_decode(rt, n: int) -> None:
    deadline = time.time() + 20
    while time.time() < deadline:
        rt.fleet.monitor("sim").refresh(http=False)
        if len(rt.fleet.snapshot("sim").decode["ts"]) >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"the monitor did not read {n} decode lines")


def colour(metric) -> str:
    return MetricProto.MetricColor.Name(metric.proto.color).lower()


def _captions(at: AppTest) -> str:
    return "\n".join(str(c.value) for c in at.caption)


@pytest.mark.timeout(120)
def test_per_request_speed_against_the_baseline_and_a_new_run_starting_empty(page):
    rt, log, runs = page
    t0 = time.time() - 120
    log.write_text(f"===== specdeck: sim run r1 starting at {_stamp(t0)}: python -m backend.sim.server\n"
                   f"[{_stamp(t0 + 1)}] server_args=ServerArgs(speculative_algorithm='EAGLE3')\n"
                   f"[{_stamp(t0 + 10)}] The server is fired up and ready to roll!\n"
                   + _decode(t0 + 20, 1.00, 120.0, 4) + _decode(t0 + 30, 1.00, 136.5, 4))
    runs["sim"] = RunInfo("r1", t0 + 0.2, True)
    _wait_decode(rt, 2)
    at = AppTest.from_file(PAGE, default_timeout=30).run()
    assert not at.exception, at.exception
    m = {x.label: x for x in at.metric}
    # 136.5 tok/s at 4 running requests is 34.1 per request: 0.38 of the single-stream 90.0, but its
    # lines are not a steady window at the baseline's load (and minutes old), so no verdict
    assert m["per-request tok/s"].value == "34.1"
    assert m["per-request tok/s"].delta.startswith("no verdict") and colour(m["per-request tok/s"]) == "gray"
    assert m["aggregate tok/s"].value == "136.5" and not m["aggregate tok/s"].delta  # no baseline comparison
    # accept_len 1.00 is red whatever its delta (no lifetime reading here: no server answers)
    assert m["accept_len"].value == "1.00" and colour(m["accept_len"]) == "red"
    assert m["running · queued"].value == "4 · 2"
    text = _captions(at)
    assert ("per-request decode (4 running requests) 34.1 tok/s (= aggregate 136.5 ÷ 4) vs single-stream "
            "baseline 90.0 tok/s (0.38×)") in text
    assert "aggregate 136.5 tok/s at 4 running requests" in text
    assert "within ±3 % on par" in m["per-request tok/s"].help  # the rule, in the figure's help

    # a relaunch: the supervisor has started run r2; its process is loading weights
    t2 = time.time()
    runs["sim"] = RunInfo("r2", t2, True)
    at.run()
    assert not at.exception, at.exception
    m = {x.label: x for x in at.metric}
    assert m["accept_len"].value == "N/A" and m["per-request tok/s"].value == "N/A"
    assert m["aggregate tok/s"].value == "N/A" and m["running · queued"].value == "N/A · N/A"
    assert "New run since" in _captions(at)
    # the previous run stays in the charts, its line broken and marked at the restart
    fig = line_chart_json(at)[0]
    assert f'"restart {time.strftime("%H:%M:%S", time.localtime(t2))}"' in fig and "null" not in fig

    # the new run's first decode line: its own figures, and a break in the lines between the two runs
    with open(log, "a", encoding="utf-8") as fh:
        fh.write(f"===== specdeck: sim run r2 starting at {_stamp(t2)}: python -m backend.sim.server\n"
                 f"[{_stamp(t2 + 5)}] The server is fired up and ready to roll!\n" + _decode(t2 + 8, 2.52, 180.0, 2))
    _wait_decode(rt, 3)
    at.run()
    assert not at.exception, at.exception
    m = {x.label: x for x in at.metric}
    assert m["accept_len"].value == "2.52" and m["per-request tok/s"].value == "90.0"
    # two requests in flight: no verdict against the single-stream baseline, however close the figure
    assert colour(m["per-request tok/s"]) == "gray" and m["running · queued"].value == "2 · 2"
    fig = line_chart_json(at)[0]
    assert '"y":[1.0,1.0,null,2.52]' in fig.replace(" ", "")

    # stopped (or waiting to restart after a crash): no figures, and the page says why
    runs["sim"] = RunInfo("r2", t2, False)
    at.run()
    assert not at.exception, at.exception
    m = {x.label: x for x in at.metric}
    assert m["accept_len"].value == "N/A" and m["lifetime accept_len"].value == "N/A"
    assert m["per-request tok/s"].value == "N/A" and m["aggregate tok/s"].value == "N/A"
    assert "No run in progress" in _captions(at) and "single-stream baseline 90.0" not in _captions(at)


@pytest.mark.timeout(120)
def test_a_single_request_at_the_baseline_is_green(page):
    rt, log, runs = page
    t0 = time.time() - 60
    now = time.time()
    # a steady window: single-stream decode lines over the last 20 s, the newest a second old
    log.write_text(f"===== specdeck: sim run r1 starting at {_stamp(t0)}: python -m backend.sim.server\n"
                   f"[{_stamp(t0 + 10)}] The server is fired up and ready to roll!\n"
                   + "".join(_decode(now - s, 2.31, 192.0, 1) for s in (19, 14, 9, 5, 1)))
    runs["sim"] = RunInfo("r1", t0 + 0.2, True)
    _wait_decode(rt, 5)
    at = AppTest.from_file(PAGE, default_timeout=30).run()
    assert not at.exception, at.exception
    m = {x.label: x for x in at.metric}
    assert m["per-request tok/s"].value == "192.0", m["per-request tok/s"].delta
    assert colour(m["per-request tok/s"]) == "green", m["per-request tok/s"].delta
    assert m["per-request tok/s"].delta.startswith("faster")
    assert ("single-stream decode (1 running request) 192.0 tok/s vs single-stream baseline 90.0 tok/s (2.13×)"
            in _captions(at))
