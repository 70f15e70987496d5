"""`supervise` on the command line evaluates the alerts and notifies, as a running dashboard does: a
long run is watched without a browser open.  `--no-alerts` leaves them out."""

from __future__ import annotations

import json
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _workspace(root: Path, received: Path) -> Path:
    root.mkdir()
    catcher = f"import sys; open({str(received)!r}, 'a').write(sys.stdin.read() + '\\n')"
    (root / "specdeck.toml").write_text(f"""[workspace]
name = "watch"

[telemetry]
source = "fake"

[alerts]
command = [{json.dumps(sys.executable)}, "-c", {json.dumps(catcher)}]
interval_s = 1
disk_min_free_gb = 1000000   # any disk is nearly full by this measure
""")
    return root


def _supervise(ws: Path, *extra: str, seconds: float) -> subprocess.CompletedProcess:
    """``supervise`` for ``seconds`` once it says it supervises (its SIGTERM handler is in place then: a
    fixed wait from the start sent SIGTERM to a CLI still importing on a loaded machine), then SIGTERM."""
    p = subprocess.Popen([sys.executable, "-m", "backend.cli", "-w", str(ws), "supervise", "--interval", "0.2",
                          *extra], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = ""
    try:
        ready, _, _ = select.select([p.stdout], [], [], 60)
        first = p.stdout.readline() if ready else ""
        assert first.startswith("supervising "), f"supervise did not start within 60 s: {first!r}"
        time.sleep(seconds)
    finally:
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
    return subprocess.CompletedProcess(p.args, p.returncode, first + out, err)


@pytest.mark.timeout(120)
def test_supervise_notifies_a_firing_alert_and_stops_cleanly(tmp_path):
    received = tmp_path / "received.txt"
    ws = _workspace(tmp_path / "ws", received)
    deadline = time.monotonic() + 60
    p = subprocess.Popen([sys.executable, "-m", "backend.cli", "-w", str(ws), "supervise", "--interval", "0.2"],
                         cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while not (received.exists() and "disk" in received.read_text().lower()):
            assert p.poll() is None, p.communicate()
            assert time.monotonic() < deadline, "no notification within 60 s"
            time.sleep(0.2)
    finally:
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    assert "supervise: stopped" in out
    r = subprocess.run([sys.executable, "-m", "backend.cli", "-w", str(ws), "alerts", "list", "--json"], cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert any(json.loads(line)["rule"] == "disk-full" for line in r.stdout.splitlines() if line.strip())


@pytest.mark.timeout(120)
def test_supervise_without_alerts_notifies_nothing(tmp_path):
    received = tmp_path / "received.txt"
    ws = _workspace(tmp_path / "ws", received)
    r = _supervise(ws, "--no-alerts", seconds=4)
    assert r.returncode == 0, r.stderr
    assert not received.exists()
