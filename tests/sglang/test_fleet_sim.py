"""Launch, ready, relaunch and stop of the simulated server through the supervisor.

A real process on 127.0.0.1, real HTTP, the real log: the same launch builder,
preflight, monitor and alert as for a GPU server.  Every process is stopped at
the end.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import time

import pytest

import backend.sim.server  # noqa: F401  (our own simulator: a broken import fails, never skips)
from backend.sglang.fleet import PreflightBlocked
from specdeck_types.process import RestartPolicy
from state import audit
from tests.helpers import free_port, wait_for
from tests.simws import running_fleet

MONITOR = {"poll_interval_s": 0.2, "http_interval_s": 0.3}


def _workspace(kimi, speed: str) -> str:
    """Server ``sim``: the Kimi-like target on 8 simulated GPUs with its EAGLE-3 draft, 4 streams of
    built-in traffic, startup ``speed`` times faster."""
    return f"""
[workspace]
name = "t"

[[server]]
name = "sim"
model_path = {json.dumps(str(kimi["target"]))}
port = {free_port()}
tp_size = 8
simulate = true
sglang_version = "0.5.10"
decode_log_interval = 5
baseline_tok_s = 90.0
env = {{ SPECDECK_SIM_SPEED = "{speed}", SPECDECK_SIM_TRAFFIC = "4" }}

