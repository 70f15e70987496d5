"""Launch, ready, relaunch and stop of the simulated server through the supervisor.

A real process on 127.0.0.1, real HTTP, the real log: the same launch builder,
preflight, monitor and alert as for a GPU server.  Every process is stopped at
the end.
"""

from __future__ import annotations

import json
import time

import pytest

import backend.sim.server  # noqa: F401 - the simulator these tests launch: a broken import fails them
from backend.sglang.fleet import PreflightBlocked, ServerFleet
from backend.supervisor.supervisor import Supervisor, SupervisorLoop
from backend.workspace import Workspace, parse_config
from state import Store, audit
from tests.helpers import free_port


def wait_for(cond, timeout: float, what: str):
    end = time.time() + timeout
    last = None
    while time.time() < end:
        last = cond()
        if last:
            return last
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


@pytest.mark.timeout(240)
def test_launch_ready_relaunch_with_wrong_algorithm_and_stop(tmp_path, kimi):
    port = free_port()
    root = tmp_path / "ws"
    root.mkdir()
    text = f"""
[workspace]
name = "t"

[[server]]
name = "sim"
model_path = {json.dumps(str(kimi["target"]))}
port = {port}
tp_size = 8
simulate = true
sglang_version = "0.5.10"
decode_log_interval = 5
baseline_tok_s = 90.0
env = {{ SPECDECK_SIM_SPEED = "50", SPECDECK_SIM_TRAFFIC = "4" }}

[server.speculative]
algorithm = "EAGLE3"
draft_model_path = {json.dumps(str(kimi["draft"]))}
num_steps = 3
eagle_topk = 1
num_draft_tokens = 4
"""
    (root / "specdeck.toml").write_text(text)
    ws = Workspace(root=root, config_path=root / "specdeck.toml", config=parse_config(text, root / "specdeck.toml"))
    ws.ensure_dirs()
    store = Store(ws.store_path)
    sup = Supervisor(store, ws.run_dir)
    fleet = ServerFleet(ws, sup, store, gpu_probe=lambda: None,
                        monitor_kwargs={"poll_interval_s": 0.2, "http_interval_s": 0.3})
    loop = SupervisorLoop(sup, interval_s=0.2)
    sup.sync_specs(fleet.specs())
    loop.start()
    try:
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
    finally:
        try:
            v = sup.view("sim")
            if v is not None and v.state.is_active:
                sup.stop("sim", actor="test", source="teardown", wait=True)
        finally:
            loop.stop()
            fleet.close()
            sup.close()
            store.close()
