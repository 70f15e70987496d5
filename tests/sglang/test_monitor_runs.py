"""A restart starts a new run: the monitor's figures, readings and alert belong to the current run only.

The log is written by hand with fixed log times; expected times come from the
text (``time.mktime`` of the stamp), never from the parser.
"""

from __future__ import annotations

import time
from pathlib import Path

from backend.sglang.config import ServerConfig
from backend.sglang.logparse import Phase, PhaseEvent
from backend.sglang.monitor import ServerMonitor
from backend.sglang.runs import RunInfo, run_starts, split_series
from tests.sglang.test_monitor import FakeServer


def at(stamp: str) -> float:
    """Epoch of a local 'YYYY-mm-dd HH:MM:SS' log stamp."""
    return time.mktime(time.strptime(stamp, "%Y-%m-%d %H:%M:%S"))


DAY = "2026-11-30"


def header(run: str, hms: str) -> str:
    return f"===== specdeck: srv run {run} starting at {DAY} {hms}: python -m sglang.launch_server --port 1\n"


def decode(hms: str, accept: float | None, tput: float, running: int) -> str:
    acc = f"accept len: {accept:.2f}, " if accept is not None else ""
    return (f"[{DAY} {hms} TP0] Decode batch. #running-req: {running}, #token: 4000, token usage: 0.12, {acc}"
            f"cuda graph: True, gen throughput (token/s): {tput:.2f}, #queue-req: 0, \n")


RUN1 = (header("r1", "09:00:00")
        + f"[{DAY} 09:00:01] server_args=ServerArgs(speculative_algorithm='EAGLE3')\n"
        + f"[{DAY} 09:00:20] The server is fired up and ready to roll!\n"
        + decode("09:00:30", 2.21, 567.0, 4) + decode("09:00:40", 2.30, 580.0, 4) + decode("09:00:50", 2.25, 571.0, 4)
        + f"===== specdeck: srv run r1 ended at {DAY} 09:00:50: exit code 1\n")
RUN2_HEAD = header("r2", "09:00:50") + f"[{DAY} 09:00:51] server_args=ServerArgs(speculative_algorithm='EAGLE3')\n"
RUN2_READY = (f"[{DAY} 09:01:10] The server is fired up and ready to roll!\n"
              + decode("09:01:20", 1.00, 84.1, 1))


def monitor(tmp_path: Path, now: str = "09:05:00", **cfg) -> tuple[ServerMonitor, Path]:
    log = tmp_path / "srv.log"
    base = dict(name="srv", model_path=str(tmp_path), port=1, baseline_tok_s=90.0,
                speculative={"algorithm": "EAGLE3", "draft_model_path": str(tmp_path / "nodraft")})
    base.update(cfg)
    mon = ServerMonitor(ServerConfig.model_validate(base), log, "0.5.10", watch=False, http=False,
                        clock=lambda: at(f"{DAY} {now}"))
    return mon, log


def write(log: Path, text: str) -> None:
    with open(log, "a", encoding="utf-8") as fh:
        fh.write(text)


def test_a_restart_in_the_log_blanks_the_previous_runs_figures(tmp_path):
    mon, log = monitor(tmp_path)
    write(log, RUN1)
    mon.refresh()
    s = mon.snapshot()
    assert s.latest_decode["accept_len"] == 2.25 and s.run_decode["gen_throughput"] == [567.0, 580.0, 571.0]

    write(log, RUN2_HEAD)  # the new process is loading weights
    mon.refresh()
    s = mon.snapshot()
    assert s.status == "starting" and s.phase == "LAUNCHED"
    assert s.latest_decode is None and s.run_decode["accept_len"] == [] and s.run_decode["gen_throughput"] == []
    assert s.run_started_ts == at(f"{DAY} 09:00:50")
    # the charts keep the previous run, with the restart to break and mark
    assert s.decode["accept_len"] == [2.21, 2.30, 2.25]
    assert s.run_starts == (at(f"{DAY} 09:00:50"),)

    write(log, RUN2_READY)
    mon.refresh()
    s = mon.snapshot()
    assert s.run_decode["ts"] == [at(f"{DAY} 09:01:20")] and s.run_decode["accept_len"] == [1.0]
    assert s.latest_decode["gen_throughput"] == 84.1
    assert s.decode["accept_len"] == [2.21, 2.30, 2.25, 1.0]


