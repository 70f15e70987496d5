"""AppTest of the Overview: a running regeneration's rows, rate and ETA band; each server's accept_len and tok/s
against its baseline with the Servers page's steady-window verdict; Relaunch opening the Servers page on the
server; alerts, GPUs, cost; and every tile linking to its page."""

from __future__ import annotations

import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from streamlit.testing.v1 import AppTest

from backend.sglang.runs import RunInfo
from tests.helpers import close_runtime
from tests.simws import make_models, page_workspace
from ui import overview_data

REPO = Path(__file__).resolve().parents[2]
APP = str(REPO / "app.py")  # the Overview is the page at /


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _decode(t: float, accept: float, tput: float, running: int) -> str:
    return (f"[{_stamp(t)} TP0] Decode batch. #running-req: {running}, #token: 4000, token usage: 0.25, "
            f"accept len: {accept:.2f}, cuda graph: True, gen throughput (token/s): {tput:.2f}, #queue-req: 0, \n")


def _wait_decode(rt, n: int) -> None:
    deadline = time.time() + 20
    while time.time() < deadline:
        rt.fleet.monitor("sim").refresh(http=False)
        if len(rt.fleet.snapshot("sim").decode["ts"]) >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"the monitor did not read {n} decode lines")


def _progress(out: Path, now: float) -> None:
    """A running job's progress log: 5 snapshots a minute apart, 50 rows a minute, 400 of 1,000 asked."""
    lines = []
    for i in range(5):
        t = now - 240 + 60 * i
        done = 200 + 50 * i
        lines.append({"t": t, "state": "running", "total": 1000, "done": done - 10, "failed": 10, "skipped": 0,
                      "remaining": 1000 - done, "in_flight": 8, "req_s": 50 / 60, "tok_s": 410.0,
                      "started_at": now - 600, "servers": {"http://127.0.0.1:1": {"name": "sim", "state": "up"}}})
    out.with_name(out.name[: -len(".jsonl")] + ".progress.jsonl").write_text(
        "".join(json.dumps(x) + "\n" for x in lines))


@pytest.fixture
def overview(tmp_path, monkeypatch):
    target, draft = make_models(tmp_path / "m", draft="draft")
    rt, log = page_workspace(tmp_path, monkeypatch, "overview", target, draft)
    runs: dict[str, RunInfo] = {}
    monkeypatch.setattr(rt.fleet, "_run", lambda name: runs.get(name))
    now = time.time()
    out = tmp_path / "outputs" / "regen-a.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    _progress(out, now)
    # a regeneration job of this workspace whose process runs (this test starts none)
    job = SimpleNamespace(name="regen-a", meta={"kind": "regen", "out": str(out)})
    view = SimpleNamespace(name="regen-a", live=True, started_at=now - 600, ended_at=None, state_since=now - 600,
                           spec=SimpleNamespace(env={}))
    monkeypatch.setattr(overview_data, "regen_jobs", lambda rt_: [(job, view)])
    yield rt, log, runs, now
    close_runtime(tmp_path)


def _text(at: AppTest) -> str:
    return "\n".join([str(m.value) for m in at.markdown] + [str(c.value) for c in at.caption])


@pytest.mark.timeout(120)
def test_the_three_answers_and_the_tiles(overview):
    rt, log, runs, now = overview
    t0 = now - 60
    # a steady window: single-stream decode lines over the last 20 s at 192 tok/s (baseline 90: faster)
    log.write_text(f"===== specdeck: sim run r1 starting at {_stamp(t0)}: python -m backend.sim.server\n"
                   f"[{_stamp(t0 + 10)}] The server is fired up and ready to roll!\n"
                   + "".join(_decode(now - s, 2.31, 192.0, 1) for s in (19, 14, 9, 5, 1)))
    runs["sim"] = RunInfo("r1", t0 + 0.2, True)
    _wait_decode(rt, 5)
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception, at.exception
    text = _text(at)
    # regeneration: rows asked of those to ask, the rate, the ETA band with its point
    bar = at.get("progress")[0]
    assert "400 / 1,000 rows (40%)" in bar.proto.text and "10 failed" in bar.proto.text
    assert "0.83 rows/s" in text and "410.0 tok/s" in text
    eta_line = next(m.value for m in at.markdown if "ETA" in m.value)
    assert "(point" in eta_line and "ETA N/A" not in eta_line
    # servers: accept_len, the per-request tok/s against the configured single-stream baseline, the verdict
    line = next(m.value for m in at.markdown if "accept_len" in m.value)
    assert "**2.31**" in line and "per-request tok/s **192.0** vs baseline 90.0" in line
    assert "faster" in line and ":green[" in line
    # the same verdict as the Servers page computes for this window
    from backend.sglang.monitor import steady_verdict

    snap = rt.fleet.snapshot("sim")
    dec = snap.run_decode if snap.run_decode is not None else snap.decode
    v = steady_verdict(dec["ts"], dec["gen_throughput"], dec["running_req"], 90.0, 1, now=time.time())
    assert v.verdict == "faster" and v.badge in line
    # relaunch and every tile's link
    assert at.button(key="ov-relaunch-sim").label in ("Relaunch…", "Start…")
    links = {p.proto.page for p in at.get("page_link")}
    assert {"regeneration", "servers", "processes", "gpus", "training", "benchmarks"} <= links, links
    # GPUs (the fake source's eight) and cost: the regeneration job's server sets no GPUs, so N/A with why
    assert "**Cost** · Regeneration N/A" in text  # the server sets no gpus: unknown, never 0
    html = "".join(str(h.proto.body) for h in at.get("html"))
    assert html.count('class="ov-gpu"') == 8  # the fake source's eight GPUs


