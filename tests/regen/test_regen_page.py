"""AppTest of the Regeneration page: a run's files written by hand, the values asserted on the page."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from backend import runtime as runtime_mod
from state import audit
from tests.helpers import close_runtime, line_charts, shown_text
from tests.regen.regen_fixtures import append, in_row, out_row, snap

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    (tmp_path / "specdeck.toml").write_text('[workspace]\nname = "regen-apptest"\n')
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
    yield tmp_path
    close_runtime(tmp_path)


def write_run(root: Path, *, state: str = "running", now: float | None = None) -> Path:
    """A run 600 s in: 3,900 done at rates alternating 1 and 2 rows/s, 36,000 left."""
    now = time.time() if now is None else now
    reg = root / "outputs" / "regen"
    reg.mkdir(parents=True)
    data = root / "datasets"
    data.mkdir()
    (data / "stack.jsonl").write_text("".join(
        json.dumps(in_row(f"s{i}", f"prompt {i}", f"original answer {i}")) + "\n" for i in range(3)))
    out = reg / "code.jsonl"
    append(out, *[out_row(f"s{i}", f"regenerated answer {i}", dataset="stack-v2", prompt=f"prompt {i}",
                          tokens=40 + i) for i in range(3)])
    (reg / "code.job.json").write_text(json.dumps({
        "out": str(out), "servers": [{"url": "http://127.0.0.1:30000", "name": None}], "inputs": [],
        "mix": {"name": "code", "entries": [{"name": "code", "dataset": "stack-v2", "file": "datasets/stack.jsonl",
                                             "first_turn_only": False}]},
        "root": str(root)}))
    prog = reg / "code.progress.jsonl"
    start = now - 600
    done = 3000
    extra = dict(total=40_000, failed=60, skipped=40, in_flight=64, started_at=start - 5)
    append(prog, snap(start, done, req_s=1.0, tok_s=80.0, **extra))
    for k in range(10):
        done += 60 if k % 2 == 0 else 120
        last = k == 9
        append(prog, snap(start + 60 * (k + 1), done, req_s=1.5, tok_s=120.0, **extra,
                          state=state if last else "running",
                          datasets={"stack-v2": {"total": 30_000, "done": 3_000, "failed": 60, "skipped": 10},
                                    "humaneval-x": {"total": 10_000, "done": 900, "failed": 0, "skipped": 30}},
                          servers={"http://127.0.0.1:30000": {"name": "demo", "state": "up", "in_flight": 64,
                                                              "done": 3900, "failed": 60, "retries": 7,
                                                              "req_s": 1.5, "tok_s": 120.0, "last_error": None}},
                          completion_tokens_hist={"edges": [0, 64, 128, 256], "counts": [500, 3000, 400]},
                          errors={"context_length": {"count": 50, "example": "prompt is 9000 tokens, limit 8192"},
                                  "bad_request": {"count": 10, "example": "HTTP 400: invalid"}}))
    return out


def _page(at: AppTest) -> AppTest:
    at.run()
    at.switch_page("app_pages/regeneration.py")
    at.run()
    assert not at.exception, at.exception
    return at


def _metric(at: AppTest, label: str):
    return next(m for m in at.metric if m.label == label)


@pytest.mark.timeout(120)
def test_page_shows_the_run_at_a_glance(workspace):
    out = write_run(workspace)
    at = _page(AppTest.from_file(str(REPO / "app.py"), default_timeout=30))
    assert any(t.value == "Regeneration" for t in at.title)
    assert at.selectbox(key="regen-run").value == str(out)
    bars = [p.proto.text for p in at.get("progress")]
    assert "**3,960 of 39,960 rows** (9.9%): done or failed · 40 skipped, not asked" in bars
    assert "stack-v2: 3,000 / 30,000 (60 failed, 10 skipped)" in bars
    assert "humaneval-x: 900 / 10,000 (30 skipped)" in bars
    assert _metric(at, "done").value == "3,900"
    assert _metric(at, "failed").value == "60"
    assert _metric(at, "skipped").value == "40"
    assert _metric(at, "in flight").value == "64"
    assert _metric(at, "remaining").value == "36,000"
    # 900 rows in 600 s: 1.5 rows/s -> 24,000 s; windows at 1 and 2 rows/s -> 18,000-36,000 s
    eta = _metric(at, "ETA")
    assert eta.value == "5-10 h"
    assert "6 h 40 m" in eta.proto.delta
    labels = [e.label for e in at.expander]
    assert "context_length: 50 rows" in labels and "bad_request: 10 rows" in labels
    assert any("prompt is 9000 tokens" in t for t in shown_text(at))
    # the speed chart (rows/s and tok/s) and the answer lengths, drawn by uPlot
    speed, lengths = line_charts(at)
    assert speed["layout"]["title"]["text"] == "Speed"
    assert lengths["layout"]["title"]["text"] == "Answer lengths (tokens)"
    (hist,) = lengths["data"]
    assert hist["type"] == "bar"
    assert hist["x"] == ["0-64", "64-128", "≥ 128"] and hist["y"] == [500, 3000, 400]
    assert not at.get("plotly_chart")
    # the sample viewer: the newest row beside its original
    texts = [t.value for t in at.markdown]
    assert "regenerated answer 2" in texts
    assert "original answer 2" in texts
    assert "prompt 2" in texts


@pytest.mark.timeout(120)
def test_sample_viewer_steps_back_and_finds_by_id(workspace):
    write_run(workspace)
    at = _page(AppTest.from_file(str(REPO / "app.py"), default_timeout=30))
    at.button(key="regen-sample-prev").click().run()
    texts = [t.value for t in at.markdown]
    assert "regenerated answer 1" in texts and "original answer 1" in texts
    at.text_input(key="regen-sample-find").input("s0").run()
    texts = [t.value for t in at.markdown]
    assert "regenerated answer 0" in texts and "original answer 0" in texts
    at.toggle(key="regen-sample-raw").set_value(True).run()  # the texts as they are
    codes = shown_text(at)
    assert "regenerated answer 0" in codes and "original answer 0" in codes and "prompt 0" in codes


@pytest.mark.timeout(120)
def test_pause_writes_the_control_file_and_is_audited(workspace):
    out = write_run(workspace)
    at = _page(AppTest.from_file(str(REPO / "app.py"), default_timeout=30))
    at.button(key="regen-pause").click().run()
    assert not at.exception
    assert (out.parent / "code.control").read_text().strip() == "pause"
    rt = runtime_mod.get_runtime()
    entry = audit.recent(rt.store, target="regen-code")[0]
    assert (entry.action, entry.outcome, entry.source) == ("pause", "ok", "dashboard")


@pytest.mark.timeout(120)
def test_a_finished_run_offers_no_pause_and_says_done(workspace):
    write_run(workspace, state="done")
    at = _page(AppTest.from_file(str(REPO / "app.py"), default_timeout=30))
    assert at.button(key="regen-pause").disabled
    assert any("done" in m.value for m in at.markdown if m.value.startswith(":gray"))


@pytest.mark.timeout(120)
def test_specforge_mode_counts_its_three_files(workspace):
    inp = workspace / "sf_in.jsonl"
    inp.write_text("".join(json.dumps(in_row(f"q{i}", f"p{i}", f"orig {i}")) + "\n" for i in range(12)))
    out = workspace / "sf_out.jsonl"
    append(out, *[{**in_row(f"q{i}", f"p{i}", f"new {i}"), "status": "success"} for i in range(5)])
    append(workspace / "sf_out_error.jsonl", {"id": "q5", "status": "error", "error": "Request timed out."})
    append(workspace / "sf_out_skipped.jsonl", {"id": "q6", "status": "skipped"})
    at = _page(AppTest.from_file(str(REPO / "app.py"), default_timeout=30))
    at.segmented_control(key="regen-mode").set_value("SpecForge's regenerate_train_data.py").run()
    at.text_input(key="regen-sf-in").input(str(inp)).run()
    at.text_input(key="regen-sf-out").input(str(out)).run()
    assert not at.exception, at.exception
    assert _metric(at, "done").value == "5"
    assert _metric(at, "failed").value == "1"
    assert _metric(at, "skipped").value == "1"
    assert _metric(at, "remaining").value == "5"
    assert _metric(at, "in flight").value == "N/A"
    assert "timeout: 1 row" in [e.label for e in at.expander]
    texts = [t.value for t in at.markdown]
    assert "new 4" in texts and "orig 4" in texts


@pytest.mark.timeout(120)
def test_original_appears_once_the_run_names_its_inputs(workspace):
    out = write_run(workspace)
    job = out.with_name("code.job.json")
    saved = job.read_text()
    job.unlink()  # a job that has not written its parameters yet
    at = _page(AppTest.from_file(str(REPO / "app.py"), default_timeout=30))
    assert any("The run's inputs are not known" in c.value for c in at.caption)
    assert "original answer 2" not in [t.value for t in at.markdown]
    job.write_text(saved)
    at.run()
    assert "original answer 2" in [t.value for t in at.markdown]
