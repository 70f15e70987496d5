"""trust_remote_code from the Servers page: the relaunch form's checkbox reaches the
workspace file, the launch command and the running (simulated) server."""

from __future__ import annotations

import time
import tomllib
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from backend import runtime as runtime_mod
from tests.helpers import close_runtime, free_port
from tests.simws import make_models

REPO = Path(__file__).resolve().parents[2]
PAGE = str(REPO / "app_pages" / "servers.py")


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    target, draft = make_models(tmp_path / "m", draft="draft")
    (tmp_path / "specdeck.toml").write_text(f"""[workspace]
name = "trust"

[telemetry]
source = "fake"

[[server]]
name = "sim"  # the simulated GLM-like target
model_path = "{target}"
port = {free_port()}
simulate = true
sglang_version = "0.5.23"
env = {{ SPECDECK_SIM_SPEED = "100" }}

[server.speculative]
algorithm = "EAGLE3"
draft_model_path = "{draft}"
num_steps = 3
eagle_topk = 1
num_draft_tokens = 4

[server.cuda_graph]
max_bs = 8
""")
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
    yield tmp_path
    close_runtime(tmp_path, source="teardown")


@pytest.mark.timeout(180)
def test_trust_remote_code_checkbox_is_written_back_and_launched(workspace):
    at = AppTest.from_file(PAGE, default_timeout=30).run()
    at.button(key="srv-launch").click().run()
    assert not at.exception, at.exception
    box = at.checkbox(key="srv-f-sim-trust")
    assert box.value is False
    box.check().run()
    assert not at.exception, at.exception
    assert any("--trust-remote-code" in c.value for c in at.code)  # the command preview
    at.button(key="srv-launch-go").click().run()
    assert not at.exception, at.exception

    text = (workspace / "specdeck.toml").read_text()
    assert "# the simulated GLM-like target" in text  # comments kept
    server = tomllib.loads(text)["server"][0]
    assert server["trust_remote_code"] is True
    assert server["cuda_graph"] == {"max_bs": 8}  # untouched defaults are not written

    rt = runtime_mod.get_runtime()
    view = rt.supervisor.view("sim")
    assert "--trust-remote-code" in view.spec.argv
    deadline = time.monotonic() + 120
    while rt.supervisor.view("sim").state.value != "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert rt.supervisor.view("sim").state.value == "RUNNING"
    assert rt.fleet.config("sim").trust_remote_code is True