@pytest.mark.timeout(120)
def test_relaunch_opens_the_servers_page_on_the_server_with_its_panel(overview):
    rt, log, runs, now = overview
    log.write_text(_decode(now - 2, 1.0, 80.0, 3))
    _wait_decode(rt, 1)
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception, at.exception
    line = next(m.value for m in at.markdown if "accept_len" in m.value)
    # three requests in flight against a single-stream baseline: no verdict, uncoloured
    assert "load differs" in line and ":green[" not in line and ":red[**" not in line
    at.button(key="ov-relaunch-sim").click().run()
    assert at.session_state["srv-selected"] == "sim" and at.session_state["srv-launch-open"] is True


@pytest.mark.timeout(120)
def test_an_ended_job_shows_no_eta_or_rate(overview, monkeypatch):
    rt, log, runs, now = overview
    job, view = overview_data.regen_jobs(rt)[0]
    ended = SimpleNamespace(**{**vars(view), "live": False, "ended_at": now - 5, "state": None,
                               "exit_code": 0, "detail": "stopped (exit code 0)"})
    from specdeck_types.process import ProcState

    ended.state = ProcState.EXITED
    monkeypatch.setattr(overview_data, "regen_jobs", lambda rt_: [(job, ended)])
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception, at.exception
    text = _text(at)
    assert "None running; the newest:" in text
    assert "rows/s" not in text and "ETA" not in text
    assert "stopped" in text.lower()



@pytest.mark.timeout(120)
def test_a_run_known_by_its_progress_log_shows_while_the_log_moves(overview, monkeypatch):
    """A run started from a terminal (no process here): listed as the Regeneration page lists it; running while
    its log moves, with no cost (no process record); once its log is old, not running."""
    rt, log, runs, now = overview
    monkeypatch.undo()  # the real list: the progress log written under the workspace's outputs
    monkeypatch.setattr(rt.fleet, "_run", lambda name: runs.get(name))
    tiles, last = overview_data.regen_tiles(rt, now=now)
    assert [t.name for t in tiles] == ["regen-regen-a"] and last is None  # the name the Regeneration page gives it
    assert tiles[0].asked == 400 and tiles[0].to_ask == 1000 and tiles[0].rate == pytest.approx(50 / 60)
    assert tiles[0].eta is not None and tiles[0].eta.known
    assert overview_data.regen_costs(rt, now=now) == []
    tiles, last = overview_data.regen_tiles(rt, now=now + 3600)
    assert tiles == [] and last is not None and last.ended and last.state == "no news"
    assert last.rate is None and last.eta is None


@pytest.mark.timeout(120)
def test_the_cost_line_counts_the_servers_gpus_and_leaves_energy_unknown_without_readings(overview, monkeypatch):
    rt, log, runs, now = overview
    cfg = rt.fleet.config("sim").model_copy(update={"gpus": [0, 1]})
    real = rt.fleet.config
    monkeypatch.setattr(rt.fleet, "config", lambda name: cfg if name == "sim" else real(name))
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception, at.exception
    line = next(m for m in at.markdown if str(m.value).startswith("**Cost**"))
    # the job ran 10 min on its server's two GPUs; the fake GPUs' power readings began with this runtime
    assert "Regeneration **0.33** GPU-h" in line.value and "kWh" not in line.value.split("·")[1]
    assert "cover" in (line.proto.help or "")


@pytest.mark.timeout(120)
def test_alerts_errors_first_each_short_with_the_whole_text_on_hover(overview, monkeypatch):
    rt, log, runs, now = overview
    long = "GPU 3 memory nearly full: " + "a very long explanation " * 6
    alerts = [SimpleNamespace(severity="info", title="an info"),
              SimpleNamespace(severity="warning", title=long, message="free memory or lower mem_fraction_static"),
              SimpleNamespace(severity="error", title="sim is down ([open](/servers?server=sim))"),
              SimpleNamespace(severity="warning", title="the fourth")]
    monkeypatch.setattr(rt, "active_alerts", lambda: alerts)
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception, at.exception
    assert any(p.proto.label == "Alerts (4)" for p in at.get("page_link"))
    lines = [m for m in at.markdown if m.value.startswith((":red[● error]", ":orange[▲ warning]", ":blue[○ info]"))]
    assert [m.value.split("]")[0] for m in lines] == [":red[● error", ":orange[▲ warning", ":orange[▲ warning"]
    assert lines[0].value.endswith("sim is down")  # the engine's own link dropped: the tile is the link
    assert lines[1].value.endswith("…") and len(lines[1].value) < 110
    assert "free memory" in lines[1].proto.help and "a very long explanation" in lines[1].proto.help
    assert "and 1 more" in _text(at)
