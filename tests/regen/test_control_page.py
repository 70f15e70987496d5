"""The Regeneration page's controls draw what the domain allows (backend.regen.control.Controls) and act
through it: a stopped run with failed rows offers Requeue only, and the requeue runs in the dashboard's
own process, audited as the session's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from backend import runtime as runtime_mod
from backend.regen import control, output
from backend.regen.output import RunFiles, encode, error_record
from state import audit
from tests.helpers import close_runtime

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(120)


def _run_with_failures(root: Path, state: str, failed: int) -> RunFiles:
    files = RunFiles.of(root / "outputs" / "regen" / "rq.jsonl")
    files.out.parent.mkdir(parents=True)
    files.out.write_bytes(b"")
    files.error.write_bytes(b"".join(encode(error_record(f"r{i}", {"id": f"r{i}", "conversations": []},
                                                         "HTTP 400: too long", {"class": "context_length"}))
                                     for i in range(failed)))
    files.progress.write_text(json.dumps({"t": 1.0, "started_at": 0.5, "state": state, "total": 5, "done": 5 - failed,
                                          "failed": failed, "skipped": 0, "in_flight": 0, "remaining": 0}) + "\n")
    return files


@pytest.fixture
def ws(tmp_path, monkeypatch):
    (tmp_path / "specdeck.toml").write_text('[workspace]\nname = "controls"\n')
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
    yield tmp_path
    close_runtime(tmp_path)


def _page() -> AppTest:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
    at.run()
    at.switch_page("app_pages/regeneration.py")
    return at.run()


def test_a_stopped_run_with_failed_rows_offers_requeue_and_runs_it_in_process(ws, monkeypatch):
    files = _run_with_failures(ws, "done", 2)
    moved = []
    real = output.requeue

    def requeue(f, error_class=None):  # seen here only if the requeue runs in this process
        moved.append(f.out)
        return real(f, error_class)

    monkeypatch.setattr(output, "requeue", requeue)
    at = _page()
    assert not at.exception, at.exception
    enabled = {k: not at.button(key=f"regen-{k}").disabled for k in ("pause", "resume", "requeue", "stop")}
    assert enabled == {"pause": False, "resume": False, "requeue": True, "stop": False}
    at.button(key="regen-requeue").click().run()
    assert moved == [] and len(files.error.read_bytes().splitlines()) == 2  # asked first
    at.button(key="regen-confirm-requeue-yes").click().run()
    assert not at.exception, at.exception
    assert moved == [files.out] and files.error.read_text() == ""
    entry = audit.recent(runtime_mod.get_runtime().store, target="regen-rq")[0]
    assert (entry.action, entry.outcome, entry.source) == ("requeue", "ok", "dashboard")
    assert entry.detail.startswith("2 failed rows moved back")


def test_a_paused_run_with_its_parameters_offers_resume_and_requeue(ws):
    files = _run_with_failures(ws, "paused", 1)
    files.job.write_text("{}")
    at = _page()
    enabled = {k: not at.button(key=f"regen-{k}").disabled for k in ("pause", "resume", "requeue", "stop")}
    assert enabled == {"pause": False, "resume": True, "requeue": True, "stop": False}
    assert control.controls(runtime_mod.get_runtime(), str(files.out), {"state": "paused", "failed": 1}).can_resume
