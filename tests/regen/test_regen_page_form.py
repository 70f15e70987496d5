"""The start form: only the fields of the source chosen; --stream and the timeouts; the review shows
the rows to ask, a duration estimate and the whole command (wrapped, not cut)."""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from backend.regen import control
from tests.regen.regen_fixtures import append, snap

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def ws(tmp_path, monkeypatch):
    from tests.helpers import close_runtime

    (tmp_path / "datasets").mkdir()
    (tmp_path / "datasets" / "code.jsonl").write_text("".join(
        json.dumps({"id": f"c{i}", "prompt": f"question {i}"}) + "\n" for i in range(7)) + "not json\n")
    (tmp_path / "specdeck.toml").write_text(
        '[workspace]\nname = "form"\n\n[[dataset]]\nname = "code"\nsource = "hand"\nfile = "datasets/code.jsonl"\n\n'
        '[[mix]]\nname = "m"\ndataset = "code"\n')
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
    yield tmp_path
    close_runtime(tmp_path)


def _page() -> AppTest:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
    at.run()
    at.switch_page("app_pages/regeneration.py")
    at.run()
    assert not at.exception, at.exception
    return at


def _keys(at: AppTest) -> set[str]:
    return {w.key for kind in ("selectbox", "multiselect", "text_area") for w in at.get(kind)}


def test_the_form_shows_only_the_fields_of_the_source_chosen(ws):
    at = _page()
    assert "regen-f-mix" in _keys(at)
    assert not {"regen-f-datasets", "regen-f-files"} & _keys(at)
    at.radio(key="regen-f-source").set_value("catalog datasets").run()
    assert "regen-f-datasets" in _keys(at) and not {"regen-f-mix", "regen-f-files"} & _keys(at)
    at.radio(key="regen-f-source").set_value("input files").run()
    assert "regen-f-files" in _keys(at) and not {"regen-f-mix", "regen-f-datasets"} & _keys(at)


def test_review_counts_the_rows_estimates_the_time_and_wraps_the_command(ws):
    # an earlier run of the workspace went at 2 rows/s
    prev = ws / "outputs" / "regen" / "old.progress.jsonl"
    prev.parent.mkdir(parents=True)
    append(prev, snap(time.time() - 5, 10, total=10, state="done", req_s=2.0))
    at = _page()
    # below that run the form is closed, and not built until it is opened
    assert [e.label for e in at.expander][-1] == "Start a regeneration"
    assert "regen-f-urls" not in {w.key for w in at.text_input}
    at.session_state["regen-start-open"] = True  # what opening the expander does (it runs the page again)
    at.run()
    assert not at.exception, at.exception
    at.text_input(key="regen-f-urls").input("http://127.0.0.1:30011")
    at.text_input(key="regen-f-out").input("outputs/regen/new.jsonl")
    at.checkbox(key="regen-f-stream").check()
    at.number_input(key="regen-f-chunk").set_value(30)
    at.number_input(key="regen-f-firstbyte").set_value(90)
    next(b for b in at.button if b.label == "Review").click()
    at.run()
    assert not at.exception, at.exception
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["rows to ask"] == "7"  # the line that is not JSON is skipped, not asked
    assert metrics["duration estimate"] == "3 s"  # 7 rows at 2 rows/s
    codes = [c for c in at.code if "regen run" in c.value]
    assert len(codes) == 1 and codes[0].proto.wrap_lines
    argv = shlex.split(codes[0].value)
    assert argv[-5:] == ["--stream", "--first-byte-timeout", "90", "--chunk-timeout", "30"]


def test_run_argv_passes_streaming_and_the_timeouts(tmp_path):
    form = control.RunForm(out="o.jsonl", servers=("http://h:1",), mix="m", stream=True, first_byte_timeout=60.0,
                           chunk_timeout=15.5, startup_timeout=900.0)
    argv = control.run_argv(form, tmp_path, python=sys.executable)
    assert argv[-7:] == ["--stream", "--first-byte-timeout", "60", "--chunk-timeout", "15.5",
                         "--startup-timeout", "900"]
    plain = control.run_argv(control.RunForm(out="o.jsonl", servers=("s",), mix="m"), tmp_path)
    assert "--stream" not in plain and "--chunk-timeout" not in plain
    with pytest.raises(control.FormError, match="chunk timeout: give a number of seconds above 0"):
        control.run_argv(control.RunForm(out="o.jsonl", servers=("s",), mix="m", chunk_timeout=0.0), tmp_path)
    assert control.duration_estimate(100, [("a", 0.5), ("b", 4.0)])[0] == 25.0
    assert control.duration_estimate(100, [])[0] is None


def test_what_was_typed_survives_closing_the_form_switching_the_source_and_the_view(ws):
    """The form's values count once it is sent (Review); they stay through runs that do not draw
    the form (closed) or the field (another source chosen), and the SpecForge view's paths through
    a visit to the job view."""
    prev = ws / "outputs" / "regen" / "old.progress.jsonl"
    prev.parent.mkdir(parents=True)
    append(prev, snap(time.time() - 5, 10, total=10, state="done", req_s=2.0))
    at = _page()
    at.session_state["regen-start-open"] = True
    at.run()
    at.radio(key="regen-f-source").set_value("input files").run()
    at.text_area(key="regen-f-files").input("datasets/code.jsonl")
    at.text_input(key="regen-f-out").input("outputs/regen/typed.jsonl")
    at.number_input(key="regen-f-conc").set_value(12)
    next(b for b in at.button if b.label == "Review").click()
    at.run()
    assert not at.exception, at.exception
    at.radio(key="regen-f-source").set_value("a mix").run()  # the files field is not drawn now
    assert "regen-f-files" not in _keys(at)
    at.session_state["regen-start-open"] = False  # closed: the form is not built at all
    at.run()
    assert "regen-f-out" not in {w.key for w in at.text_input}
    at.run()  # a second run without it (a live refresh, another click)
    at.session_state["regen-start-open"] = True
    at.run()
    assert not at.exception, at.exception
    assert at.text_input(key="regen-f-out").value == "outputs/regen/typed.jsonl"
    assert at.number_input(key="regen-f-conc").value == 12
    at.radio(key="regen-f-source").set_value("input files").run()
    assert at.text_area(key="regen-f-files").value == "datasets/code.jsonl"
    # the SpecForge view's paths, kept while the job view is shown
    at.segmented_control(key="regen-mode").set_value("SpecForge's regenerate_train_data.py").run()
    at.text_input(key="regen-sf-in").input("datasets/code.jsonl").run()
    at.segmented_control(key="regen-mode").set_value("Specdeck job").run()
    at.run()
    at.segmented_control(key="regen-mode").set_value("SpecForge's regenerate_train_data.py").run()
    assert not at.exception, at.exception
    assert at.text_input(key="regen-sf-in").value == "datasets/code.jsonl"
