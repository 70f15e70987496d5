"""Jobs started from the Regeneration page: persisted, re-adopted after a restart, stall alert."""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from backend import runtime as runtime_mod
from backend.regen import control
from backend.runtime import Runtime
from backend.supervisor.adhoc import load_jobs, save_job
from backend.flows.workspace import load_workspace
from specdeck_types.process import Kind, ProcessSpec
from state import audit
from tests.regen.regen_fixtures import append, snap

REPO = Path(__file__).resolve().parents[2]


def _ticker(name: str, log_dir: Path) -> ProcessSpec:
    return ProcessSpec(name=name, kind=Kind.REGENERATION, log_path=str(log_dir / f"{name}.log"), cwd=str(REPO),
                       argv=(sys.executable, "-m", "backend.demo", "ticker", "--interval", "0.2"), stop_grace_s=5)


def _wait(rt, name: str, states: set[str], timeout: float = 20.0):
    deadline = time.time() + timeout
    while time.time() < deadline:
        rt.supervisor.poll()
        v = rt.supervisor.view(name)
        if v is not None and v.state.value in states:
            return v
        time.sleep(0.05)
    raise AssertionError(f"{name} never reached {states}: {v and v.state.value}")


@pytest.fixture
def ws_root(tmp_path, monkeypatch):
    (tmp_path / "specdeck.toml").write_text('[workspace]\nname = "jobs"\n')
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
    yield tmp_path
    for rt in set(runtime_mod._runtimes.values()):
        for v in rt.supervisor.views():
            if v.live:
                rt.supervisor.stop(v.name, actor="test", source="test", wait=True)
    runtime_mod.close_all()


@pytest.mark.timeout(90)
def test_a_started_job_is_saved_and_readopted_after_a_dashboard_restart(ws_root):
    rt = Runtime(load_workspace(ws_root), background=False)
    spec = _ticker("regen-demo", rt.workspace.logs_dir)
    rt.start_job(spec, {"kind": "regen", "out": str(ws_root / "outputs" / "demo.jsonl")}, actor="alice",
                 source="dashboard")
    v1 = _wait(rt, "regen-demo", {"RUNNING"})
    rt.close()
    saved = load_jobs(ws_root / "run")
    assert [j.name for j in saved] == ["regen-demo"] and saved[0].spec.argv == spec.argv

    rt2 = Runtime(load_workspace(ws_root), background=False)  # a new dashboard process
    try:
        assert "regen-demo" in [s.name for s in rt2.all_specs()]
        v2 = _wait(rt2, "regen-demo", {"RUNNING"})
        assert v2.pid == v1.pid  # the same process, re-adopted, not started again
        entry = audit.recent(rt2.store, target="regen-demo")[-1]
        assert (entry.actor, entry.action, entry.source, entry.outcome) == ("alice", "start", "dashboard", "ok")
        rt2.stop("regen-demo", actor="alice", source="dashboard")
        assert _wait(rt2, "regen-demo", {"EXITED"}).state.value == "EXITED"
        # a finished job stays known (it can be resumed) through config reloads
        (ws_root / "specdeck.toml").write_text('[workspace]\nname = "jobs renamed"\n')
        rt2.maybe_reload()
        assert rt2.supervisor.view("regen-demo") is not None
    finally:
        rt2.close()


@pytest.mark.timeout(60)
def test_start_job_refuses_a_running_name_and_audits_it(ws_root):
    rt = Runtime(load_workspace(ws_root), background=False)
    try:
        spec = _ticker("regen-x", rt.workspace.logs_dir)
        rt.start_job(spec, {"kind": "regen"}, actor="bob", source="dashboard")
        _wait(rt, "regen-x", {"RUNNING"})
        with pytest.raises(ValueError, match="already RUNNING"):
            rt.start_job(spec, {"kind": "regen"}, actor="bob", source="dashboard")
        assert audit.recent(rt.store, target="regen-x")[0].outcome == "refused"
    finally:
        rt.supervisor.stop("regen-x", actor="test", source="test", wait=True)
        rt.close()


