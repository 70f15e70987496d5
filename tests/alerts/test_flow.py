"""The alerts flow over a real runtime (no background threads): the snapshot gathered from the
supervisor, telemetry and the outputs folder, an evaluation, and the sidebar's list."""

from __future__ import annotations

import json
import sys
import textwrap
import time

from backend.flows.alerts import configure, gather, thresholds_of
from backend.flows.workspace import load_workspace
from backend.runtime import Runtime


def _ws(root, alerts: str):
    root.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-c", "import sys; sys.exit(3)"]
    (root / "specdeck.toml").write_text(textwrap.dedent(f"""
        [workspace]
        name = "flowws"

        [telemetry]
        source = "fake"

        [[process]]
        name = "srv"
        kind = "server"
        argv = {json.dumps(argv)}
    """) + alerts)
    return load_workspace(root)


def test_gather_evaluate_and_sidebar(tmp_path):
    ws = _ws(tmp_path / "ws", "\n[alerts]\ndisk_min_free_gb = 1000000\nstall_s = 120\n")
    rt = Runtime(ws, background=False)
    try:
        assert thresholds_of(ws.config.alerts).stall_s == 120
        rt.start("srv", actor="test", source="test")
        deadline = time.time() + 20
        while rt.supervisor.view("srv").state.value != "EXITED" and time.time() < deadline:
            rt.supervisor.poll()
            time.sleep(0.05)
        snap = gather(rt)
        srv = next(s for s in snap.servers if s.name == "srv")
        assert (srv.state, srv.exit_code) == ("EXITED", 3)
        assert snap.disks and snap.disks[0].path == str(ws.outputs_dir)
        result = rt.alert_loop.run_once()
        assert {a.key for a in result.fired} >= {"server-down:srv", f"disk-full:{ws.outputs_dir}"}
        sidebar = [a for a in rt.active_alerts() if getattr(a, "code", "") in ("server-down", "disk-full")]
        assert {a.code for a in sidebar} == {"server-down", "disk-full"}
        assert any("[open](/servers?server=srv)" in a.title for a in sidebar)
        # acknowledged: gone from the sidebar, kept in the store
        down = next(a for a in sidebar if a.code == "server-down")
        rt.alerts.alerts.ack(down.id, "test")
        assert "server-down" not in {getattr(a, "code", "") for a in rt.active_alerts()}
        # a config edit changes the thresholds at the next evaluation
        ws.config.alerts.disk_min_free_gb = 0
        configure(rt.alerts, ws)
        cleared = rt.alert_loop.run_once().cleared
        assert [a.rule for a in cleared] == ["disk-full"]
    finally:
        rt.close()
