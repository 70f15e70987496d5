"""A run that has ended shows one state and no ETA, rate, "done around" or stale warning; skipped rows
are not progress; a running run shows what its job reports (replaced characters)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from backend import runtime as runtime_mod
from tests.regen.regen_fixtures import append, snap
from tests.regen.test_regen_page_jobs import _ticker, _wait, ws_root  # noqa: F401 (fixture)

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(120)


def _page() -> AppTest:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
    at.run()
    at.switch_page("app_pages/regeneration.py")
    at.run()
    assert not at.exception, at.exception
    return at


def _texts(at: AppTest) -> str:
    return "\n".join([m.value for m in at.markdown] + [c.value for c in at.caption]
                     + [w.value for w in at.warning])


def _metric(at: AppTest, label: str):
    return next(m for m in at.metric if m.label == label)


def _running_log(out: Path, now: float, *, last_state: str = "running", last_t: float | None = None,
                 **extra) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    pts = [snap(now - 600 + 60 * k, 100 * k, total=5000, req_s=1.6, tok_s=800.0, in_flight=32,
                started_at=now - 700) for k in range(10)]
    pts.append(snap(last_t or now - 1, 1000, total=5000, req_s=1.6, tok_s=800.0, in_flight=32,
                    started_at=now - 700, state=last_state, **extra))
    append(out.with_name(out.name[: -len(".jsonl")] + ".progress.jsonl"), *pts)


def test_a_stopped_job_shows_one_state_and_no_eta_rate_or_stale_warning(ws_root):
    out = ws_root / "outputs" / "regen" / "halt.jsonl"
    now = time.time()
    # the last snapshot was written as the stop began, a minute ago: it still says stopping
    _running_log(out, now, last_state="stopping", last_t=now - 60)
    rt = runtime_mod.get_runtime()
    rt.start_job(_ticker("regen-halt", rt.workspace.logs_dir), {"kind": "regen", "out": str(out)},
                 actor="t", source="test")
    _wait(rt, "regen-halt", {"RUNNING"})
    rt.stop("regen-halt", actor="t", source="test")
    _wait(rt, "regen-halt", {"EXITED", "STOPPED", "FATAL"})
    at = _page()
    text = _texts(at)
    assert "STOPPED" in text
    assert "stopping" not in text
    assert "done around" not in text and "rows/s" not in text and "tok/s" not in text
    assert "stale" not in text
    assert _metric(at, "ETA").value == "N/A"
    assert _metric(at, "in flight").value == "0"
    assert at.button(key="regen-resume").disabled is False and at.button(key="regen-stop").disabled


def test_a_running_job_shows_its_eta_rate_and_state(ws_root):
    out = ws_root / "outputs" / "regen" / "go.jsonl"
    now = time.time()
    _running_log(out, now, replaced_chars=3)
    at = _page()
    text = _texts(at)
    assert "● running" in text and "done around" in text and "1.60 rows/s" in text
    assert _metric(at, "ETA").value != "N/A"
    assert "3 character(s) that are not valid Unicode written as U+FFFD" in text


def test_skipped_rows_fill_no_bar(ws_root):
    out = ws_root / "outputs" / "regen" / "skip.jsonl"
    out.parent.mkdir(parents=True)
    now = time.time()
    append(out.with_name("skip.progress.jsonl"),
           snap(now - 1, 29, total=62, skipped=4, started_at=now - 100, req_s=1.0,
                datasets={"empty": {"total": 31, "done": 0, "failed": 0, "skipped": 2},
                          "full": {"total": 31, "done": 27, "failed": 2, "skipped": 2}}))
    at = _page()
    bars = {p.proto.text: p.proto.value for p in at.get("progress")}
    assert bars["empty: 0 / 31 (2 skipped)"] == 0
    assert bars["full: 27 / 31 (2 failed, 2 skipped)"] == 100  # every row to ask was asked
    main = next(k for k in bars if k.startswith("**"))
    assert main == "**29 of 58 rows** (50%): done or failed · 4 skipped, not asked"
    assert bars[main] == 50
