"""The dashboard's sidebar lists the alerts engine's active alerts with a link to their page (AppTest,
real runtime), and an acknowledged one leaves it."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from backend import runtime as runtime_mod
from tests.helpers import close_runtime

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    (tmp_path / "specdeck.toml").write_text(f"""
[workspace]
name = "alertbar"

[alerts]
interval_s = 3600

[[process]]
name = "srv"
kind = "server"
argv = ["{sys.executable}", "-c", "import sys; sys.exit(3)"]
""")
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
    yield tmp_path
    close_runtime(tmp_path)


def _sidebar_errors() -> list[str]:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
    at.run()
    assert not at.exception, at.exception
    return [e.value for e in at.sidebar.error]


@pytest.mark.timeout(120)
def test_sidebar_shows_a_server_down_alert_until_acknowledged(workspace):
    rt = runtime_mod.get_runtime()
    rt.start("srv", actor="test", source="test")
    deadline = time.time() + 20
    while rt.supervisor.view("srv").state.value != "EXITED" and time.time() < deadline:
        time.sleep(0.05)
    fired = [a for a in rt.alert_loop.run_once().fired if a.key == "server-down:srv"]
    assert fired
    shown = [t for t in _sidebar_errors() if "srv: server down" in t]
    assert shown == ["srv: server down (EXITED with exit code 3) ([open](/servers?server=srv))"]
    rt.alerts.alerts.ack(fired[0].id, "test")
    assert not [t for t in _sidebar_errors() if "server down" in t]