def test_the_supervisors_new_run_blanks_figures_before_its_log_header_is_read(tmp_path):
    mon, log = monitor(tmp_path)
    write(log, RUN1.rsplit("=====", 1)[0])  # run 1 still logging
    mon.refresh()
    started = at(f"{DAY} 09:00:55") + 0.5
    s = mon.snapshot(RunInfo("r2", started, True))
    assert s.run_id == "r2" and s.status == "starting" and s.phase is None and s.progress == 0.0
    assert s.ready_ts is None and s.alert is None and s.fatal is None
    assert s.latest_decode is None and s.run_decode["accept_len"] == []
    assert s.run_starts == (started,)
    # the same run, as the supervisor knows it: run 1's figures
    s = mon.snapshot(RunInfo("r1", at(f"{DAY} 09:00:00") + 0.3, True))
    assert s.status == "ready" and s.latest_decode["accept_len"] == 2.25


def test_a_run_that_ended_or_waits_to_restart_shows_no_figures(tmp_path):
    mon, log = monitor(tmp_path)
    write(log, RUN1)
    mon.refresh()
    s = mon.snapshot(RunInfo("r1", at(f"{DAY} 09:00:00") + 0.3, False))  # BACKOFF, EXITED or stopping
    assert not s.run_live and s.latest_decode is None and s.run_decode["gen_throughput"] == []
    assert s.lifetime_accept_len is None and s.alert is None
    assert s.decode["gen_throughput"] == [567.0, 580.0, 571.0]


def test_readings_of_the_previous_process_are_dropped_at_a_restart(tmp_path):
    with FakeServer() as srv:
        srv.ready = True
        cfg = ServerConfig(name="srv", model_path=str(tmp_path), port=srv.port,
                           speculative={"algorithm": "EAGLE", "draft_model_path": str(tmp_path / "nodraft")})
        mon = ServerMonitor(cfg, tmp_path / "srv.log", "0.5.4", watch=False)
        mon.refresh(http=True)
        s = mon.snapshot(RunInfo("r1", time.time() - 60, True))
        assert s.status == "ready" and s.lifetime_accept_len == 1.0 and s.metrics is not None
        restarted = time.time()
        s = mon.snapshot(RunInfo("r2", restarted, True))
        assert s.health is None and s.server_info is None and s.metrics is None
        assert s.lifetime_accept_len is None and s.status == "starting"
        mon.refresh(http=True)  # the new process answers
        s = mon.snapshot(RunInfo("r2", restarted, True))
        assert s.status == "ready" and s.lifetime_accept_len == 1.0


def test_speculation_is_detected_from_the_current_runs_log(tmp_path):
    # the config names no speculative algorithm: the log's accept len says speculation is on
    mon, log = monitor(tmp_path, now="09:02:00", speculative={})
    write(log, RUN1.replace("2.21", "1.00").replace("2.30", "1.00").replace("2.25", "1.02"))
    mon.refresh()
    s = mon.snapshot()
    assert s.spec_enabled and s.alert is not None and s.alert.since == at(f"{DAY} 09:00:50")
    # the next run serves without speculation: its decode lines have no accept len
    write(log, header("r2", "09:01:00") + f"[{DAY} 09:01:01] server_args=ServerArgs()\n"
               f"[{DAY} 09:01:10] The server is fired up and ready to roll!\n"
               + decode("09:01:20", None, 88.0, 1) + decode("09:01:30", None, 89.0, 1)
               + decode("09:01:40", None, 87.0, 1))
    mon.refresh()
    s = mon.snapshot()
    assert not s.spec_enabled and s.alert is None


def test_run_starts_from_events():
    def ev(hms, phase=Phase.LAUNCHED, new=False):
        return PhaseEvent(at(f"{DAY} {hms}"), "", phase, "", None, new)

    events = [ev("09:00:00", new=True), ev("09:00:01", new=True),  # header + server_args: one run
              ev("09:00:05", Phase.WEIGHTS), ev("09:00:20", Phase.READY),
              ev("09:00:50", new=True), ev("09:00:51", new=True), ev("09:01:00", Phase.INIT),
              ev("09:02:00", new=True)]  # SGLang alone (no header)
    assert run_starts(events) == [at(f"{DAY} 09:00:00"), at(f"{DAY} 09:00:50"), at(f"{DAY} 09:02:00")]
    # the ingester's start of the current run, when the events do not end with it
    assert run_starts(events[:4], at(f"{DAY} 09:03:00")) == [at(f"{DAY} 09:00:00"), at(f"{DAY} 09:03:00")]


def test_split_series_keeps_points_logged_after_the_start():
    series = {"ts": [10.0, 20.0, 30.0, 31.0], "v": [1, 2, 3, 4]}
    assert split_series(series, 30.0) == {"ts": [31.0], "v": [4]}
    assert split_series(series, 5.0) == series
    assert split_series(series, None) == series
    assert split_series(series, 40.0) == {"ts": [], "v": []}