@pytest.mark.timeout(90)
def test_stalled_running_job_raises_a_sidebar_alert(ws_root):
    out = ws_root / "outputs" / "stuck.jsonl"
    out.parent.mkdir(parents=True)
    now = time.time()
    # 5 rows done 20 min ago, nothing since (snapshots go on every 2 s, here every 5 min)
    append(out.with_name("stuck.progress.jsonl"), snap(now - 1500, 0, started_at=now - 1500),
           snap(now - 1200, 5, started_at=now - 1500), snap(now - 600, 5, started_at=now - 1500),
           snap(now - 1, 5, started_at=now - 1500, message="waiting for http://127.0.0.1:9 (connection refused)"))
    rt = runtime_mod.get_runtime()
    rt.start_job(_ticker("regen-stuck", rt.workspace.logs_dir),
                 {"kind": "regen", "out": str(out), "stall_after_s": 900.0}, actor="t", source="test")
    _wait(rt, "regen-stuck", {"RUNNING"})
    alerts = [a for a in rt.active_alerts() if a.code == "regen-stalled"]
    assert [a.title for a in alerts] == ["regen-stuck: no row completed for 20 min"]
    assert alerts[0].causes[0] == "waiting for http://127.0.0.1:9 (connection refused)"
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=30)
    at.run()
    assert any("regen-stuck: no row completed for 20 min" in w.value for w in at.sidebar.warning)
    # a longer threshold: no alert
    save_job(rt.workspace.run_dir, rt.supervisor.view("regen-stuck").spec,
             {"kind": "regen", "out": str(out), "stall_after_s": 1800.0})
    assert not [a for a in rt.active_alerts() if a.code == "regen-stalled"]


@pytest.mark.timeout(90)
def test_start_form_previews_the_command_then_starts_the_job(ws_root):
    (ws_root / "prompts.jsonl").write_text(json.dumps({"id": "a", "prompt": "hi"}) + "\n")
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=30)
    at.run()
    at.switch_page("app_pages/regeneration.py")
    at.run()
    at.radio(key="regen-f-source").set_value("input files").run()  # the form then shows the files field
    at.text_area(key="regen-f-files").input(str(ws_root / "prompts.jsonl"))
    at.text_input(key="regen-f-urls").input("http://127.0.0.1:30011")
    at.text_input(key="regen-f-out").input("outputs/regen/mine.jsonl")
    at.number_input(key="regen-f-conc").set_value(8)
    at.button[0].click()  # the form's Review button
    at.run()
    assert not at.exception, at.exception
    out = ws_root / "outputs" / "regen" / "mine.jsonl"
    expected = [sys.executable, "-m", "backend.cli", "--workspace", str(ws_root), "regen", "run",
                "--input", str(ws_root / "prompts.jsonl"), "--server", "http://127.0.0.1:30011", "--out", str(out),
                "--concurrency", "8", "--max-tokens", "4096", "--temperature", "0.7", "--reasoning", "none"]
    assert shlex.join(expected) in [c.value for c in at.code]
    at.button(key="regen-start-go").click().run()
    rt = runtime_mod.get_runtime()
    jobs = {j.name: j for j in rt.jobs()}
    assert list(jobs["regen-mine"].spec.argv) == expected
    assert jobs["regen-mine"].meta["out"] == str(out)
    entry = audit.recent(rt.store, target="regen-mine")[0]
    assert (entry.action, entry.source) == ("start", "dashboard")
    assert at.selectbox(key="regen-run").value == str(out)


def test_form_errors_name_the_field(tmp_path):
    with pytest.raises(control.FormError, match="output: 'x.txt' must end in .jsonl"):
        control.run_argv(control.RunForm(out="x.txt", servers=("s",), mix="m"), tmp_path)
    with pytest.raises(control.FormError, match="servers: choose at least one"):
        control.run_argv(control.RunForm(out="x.jsonl", servers=(), mix="m"), tmp_path)
    with pytest.raises(control.FormError, match="input files: /nope.jsonl: no such file"):
        control.run_argv(control.RunForm(out="x.jsonl", servers=("s",), inputs=("/nope.jsonl",)), tmp_path)
    with pytest.raises(control.FormError, match="datasets: choose a mix or give input files"):
        control.run_argv(control.RunForm(out="x.jsonl", servers=("s",)), tmp_path)
