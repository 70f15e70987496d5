"""``supervise`` imports every module its loop uses before the alerts' thread starts: two threads that
import the same package lazily at the same moment can deadlock on the interpreter's import locks (a
``supervise`` was once left hanging for good, its main thread importing the telemetry package for the
Prometheus targets file while the alerts' thread imported the NVML module).  Run in a fresh interpreter,
since in the test process these modules are loaded already."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tests.supervisor.test_cli import write_ws

PROBE = textwrap.dedent("""
    import json, sys
    from backend.flows import alerts

    def start(self):
        loaded = {m: m in sys.modules for m in
                  ("backend.flows.prom_targets", "backend.flows.router_sync", "backend.telemetry",
                   "backend.telemetry.nvml")}
        print(json.dumps(loaded), flush=True)
        raise KeyboardInterrupt  # stops supervise before its loop

    alerts.AlertLoop.start = start
    from backend.cli import main
    try:
        main(["-w", sys.argv[1], "supervise", "--interval", "0.1"])
    except KeyboardInterrupt:
        pass
""")


def test_supervise_has_imported_its_loops_modules_when_the_alerts_thread_starts(tmp_path):
    ws = write_ws(tmp_path / "ws")
    p = subprocess.run([sys.executable, "-c", PROBE, str(ws)], capture_output=True, text=True, timeout=120)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    assert lines, (p.returncode, p.stdout, p.stderr)
    assert json.loads(lines[0]) == {"backend.flows.prom_targets": True, "backend.flows.router_sync": True,
                                    "backend.telemetry": True, "backend.telemetry.nvml": True}
