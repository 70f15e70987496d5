"""Deep links of the Servers, GPUs and Processes pages: the chosen server (and an open relaunch panel), the GPU
history's range and metric, and the chosen process come from the URL's query and go back into it; a value that is
not one of the page's choices is ignored with an amber note, never an exception."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from backend import runtime as runtime_mod
from backend.sim.models import make_draft_dir, make_target_dir
from tests.helpers import REPO, close_runtime, free_port


def _server(name: str, target: Path, draft: Path) -> str:
    return f"""
[[server]]
name = "{name}"
model_path = "{target}"
port = {free_port()}
simulate = true

[server.speculative]
algorithm = "EAGLE3"
draft_model_path = "{draft}"
"""


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    target = make_target_dir(tmp_path / "models" / "target")
    draft = make_draft_dir(tmp_path / "models" / "draft")
    (tmp_path / "specdeck.toml").write_text(f"""
[workspace]
name = "deep-links"

[telemetry]
source = "fake"

[[process]]
name = "alpha"
argv = ["{sys.executable}", "-c", "print('alpha')"]

[[process]]
name = "beta"
argv = ["{sys.executable}", "-c", "print('beta')"]
""" + _server("sim-a", target, draft) + _server("sim-b", target, draft))
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    rt = runtime_mod.get_runtime()
    # preflight runs the server's python: not what these tests are about
    monkeypatch.setattr(rt.fleet, "preflight", lambda *a, **k: [])
    monkeypatch.setattr(rt.fleet, "warm_parser", lambda name: None)
    try:
        yield tmp_path
    finally:
        close_runtime(tmp_path)


def _page(page: str, query: dict | None = None) -> AppTest:
    """``page`` opened in a fresh session with ``query`` in its URL, as a link would open it."""
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=90).run()
    for k, v in (query or {}).items():
        at.query_params[k] = v
    at.switch_page(page)
    at.run()
    assert not at.exception, at.exception
    return at


def _param(at: AppTest, name: str):
    """The URL's value of ``name`` (a single value), or None when the URL does not carry it."""
    if name not in at.query_params:
        return None
    v = at.query_params[name]
    return v[-1] if isinstance(v, list) and v else v


def _captions(at: AppTest) -> str:
    return "\n".join(str(c.value) for c in at.caption)


# -- Servers ---------------------------------------------------------------------------------------------------

@pytest.mark.timeout(240)
def test_servers_link_selects_the_server_and_opens_its_relaunch_panel(workspace):
    at = _page("app_pages/servers.py", {"server": "sim-b", "panel": "relaunch"})
    assert at.selectbox(key="srv-selected").value == "sim-b"
    assert at.session_state["srv-launch-open"] is True
    assert at.button(key="srv-launch-cancel")  # the panel is drawn
    assert any("**sim-b** — edit, check" in str(m.value) for m in at.markdown)
    assert (_param(at, "server"), _param(at, "panel")) == ("sim-b", "relaunch")
    # the user's choice afterwards is the page's, and the URL follows it
    at.selectbox(key="srv-selected").select("sim-a").run()
    assert not at.exception, at.exception
    assert at.selectbox(key="srv-selected").value == "sim-a"
    assert _param(at, "server") == "sim-a"
    at.button(key="srv-launch-cancel").click().run()
    assert not at.exception, at.exception
    assert at.session_state["srv-launch-open"] is False
    assert _param(at, "panel") is None and _param(at, "server") == "sim-a"


@pytest.mark.timeout(240)
def test_servers_page_writes_the_server_into_a_link_without_one(workspace):
    at = _page("app_pages/servers.py")
    assert at.selectbox(key="srv-selected").value == "sim-a"
    assert _param(at, "server") == "sim-a" and _param(at, "panel") is None
    assert "From the link" not in _captions(at)


@pytest.mark.timeout(240)
def test_servers_link_with_an_unknown_server_or_panel_is_ignored_with_a_note(workspace):
    at = _page("app_pages/servers.py", {"server": "no-such-server", "panel": "nowhere"})
    text = _captions(at)
    assert "From the link" in text and ":orange[" in text
    assert "server=no-such-server" in text and "panel=nowhere" in text and "ignored" in text
    assert at.selectbox(key="srv-selected").value == "sim-a"  # the first, as without a link
    assert not any(b.key == "srv-launch-cancel" for b in at.button)
    assert _param(at, "server") == "sim-a"  # the URL now says what is shown


# -- GPUs ------------------------------------------------------------------------------------------------------

@pytest.mark.timeout(240)
def test_gpus_link_sets_the_history_range_and_metric_and_the_page_writes_them_back(workspace):
    at = _page("app_pages/gpus.py", {"range": "6 h", "metric": "Power (W)"})
    assert at.session_state["gpu-hist-range"] == "6 h"
    assert at.selectbox(key="gpu-hist-field").value == "Power (W)"
    assert (_param(at, "range"), _param(at, "metric")) == ("6 h", "Power (W)")
    at.selectbox(key="gpu-hist-field").select("Temperature (°C)").run()
    assert not at.exception, at.exception
    assert _param(at, "metric") == "Temperature (°C)"
    at.selectbox(key="gpu-hist-field").select("Utilisation (%)").run()  # the default: left out of the URL
    assert _param(at, "metric") is None and _param(at, "range") == "6 h"


@pytest.mark.timeout(240)
def test_gpus_link_with_unknown_values_is_ignored_with_a_note(workspace):
    at = _page("app_pages/gpus.py", {"range": "3 weeks", "metric": "Fan speed", "node": "elsewhere"})
    text = _captions(at)
    assert "From the link" in text and "ignored" in text
    assert "range=3 weeks" in text and "metric=Fan speed" in text and "node=elsewhere" in text
    assert at.session_state["gpu-hist-range"] == "15 m"
    assert at.selectbox(key="gpu-hist-field").value == "Utilisation (%)"
    assert _param(at, "range") is None and _param(at, "metric") is None


# -- Processes -------------------------------------------------------------------------------------------------

@pytest.mark.timeout(240)
def test_processes_link_selects_the_process_and_the_page_writes_the_choice(workspace):
    at = _page("app_pages/processes.py", {"process": "beta"})
    assert at.selectbox(key="proc-selected").value == "beta"
    assert any("Log · beta" in str(h.value) for h in at.subheader)
    assert _param(at, "process") == "beta"
    at.selectbox(key="proc-selected").select("sim-b").run()
    assert not at.exception, at.exception
    assert _param(at, "process") == "sim-b"
    assert any("Log · sim-b" in str(h.value) for h in at.subheader)


@pytest.mark.timeout(240)
def test_processes_link_with_an_unknown_process_is_ignored_with_a_note(workspace):
    at = _page("app_pages/processes.py", {"process": "ghost"})
    text = _captions(at)
    assert "From the link" in text and "process=ghost" in text and "ignored" in text
    assert at.selectbox(key="proc-selected").value == "alpha"
    assert _param(at, "process") == "alpha"
