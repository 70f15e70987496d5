"""AppTest of the Servers page against a real runtime and a simulated server."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from backend import runtime as runtime_mod
from tests.helpers import close_runtime, free_port, shown_text
from tests.simws import make_models

REPO = Path(__file__).resolve().parents[2]
PAGE = str(REPO / "app_pages" / "servers.py")


def _workspace(root: Path, algorithm: str | None) -> None:
    target, draft = make_models(root / "m", draft="draft")
    server = ""
    if algorithm:
        server = f"""
[[server]]
name = "sim"
model_path = "{target}"
port = {free_port()}
simulate = true
sglang_version = "0.5.10"
decode_log_interval = 5
baseline_tok_s = 90.0
env = {{ SPECDECK_SIM_SPEED = "100", SPECDECK_SIM_TRAFFIC = "2" }}

[server.speculative]
algorithm = "{algorithm}"
draft_model_path = "{draft}"
num_steps = 3
eagle_topk = 1
num_draft_tokens = 4
"""
    (root / "specdeck.toml").write_text('[workspace]\nname = "page"\n\n[telemetry]\nsource = "fake"\n' + server)


@pytest.fixture
def make_ws(tmp_path, monkeypatch):
    def make(algorithm):
        _workspace(tmp_path, algorithm)
        monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
        return tmp_path

    yield make
    close_runtime(tmp_path, source="teardown")


def _texts(at: AppTest) -> str:
    parts = [e.value for e in at.error] + [e.value for e in at.info] + [e.value for e in at.markdown]
    parts += [e.value for e in at.warning] + [e.value for e in at.success] + [str(e.value) for e in at.caption]
    return "\n".join(str(p) for p in parts)


@pytest.mark.timeout(60)
def test_empty_workspace_says_what_to_do(make_ws):
    make_ws(None)
    at = AppTest.from_file(PAGE, default_timeout=30).run()
    assert not at.exception
    assert "No server yet" in _texts(at)


@pytest.mark.timeout(180)
def test_page_shows_preflight_error_then_the_alert_of_the_eagle_mistake(make_ws):
    make_ws("EAGLE")
    at = AppTest.from_file(PAGE, default_timeout=30).run()
    assert not at.exception, at.exception
    text = _texts(at)
    assert "1 error(s)" in text
    frames = [t.value for t in at.table]
    found = " ".join(" ".join(map(str, f["found"].tolist())) for f in frames if "found" in f.columns)
    assert "EAGLE3" in found and "12288" in found and "accept_len will sit at 1.0" in found
    # the error's words in full, outside any table cell
    assert any("accept_len will sit at 1.0" in e.value and "**Fix:**" in e.value for e in at.error)

    rt = runtime_mod.get_runtime()
    rt.start("sim", actor="tester", source="test", force=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        if rt.fleet.snapshot("sim").alert is not None and rt.supervisor.view("sim").state.value == "RUNNING":
            break
        time.sleep(0.2)
    at.run()
    assert not at.exception, at.exception
    text = _texts(at)
    assert "not accepting any draft tokens" in text and "EAGLE3" in text
    status = [m.value for m in at.markdown if "sglang " in m.value and "speculation" in m.value]
    assert status and status[0].startswith(":green[● RUNNING]")  # one badge, not "RUNNING" and "ready"
    assert "ready" not in status[0] and "not answering" not in status[0]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["accept_len"] == "1.00"
    assert float(metrics["aggregate tok/s"].replace(",", "")) > 0  # a reading, one decimal, never N/A once decoding


@pytest.mark.timeout(180)
def test_launch_dialog_needs_launch_anyway_then_stop_asks_first(make_ws):
    from state import audit

    make_ws("EAGLE")
    rt = runtime_mod.get_runtime()
    at = AppTest.from_file(PAGE, default_timeout=30).run()
    at.button(key="srv-launch").click().run()
    assert not at.exception, at.exception
    go = at.button(key="srv-launch-go")
    assert go.disabled  # preflight errors block the launch...
    # ...and the panel shows them in full (the page's own preflight section shows them once more)
    full = [e.value for e in at.error if "accept_len will sit at 1.0" in e.value and "**Fix:**" in e.value]
    assert len(full) == 2, full
    assert "Launch anyway" in at.checkbox(key="srv-anyway").label
    at.checkbox(key="srv-anyway").check().run()
    at.button(key="srv-launch-go").click().run()  # ...until "launch anyway" is ticked
    assert not at.exception, at.exception
    assert rt.supervisor.view("sim").state.value in ("STARTING", "RUNNING")
    actions = [(e.action, e.actor != "", e.source) for e in audit.recent(rt.store, target="sim")]
    assert ("launch-anyway", True, "dashboard") in actions

    deadline = time.time() + 60
    while rt.supervisor.view("sim").state.value != "RUNNING" and time.time() < deadline:
        time.sleep(0.2)
    at.run()
    at.button(key="srv-stop").click().run()
    assert rt.supervisor.view("sim").state.value == "RUNNING"  # a confirmation first
    at.button(key="srv-confirm-stop-yes").click().run()
    assert not at.exception, at.exception
    deadline = time.time() + 60
    while rt.supervisor.view("sim").state.value != "EXITED" and time.time() < deadline:
        rt.supervisor.poll()
        time.sleep(0.2)
    assert rt.supervisor.view("sim").state.value == "EXITED"


@pytest.mark.timeout(60)
def test_run_preflight_button_checks_again(make_ws):
    make_ws("EAGLE3")
    at = AppTest.from_file(PAGE, default_timeout=30).run()
    first = at.session_state["srv-preflight-sim"][0]
    time.sleep(0.05)
    at.button(key="srv-run-preflight").click().run()
    assert not at.exception, at.exception
    assert at.session_state["srv-preflight-sim"][0] > first
    assert any("0 error(s)" in e.value for e in at.success)


@pytest.mark.timeout(60)
def test_launch_panel_cancel_closes_it_without_launching(make_ws):
    make_ws("EAGLE3")
    rt = runtime_mod.get_runtime()
    at = AppTest.from_file(PAGE, default_timeout=30).run()
    at.button(key="srv-launch").click().run()
    assert any(b.key == "srv-launch-go" for b in at.button)
    at.button(key="srv-launch-cancel").click().run()
    assert not at.exception, at.exception
    assert not any(b.key == "srv-launch-go" for b in at.button)
    assert rt.supervisor.view("sim").state.value == "NEVER"


@pytest.mark.timeout(120)
def test_server_log_hides_the_dashboards_own_probe_requests_until_asked(make_ws):
    make_ws("EAGLE3")
    rt = runtime_mod.get_runtime()
    rt.start("sim", actor="tester", source="test", force=True)
    log = Path(rt.fleet.log_path("sim"))
    deadline = time.time() + 60
    while time.time() < deadline:  # the monitor's and the readiness probe's requests reach the log
        if log.exists() and log.read_text(errors="replace").count('"GET /health HTTP/1.1" 200') >= 2:
            break
        time.sleep(0.2)
    at = AppTest.from_file(PAGE, default_timeout=30).run()
    assert not at.exception, at.exception
    at.session_state["srv-log-probes-earlier"] = True  # "Earlier lines" open: every line read is on the page
    at.run()
    assert not at.exception, at.exception
    shown = "\n".join(shown_text(at))
    assert '"GET /health HTTP/1.1" 200' not in shown
    assert any("probe request line(s) hidden" in c.value and "newest line written" in c.value for c in at.caption)
    at.toggle(key="srv-log-probes").set_value(True).run()
    shown = "\n".join(shown_text(at))
    assert '"GET /health HTTP/1.1" 200' in shown


@pytest.mark.timeout(60)
def test_launch_config_json_is_built_only_while_its_expander_is_open(make_ws):
    make_ws("EAGLE3")
    at = AppTest.from_file(PAGE, default_timeout=30).run()
    assert not at.exception, at.exception
    assert "Launch command to copy, and config (from the workspace file)" in [e.label for e in at.expander]
    assert not at.json  # closed: no JSON viewer sent to the browser
    assert not [c for c in at.code if "sglang" in c.value]  # nor the code block (the command is shown as text)
    assert any("--speculative-algorithm EAGLE3" in t for t in shown_text(at))
    at.session_state["srv-config-open"] = True  # what opening it does (the page runs again)
    at.run()
    assert not at.exception, at.exception
    assert len(at.json) == 1 and '"EAGLE3"' in at.json[0].value
    assert [c for c in at.code if "--speculative-algorithm EAGLE3" in c.value]  # the command with its copy button
