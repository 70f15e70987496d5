"""Servers through the runtime: preflight gate, launch anyway (audited), relaunch
with an edited config written back to the workspace file, ready, stop."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from backend import runtime as runtime_mod
from backend.runtime import PreflightBlocked
from state import audit
from tests.helpers import close_runtime, free_port
from tests.simws import make_models


@pytest.fixture
def ws(tmp_path: Path, monkeypatch):
    target, draft = make_models(tmp_path / "m", draft="draft")
    port = free_port()
    (tmp_path / "specdeck.toml").write_text(f"""
[workspace]
name = "srv"

[telemetry]
source = "fake"

# the server under test
[[server]]
name = "sim"
model_path = "{target}"
port = {port}
simulate = true
sglang_version = "0.5.23"
env = {{ SPECDECK_SIM_SPEED = "200" }}

[server.speculative]
algorithm = "EAGLE"   # the seeds' mistake: an EAGLE-3 draft served as EAGLE
draft_model_path = "{draft}"
num_steps = 3
eagle_topk = 1
num_draft_tokens = 4
""")
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
    yield tmp_path
    close_runtime(tmp_path)


def _wait(rt, name, states, timeout=30.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        rt.supervisor.poll()
        v = rt.supervisor.view(name)
        if v.state.value in states:
            return v
        time.sleep(0.1)
    raise AssertionError(f"{name} stayed {rt.supervisor.view(name).state.value}")


@pytest.mark.timeout(120)
def test_preflight_blocks_the_eagle_mistake_until_launch_anyway(ws):
    rt = runtime_mod.get_runtime(background=False)
    with pytest.raises(PreflightBlocked) as ei:
        rt.start("sim", actor="alice", source="test")
    words = " ".join(f.found for f in ei.value.findings if f.severity == "error")
    assert "EAGLE3" in words
    assert rt.supervisor.view("sim").pid is None  # nothing was started
    refused = [e for e in audit.recent(rt.store, target="sim") if e.outcome == "refused"]
    assert refused and refused[0].actor == "alice"

    rt.start("sim", actor="alice", source="test", force=True)
    anyway = [e for e in audit.recent(rt.store, target="sim") if e.action == "launch-anyway"]
    assert anyway and "preflight errors" in anyway[0].detail
    _wait(rt, "sim", {"RUNNING"})


@pytest.mark.timeout(120)
def test_relaunch_with_fixed_config_rewrites_file_and_comes_up_ready(ws):
    rt = runtime_mod.get_runtime(background=False)
    rt.start("sim", actor="bob", source="test", force=True)
    first = _wait(rt, "sim", {"RUNNING"})
    cfg = rt.fleet.config("sim")
    fixed = cfg.model_copy(update={"speculative": cfg.speculative.model_copy(update={"algorithm": "EAGLE3"})})
    assert not [f for f in rt.fleet.preflight("sim", fixed) if f.severity == "error"]

    rt.fleet.launch("sim", fixed, actor="bob", source="test")
    text = (ws / "specdeck.toml").read_text()
    assert 'algorithm = "EAGLE3"' in text
    assert "# the server under test" in text  # comments survive the rewrite
    # a new process came up ready with the new flag
    deadline = time.time() + 60
    while time.time() < deadline:
        rt.supervisor.poll()
        v = rt.supervisor.view("sim")
        if v.state.value == "RUNNING" and v.pid != first.pid:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("relaunched server did not become ready")
    assert "EAGLE3" in v.spec.argv
    # the reloaded workspace sees the fix too
    from backend.flows.workspace import load_workspace

    assert load_workspace(ws).config.server[0]["speculative"]["algorithm"] == "EAGLE3"
    rt.stop("sim", actor="bob", source="test")
    _wait(rt, "sim", {"EXITED"})
