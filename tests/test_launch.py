"""The dashboard's launcher (``python -m ui.launch``, what scripts/dashboard runs): its start-up work, done
before a browser asks, leaves the workspace open and the first page's training log read by the same shared
objects the pages use."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest

from backend import runtime as runtime_mod
from tests.train.page_kit import gen2_log

WORKSPACE = """[workspace]
name = "launch"

[[train]]
name = "older"
python = "{python}"
generation = "gen2"
entry = "module:backend.flows.tiny train"
target_model = "{root}/target"
train_data = "{root}/data.jsonl"

[[train]]
name = "newest"
python = "{python}"
generation = "gen2"
entry = "module:backend.flows.tiny train"
target_model = "{root}/target"
train_data = "{root}/data.jsonl"
"""


@pytest.fixture
def ws(tmp_path, monkeypatch):
    root = tmp_path / "ws"
    (root / "logs").mkdir(parents=True)
    (root / "specdeck.toml").write_text(WORKSPACE.format(python=sys.executable, root=root))
    (root / "logs" / "older.log").write_text(gen2_log(10, 40))
    time.sleep(0.02)
    (root / "logs" / "newest.log").write_text(gen2_log(20, 40))  # written last: the run the first page opens
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(root))
    yield root
    runtime_mod.close_all()


def test_warm_opens_the_workspace_and_reads_the_log_the_first_page_shows(ws):
    from ui.launch import warm
    from ui.train.data import follower

    w = warm()
    assert w.error is None
    assert w.workspace == str(ws.resolve())
    assert runtime_mod.get_runtime() is runtime_mod._runtimes[ws.resolve()]  # the page gets this same one
    log = ws / "logs" / "newest.log"
    assert w.logs == [str(log)]  # the focus run's only: the older run's log is read when a page asks
    assert w.modules >= 30 and "ui.train.curves" in sys.modules and "ui.overview_train" in sys.modules
    f = follower(log, runtime_mod.get_runtime().train.output_dir("newest"))
    deadline = time.monotonic() + 30
    while (snap := f.poll()).catching_up and time.monotonic() < deadline:
        time.sleep(0.05)
    assert snap.progress.step == 20 and snap.offset == log.stat().st_size
    assert w.prepared == ["newest"]


def test_the_training_pages_first_visit_draws_the_charts_warm_built(ws, monkeypatch):
    """The charts the start-up work builds are the ones the page draws with its default choices: the first
    visit builds none of them again."""
    from streamlit.testing.v1 import AppTest

    from ui.launch import warm
    from ui.train import charts
    from tests.train.page_kit import REPO, chart_titles, page

    w = warm()
    assert w.prepared == ["newest"]
    built = []
    real = charts.metric_chart
    monkeypatch.setattr(charts, "metric_chart", lambda *a, **k: built.append(a[0]) or real(*a, **k))
    at = page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60))
    assert at.selectbox(key="train-run").value == "newest"
    assert "Loss" in chart_titles(at)
    assert built == []
    at.slider(key="train-smooth").set_value(0.3).run()  # another choice: built then, as before
    assert "Loss" in built


def test_warm_reports_a_broken_workspace_and_leaves_it_to_the_page(tmp_path, monkeypatch):
    from ui.launch import warm

    (tmp_path / "specdeck.toml").write_text("[workspace]\nname = 3\n[[train]\n")
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
    try:
        w = warm()
    finally:
        runtime_mod.close_all()
    assert w.error is not None and "specdeck.toml" in w.error and not w.logs


@pytest.mark.slow
def test_the_launcher_serves_the_dashboard_and_says_what_it_did_before_a_browser_came(ws, tmp_path):
    from tests.e2e._dashboard import serve

    home = tmp_path / "home"
    with serve(home, workspace=ws, warm=False) as url:
        out = home / "streamlit.log"
        deadline = time.monotonic() + 60
        line = None
        while time.monotonic() < deadline and line is None:
            m = re.search(r"specdeck: (\d+) modules imported, workspace (\S+) open, (\S+) read and its charts "
                          r"built in [0-9.]+ s",
                          out.read_text(errors="replace"))
            line = m
            time.sleep(0.2)
        assert line is not None, out.read_text(errors="replace")[-2000:]
        assert int(line.group(1)) >= 30 and Path(line.group(2)) == ws.resolve()
        assert Path(line.group(3)) == ws / "logs" / "newest.log"
        import urllib.request

        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=10) as r:
            assert r.status == 200
