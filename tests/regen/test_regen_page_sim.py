"""The happy path from the page: the start form runs ``regen run`` as a supervised process against
the simulator over real HTTP, and the page follows it to done.  Every process is ended."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from backend import runtime as runtime_mod
from state import audit
from tests.helpers import close_runtime
from tests.regen.jobkit import SimServer, progress_lines, read_jsonl, wait_for, write_rows

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def setup(tmp_path, monkeypatch):
    (tmp_path / "datasets").mkdir()
    ids = write_rows(tmp_path / "datasets" / "code.jsonl", 30, multi_every=5)
    (tmp_path / "specdeck.toml").write_text(
        '[workspace]\nname = "regen-sim"\n\n'
        '[[dataset]]\nname = "code"\nsource = "generated"\nfile = "datasets/code.jsonl"\n\n'
        '[[mix]]\nname = "happy"\ndataset = "code"\n')
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
    sim = SimServer(tmp_path).start()
    yield tmp_path, sim, ids
    close_runtime(tmp_path)
    sim.stop()


def test_start_from_the_form_runs_to_done_and_the_page_shows_it(setup):
    root, sim, ids = setup
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
    at.run()
    at.switch_page("app_pages/regeneration.py")
    at.run()
    assert at.selectbox(key="regen-f-mix").value == "happy"
    at.text_input(key="regen-f-urls").input(sim.url)
    at.text_input(key="regen-f-out").input("outputs/regen/happy.jsonl")
    at.number_input(key="regen-f-maxtok").set_value(16)
    at.number_input(key="regen-f-temp").set_value(0.0)
    at.button[0].click()  # Review
    at.run()
    assert not at.exception, at.exception
    at.button(key="regen-start-go").click().run()
    assert not at.exception, at.exception

    out = root / "outputs" / "regen" / "happy.jsonl"
    rt = runtime_mod.get_runtime()
    wait_for(lambda: (progress_lines(out) or [{}])[-1].get("state") == "done", 120,
             f"the job to finish (its log: {root / 'logs' / 'regen-happy.log'})", every=0.2)
    view = wait_for(lambda: (v := rt.supervisor.view("regen-happy")) is not None and v.state.value == "EXITED" and v,
                    30, "the supervisor to see the job exit", every=0.2)
    assert view.exit_code == 0

    rows = read_jsonl(out)
    assert sorted(r["id"] for r in rows) == sorted(ids)  # every row once
    at.run()
    assert not at.exception, at.exception
    bars = [p.proto.text for p in at.get("progress")]
    assert "**30 of 30 rows** (100%): done or failed" in bars
    assert "code: 30 / 30" in bars
    assert next(m for m in at.metric if m.label == "done").value == "30"
    assert next(m for m in at.metric if m.label == "remaining").value == "0"
    assert next(m for m in at.metric if m.label == "ETA").value == "done"
    assert any(":gray[○ done]" in m.value for m in at.markdown)
    assert any("FINISHED (exit 0)" in m.value and "regen-happy" in m.value for m in at.caption)
    # the newest row beside its original answer, found through the run's .job.json
    texts = [m.value for m in at.markdown]
    assert "an old answer" in texts or "old tests" in texts
    newest = rows[-1] if rows else {}
    answer = [t["content"] for t in newest["conversations"] if t["role"] == "assistant"][-1]
    assert answer.strip() in [t.strip() for t in texts]
    assert at.button(key="regen-pause").disabled and at.button(key="regen-stop").disabled
    starts = [e for e in audit.recent(rt.store, target="regen-happy") if e.action == "start"]
    assert starts and starts[0].source == "dashboard" and starts[0].outcome == "ok"
    job = json.loads((root / "outputs" / "regen" / "happy.job.json").read_text())
    assert job["max_tokens"] == 16 and job["temperature"] == 0.0
    assert time.time() - progress_lines(out)[-1]["t"] < 240


@pytest.mark.slow
def test_pause_then_resume_from_the_page_finishes_every_row_once(setup):
    root, sim, _ = setup
    more = write_rows(root / "datasets" / "code.jsonl", 270, start=30)  # 300 rows, asked one at a time
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
    at.run()
    at.switch_page("app_pages/regeneration.py")
    at.run()
    at.text_input(key="regen-f-urls").input(sim.url)
    at.text_input(key="regen-f-out").input("outputs/regen/slow.jsonl")
    at.number_input(key="regen-f-conc").set_value(1)
    at.number_input(key="regen-f-maxtok").set_value(64)
    at.button[0].click()
    at.run()
    at.button(key="regen-start-go").click().run()
    out = root / "outputs" / "regen" / "slow.jsonl"
    rt = runtime_mod.get_runtime()
    wait_for(lambda: (progress_lines(out) or [{}])[-1].get("state") == "running", 60, "the job to run", every=0.1)
    at.run()
    at.button(key="regen-pause").click().run()
    assert not at.exception, at.exception
    wait_for(lambda: (v := rt.supervisor.view("regen-slow")) is not None and v.state.value == "EXITED", 60,
             "the paused job to exit", every=0.2)
    assert rt.supervisor.view("regen-slow").exit_code == 0
    last = progress_lines(out)[-1]
    assert last["state"] == "paused" and 0 < last["done"] < 300
    at.run()
    assert not at.button(key="regen-resume").disabled
    at.button(key="regen-resume").click().run()
    assert not at.exception, at.exception
    wait_for(lambda: (progress_lines(out) or [{}])[-1].get("state") == "done", 180, "the resumed job to finish",
             every=0.2)
    ids = [r["id"] for r in read_jsonl(out)]
    assert sorted(ids) == sorted(setup[2] + more) and len(ids) == len(set(ids))
    actions = [(e.action, e.outcome) for e in audit.recent(rt.store, target="regen-slow")]
    assert ("pause", "ok") in actions and actions.count(("start", "ok")) == 2


def test_requeue_failed_from_the_page_moves_them_back_and_is_audited(tmp_path, monkeypatch):
    from tests.regen.test_job_client import StandIn, _run

    (tmp_path / "specdeck.toml").write_text('[workspace]\nname = "requeue"\n')
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps({"id": rid, "conversations": [{"role": "user", "content": text}]}) + "\n"
                           for rid, text in (("a", "plain"), ("b", "too-long prompt"), ("c", "too-long again"))))
    out = tmp_path / "outputs" / "regen" / "rq.jsonl"
    assert _run(StandIn(), {"out": out, "inputs": [str(inp)], "concurrency": 2, "max_tokens": 16,
                            "temperature": 0.0, "max_attempts": 2}) == 0
    error_file = out.with_name("rq_error.jsonl")
    assert len(read_jsonl(error_file)) == 2 and progress_lines(out)[-1]["failed"] == 2
    try:
        at = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
        at.run()
        at.switch_page("app_pages/regeneration.py")
        at.run()
        assert next(m for m in at.metric if m.label == "failed").value == "2"
        assert "context_length: 2 rows" in [e.label for e in at.expander]
        at.button(key="regen-requeue").click().run()
        assert error_file.exists() and len(read_jsonl(error_file)) == 2  # asked first, nothing moved yet
        at.button(key="regen-confirm-requeue-yes").click().run()
        assert not at.exception, at.exception
        assert read_jsonl(error_file) == []  # moved back: the next run asks them again
        entry = audit.recent(runtime_mod.get_runtime().store, target="regen-rq")[0]
        assert (entry.action, entry.outcome, entry.source) == ("requeue", "ok", "dashboard")
        assert "2 failed rows moved back" in entry.detail
    finally:
        runtime_mod.close_all()


@pytest.mark.slow
def test_a_run_started_from_a_terminal_can_be_resumed_from_the_page(setup):
    from tests.regen.jobkit import end_process, start_cli

    root, sim, ids = setup
    more = write_rows(root / "datasets" / "code.jsonl", 170, start=30)
    out = root / "outputs" / "regen" / "term.jsonl"
    out.parent.mkdir(parents=True)
    proc = start_cli("run", "--input", str(root / "datasets" / "code.jsonl"), "--server", sim.url, "--out", str(out),
                     "--concurrency", "1", "--max-tokens", "64", log=root / "term.log")
    try:
        wait_for(lambda: (progress_lines(out) or [{}])[-1].get("state") == "running", 60, "the run", every=0.1)
        at = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
        at.run()
        at.switch_page("app_pages/regeneration.py")
        at.run()
        assert at.selectbox(key="regen-run").value == str(out)
        assert at.button(key="regen-stop").disabled  # not ours to stop
        at.button(key="regen-pause").click().run()  # the control file works whoever started it
        assert proc.wait(60) == 0
    finally:
        end_process(proc)
    assert progress_lines(out)[-1]["state"] == "paused"
    at.run()
    at.button(key="regen-resume").click().run()
    assert not at.exception, at.exception
    rt = runtime_mod.get_runtime()
    assert rt.supervisor.view("regen-term").spec.argv[-4:] == ("regen", "run", "--out", str(out))
    wait_for(lambda: (progress_lines(out) or [{}])[-1].get("state") == "done", 180, "the resumed run", every=0.2)
    got = [r["id"] for r in read_jsonl(out)]
    assert sorted(got) == sorted(ids + more)