[server.speculative]
algorithm = "EAGLE3"
draft_model_path = {json.dumps(str(kimi["draft"]))}
num_steps = 3
eagle_topk = 1
num_draft_tokens = 4
"""


@pytest.mark.timeout(240)
def test_launch_ready_relaunch_with_wrong_algorithm_and_stop(tmp_path, kimi):
    root = tmp_path / "ws"
    with running_fleet(root, _workspace(kimi, speed="50"), monitor_kwargs=MONITOR) as (_ws, store, sup, fleet):
        assert fleet.names() == ["sim"]
        findings = fleet.preflight("sim")
        assert not [f for f in findings if f.severity == "error"], findings
        res = fleet.launch("sim", actor="tester")
        assert res.argv[1:3] == ("-m", "backend.sim.server") and "EAGLE3" in res.argv
        snap = wait_for(lambda: (s := fleet.snapshot("sim")).status == "ready" and s, 90, "ready")
        assert sup.view("sim").state.value in ("STARTING", "RUNNING")
        wait_for(lambda: sup.view("sim").state.value == "RUNNING", 30, "supervisor RUNNING")
        assert snap.phase == "READY" and snap.progress == 1.0
        good = wait_for(lambda: (s := fleet.snapshot("sim")) and sum(
            1 for t, a in zip(s.decode["ts"], s.decode["accept_len"])
            if a is not None and s.ready_ts is not None and t >= s.ready_ts) >= 3 and s, 60, "3 decode lines")
        assert good.alert is None, good.alert
        assert max(a for a in good.decode["accept_len"] if a is not None) > 1.05

        # the seeds' mistake: refused by preflight, then forced and audited
        wrong = fleet.config("sim").model_copy(
            update={"speculative": fleet.config("sim").speculative.model_copy(update={"algorithm": "EAGLE"})})
        with pytest.raises(PreflightBlocked) as exc:
            fleet.launch("sim", wrong, actor="tester")
        assert "eagle3-draft-with-eagle" in str(exc.value) and "21504" in str(exc.value)
        assert sup.view("sim").state.value == "RUNNING"  # a refused relaunch leaves the server alone
        fleet.launch("sim", wrong, actor="tester", launch_anyway=True)
        try:
            bad = wait_for(lambda: (s := fleet.snapshot("sim")).alert is not None and s, 120, "the accept_len alert")
        except AssertionError:
            s = fleet.snapshot("sim")
            raise AssertionError(f"no alert: status={s.status} phase={s.phase} ready_ts={s.ready_ts} "
                                 f"run={s.stats} decode={list(zip(s.decode['ts'], s.decode['accept_len']))[-8:]} "
                                 f"tail={s.log_tail[-15:]}")
        assert bad.ready_ts is not None and bad.alert.since - bad.ready_ts <= 60
        assert "EAGLE3" in " ".join(bad.alert.causes)
        assert bad.algorithm == "EAGLE"
        assert 'algorithm = "EAGLE"' in (root / "specdeck.toml").read_text()  # the edited config is kept
        actions = [(e.action, e.outcome) for e in audit.recent(store, 20) if e.target == "sim"]
        assert ("launch", "refused") in actions and ("launch-anyway", "ok") in actions

        fleet.stop("sim", actor="tester", wait=True)
        assert sup.view("sim").state.value == "EXITED"


def _no_old_figures(s, what: str) -> None:
    """Nothing of a previous run stands for the current one."""
    assert s.latest_decode is None, f"{what}: latest decode line {s.latest_decode}"
    assert s.run_decode["accept_len"] == [] and s.run_decode["gen_throughput"] == [], \
        f"{what}: {list(zip(s.run_decode['ts'], s.run_decode['accept_len']))}"
    assert s.lifetime_accept_len is None, f"{what}: lifetime accept_len {s.lifetime_accept_len}"
    assert s.alert is None, what


def _up(s) -> bool:
    """The new run is up: ready, or its log says READY while a /health answer is late (a loaded machine),
    when its own decode lines may already be in."""
    return s.ready or s.phase == "READY"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_restart_starts_a_new_run_with_no_figures_of_the_old_one(tmp_path, kimi):
    root = tmp_path / "ws"
    with running_fleet(root, _workspace(kimi, speed="50"), monitor_kwargs=MONITOR) as (_ws, store, sup, fleet):
        fleet.launch("sim", actor="tester")
        old = wait_for(lambda: (s := fleet.snapshot("sim")).status == "ready" and len(s.run_decode["ts"]) >= 2
                       and s.lifetime_accept_len is not None and s, 120, "run 1 ready and decoding")
        assert old.latest_decode is not None and old.latest_decode["accept_len"] > 1.05
        old_run = old.run_id
        assert old_run == sup.view("sim").run_id

        # relaunch with a slow startup (about 10 s of loading), so the window is wide enough to look into
        cfg = fleet.config("sim")
        slow = cfg.model_copy(update={"env": {**cfg.env, "SPECDECK_SIM_SPEED": "2"}})
        fleet.launch("sim", slow, actor="tester")
        seen_loading = 0
        deadline = time.time() + 120
        while True:
            s = fleet.snapshot("sim")
            if s.run_id != old_run and _up(s):
                break
            _no_old_figures(s, f"status={s.status} phase={s.phase} run={s.run_id}")
            if s.run_id != old_run and s.phase in ("LAUNCHED", "INIT", "WEIGHTS", "KV_CACHE", "CUDA_GRAPH"):
                seen_loading += 1
            assert time.time() < deadline, "run 2 never became ready"
            time.sleep(0.1)
        assert seen_loading >= 3  # the new process was seen loading, several times, with nothing of run 1
        # the charts keep run 1, and mark where run 2 began
        assert len(s.decode["ts"]) >= 2 and s.run_starts and s.run_starts[-1] >= old.decode["ts"][-1]
        new = wait_for(lambda: (s := fleet.snapshot("sim")) and s.run_decode["ts"] and s, 60, "run 2 decoding")
        assert all(t > new.run_started_ts for t in new.run_decode["ts"])
        assert new.latest_decode is not None and new.latest_decode["ts"] > new.run_started_ts

        # stop, then start: the same again
        fleet.stop("sim", actor="tester", wait=True)
        _no_old_figures(fleet.snapshot("sim"), "stopped")
        fleet.launch("sim", actor="tester")
        while not _up(s := fleet.snapshot("sim")) or s.run_id == new.run_id:
            _no_old_figures(s, f"restarting: status={s.status} phase={s.phase} run={s.run_id}")
            assert time.time() < deadline + 60, "run 3 never became ready"
            time.sleep(0.1)
        assert s.run_id not in (old_run, new.run_id)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_crash_and_backoff_restart_starts_a_new_run(tmp_path, kimi):
    def restart_on_failure(specs):  # restarted on failure after a 2 s backoff
        return [dataclasses.replace(spec, restart=RestartPolicy("on-failure", max_tries=2, backoff_s=2.0))
                for spec in specs]

    root = tmp_path / "ws"
    with running_fleet(root, _workspace(kimi, speed="4"), monitor_kwargs=MONITOR,
                       specs=restart_on_failure) as (_ws, store, sup, fleet):
        sup.start("sim", actor="tester")
        old = wait_for(lambda: (s := fleet.snapshot("sim")).status == "ready" and len(s.run_decode["ts"]) >= 2
                       and sup.view("sim").state.value == "RUNNING" and s, 120, "run 1 RUNNING and decoding")
        old_run = old.run_id
        os.kill(sup.view("sim").pid, signal.SIGABRT)  # the server crashes
        states = set()
        deadline = time.time() + 120
        while True:
            v = sup.view("sim")
            s = fleet.snapshot("sim")
            if v.run_id != old_run and s.run_id != old_run and _up(s):  # the new run's own figures may be in
                break
            if v.run_id == old_run and v.state.value == "RUNNING":
                assert time.time() < deadline, "the crash was never noticed"
                time.sleep(0.05)
                continue
            states.add(v.state.value)
            _no_old_figures(s, f"state={v.state.value} status={s.status} phase={s.phase} run={s.run_id}")
            assert time.time() < deadline, "the restart never became ready"
            time.sleep(0.1)
        assert "BACKOFF" in states and "STARTING" in states, states
        assert sup.view("sim").tries == 1
