"""AppTest of the Servers page's first screen: the controls above the live view, the speculative settings
in the status line, the view following a relaunch, and the headline verdict only over a steady window at
the baseline's load."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from streamlit.proto.Metric_pb2 import Metric as MetricProto
from streamlit.testing.v1 import AppTest

from backend import runtime as runtime_mod
from backend.sglang.runs import RunInfo
from tests.helpers import close_runtime, free_port
from tests.simws import make_models, page_workspace

REPO = Path(__file__).resolve().parents[2]
PAGE = str(REPO / "app_pages" / "servers.py")


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _decode(t: float, tput: float, running: int) -> str:
    return (f"[{_stamp(t)} TP0] Decode batch. #running-req: {running}, #token: 4000, token usage: 0.25, "
            f"accept len: 2.10, cuda graph: True, gen throughput (token/s): {tput:.2f}, #queue-req: 0, \n")


def _colour(metric) -> str:
    return MetricProto.MetricColor.Name(metric.proto.color).lower()


def _captions(at: AppTest) -> str:
    return "\n".join(str(c.value) for c in at.caption)


def _status(at: AppTest) -> str:
    lines = [m.value for m in at.markdown if "speculation:" in m.value]
    assert len(lines) == 1, lines
    return lines[0]


@pytest.fixture
def logged(tmp_path, monkeypatch):
    """A server whose log this test writes; the supervisor's run is said to have begun five minutes ago."""
    target, draft = make_models(tmp_path / "models", target="Llama-3.1-8B-Instruct", draft="draft")
    rt, log = page_workspace(tmp_path, monkeypatch, "first-screen", target, draft)
    t0 = time.time() - 300
    log.write_text(f"===== specdeck: sim run r1 starting at {_stamp(t0)}: python -m backend.sim.server\n"
                   f"[{_stamp(t0 + 10)}] The server is fired up and ready to roll!\n")
    monkeypatch.setattr(rt.fleet, "_run", lambda name: RunInfo("r1", t0 + 0.2, True))

    def write(lines: list[str]) -> None:
        want = len(rt.fleet.snapshot("sim").decode["ts"]) + len(lines)
        with open(log, "a", encoding="utf-8") as fh:
            fh.writelines(lines)
        deadline = time.time() + 20
        while time.time() < deadline:
            rt.fleet.monitor("sim").refresh(http=False)
            if len(rt.fleet.snapshot("sim").decode["ts"]) >= want:
                return
            time.sleep(0.05)
        raise AssertionError("the monitor did not read the decode lines")

    yield rt, write
    close_runtime(tmp_path)


@pytest.mark.timeout(120)
def test_89_7_against_90_over_a_steady_single_stream_window_is_on_par_and_another_load_gives_no_verdict(logged):
    rt, write = logged
    now = time.time()
    write([_decode(now - ago, 89.7, 1) for ago in range(30, -1, -1)])  # 30 s at one request in flight
    at = AppTest.from_file(PAGE, default_timeout=30).run()
    assert not at.exception, at.exception
    per = {m.label: m for m in at.metric}["per-request tok/s"]
    assert per.value == "89.7"
    assert per.delta == "on par · 20 s at 1 req" and _colour(per) == "gray"  # not "↓ 1.00×" amber
    text = _captions(at)
    assert ("**Verdict** on par over the last 20 s at 1 request in flight (the baseline's load): 89.7 vs 90.0 "
            "tok/s, 1.00×, within ±3 %") in text

    # traffic changes: four requests in flight now; the same load as the baseline's no longer holds
    write([_decode(time.time(), 136.5, 4)])
    at.run()
    assert not at.exception, at.exception
    per = {m.label: m for m in at.metric}["per-request tok/s"]
    assert per.value == "34.1"  # 136.5 / 4: the old badge said 0.38× red here
    assert per.delta == "no verdict: load differs" and _colour(per) == "gray"
    assert ("no verdict: load differs from the baseline's (baseline: 1 request in flight; the last 20 s: "
            "1-4 requests in flight)") in _captions(at)


@pytest.mark.timeout(120)
def test_a_steady_slower_window_says_slower_in_red(logged):
    rt, write = logged
    now = time.time()
    write([_decode(now - ago, 66.4, 1) for ago in range(30, -1, -1)])
    at = AppTest.from_file(PAGE, default_timeout=30).run()
    assert not at.exception, at.exception
    per = {m.label: m for m in at.metric}["per-request tok/s"]
    assert per.delta == "slower 0.74× · 20 s at 1 req" and _colour(per) == "red"


def _sim_workspace(root: Path) -> None:
    target, draft = make_models(root / "m", draft="draft")
    (root / "specdeck.toml").write_text(f"""[workspace]
name = "first-screen"

[telemetry]
source = "fake"

[[server]]
name = "sim"
model_path = "{target}"
port = {free_port()}
simulate = true
sglang_version = "0.5.10"
decode_log_interval = 5
baseline_tok_s = 90.0
env = {{ SPECDECK_SIM_SPEED = "100" }}

[server.speculative]
algorithm = "EAGLE3"
draft_model_path = "{draft}"
num_steps = 3
eagle_topk = 1
num_draft_tokens = 4
""")


@pytest.fixture
def sim_ws(tmp_path, monkeypatch):
    _sim_workspace(tmp_path)
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
    yield tmp_path
    close_runtime(tmp_path, source="teardown")


def _order(at: AppTest) -> list[str]:
    """The main area's elements in page order, as 'kind:text'."""
    out = []

    def walk(node) -> None:
        kind = getattr(node, "type", "")
        if kind in ("subheader", "metric", "button"):
            out.append(f"{kind}:{getattr(node, 'value', '') if kind != 'button' else node.label}"
                       if kind != "metric" else f"metric:{node.label}")
        for child in getattr(node, "children", {}).values():
            walk(child)

    walk(at.main)
    return out


@pytest.mark.timeout(240)
def test_controls_come_before_the_live_view_the_status_names_the_settings_and_a_relaunch_is_followed(sim_ws):
    rt = runtime_mod.get_runtime()
    at = AppTest.from_file(PAGE, default_timeout=30).run()
    assert not at.exception, at.exception
    order = _order(at)
    assert order.index("button:Start…") < order.index("metric:accept_len") < order.index(
        "subheader:Config and preflight"), order
    assert order.index("button:Stop") < order.index("metric:accept_len")
    assert ("speculation: **EAGLE3** · steps **3** · topk **1** · draft tokens **4** (launch config)"
            in _status(at))
    assert not at.get("html") or not any("scrollIntoView" in h.proto.body for h in at.get("html"))

    # start with steps = 5 edited in the panel
    at.button(key="srv-launch").click().run()
    at.number_input(key="srv-f-sim-steps").set_value(5).run()
    at.number_input(key="srv-f-sim-dtok").set_value(6).run()
    assert not at.exception, at.exception
    at.button(key="srv-launch-go").click().run()
    assert not at.exception, at.exception
    assert rt.supervisor.view("sim").state.value in ("STARTING", "RUNNING")
    # the view follows: the page scrolls to the status line, which now says steps 5
    assert any("scrollIntoView" in h.proto.body and "st-key-srv-status" in h.proto.body for h in at.get("html"))
    assert "steps **5** · topk **1** · draft tokens **6**" in _status(at)
    at.run()  # once only: a later refresh leaves the reader where they are
    assert not any("scrollIntoView" in h.proto.body for h in at.get("html"))

    # once the server answers /server_info, the settings are what it reports
    deadline = time.time() + 90
    while time.time() < deadline:
        snap = rt.fleet.snapshot("sim")
        if snap.server_info is not None and snap.server_info.ok and snap.run_live:
            break
        rt.fleet.monitor("sim").refresh()
        time.sleep(0.3)
    at.run()
    assert not at.exception, at.exception
    assert ("speculation: **EAGLE3** · steps **5** · topk **1** · draft tokens **6** (as the server reports)"
            in _status(at))
