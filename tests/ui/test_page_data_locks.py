"""AppTests of the pages as a browser from the network sees them.

A signed-in viewer's widgets that read a typed path or run a program are disabled; and where a page
draws one enabled anyway (the lock read before the session changed, a page's mistake), what the
viewer sends reaches the backend, which refuses it: nothing is read or run, and the refusal is
audited with the user and the address.
An anonymous browser of a workspace with ``[access] anonymous_view = true`` sees figures and states
but no log line, command line, prompt or answer.  A model's answer that holds an image shows it as
text.  The browser's request is a stand-in for ``ui.auth.caller`` (AppTest has no network peer).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from backend import runtime as runtime_mod
from backend.auth import Caller
from backend.sim.models import make_draft_dir, make_target_dir
from state import audit
from tests.helpers import close_runtime, free_port, printed, wait_for
from tests.regen.regen_fixtures import append, in_row, out_row, snap
from tests.train.page_kit import gen2_log

REPO = Path(__file__).resolve().parents[2]
CLIENT = "10.0.0.9"
PASSWORD = "correct-horse-battery"
LOG_LINE = "LOGLINE-7f3"
ARGV_MARK = "ARGV-9c1"
SERVER_LINE = "SRVLINE-3b8"
PROMPT, ANSWER = "PROMPT-5e2 what is two and two?", "ANSWER-5e2 it is four"
EVIL = "http://evil.example/t.png"


def _workspace(root: Path, *, anonymous_view: bool) -> None:
    target = make_target_dir(root / "models" / "target")
    draft = make_draft_dir(root / "models" / "draft")
    code = "import time; print('LOG' 'LINE-7f3', flush=True); time.sleep(60)"
    (root / "specdeck.toml").write_text(f"""
[workspace]
name = "locks"

[telemetry]
source = "fake"

[access]
anonymous_view = {str(anonymous_view).lower()}

[[process]]
name = "ticker"
argv = ["{sys.executable}", "-c", "{code}", "{ARGV_MARK}"]
autostart = true
stop_grace_s = 5

[[server]]
name = "sim"
model_path = "{target}"
port = {free_port()}
simulate = true

[server.speculative]
algorithm = "EAGLE3"
draft_model_path = "{draft}"
""")


def _regen_run(root: Path, answer: str = ANSWER, reasoning: str | None = None) -> Path:
    reg = root / "outputs" / "regen"
    reg.mkdir(parents=True, exist_ok=True)
    out = reg / "code.jsonl"
    row = out_row("q1", answer, prompt=PROMPT)
    if reasoning is not None:
        row["conversations"][-1]["reasoning_content"] = reasoning
    append(out, row)
    (root / "prompts.jsonl").write_text(json.dumps(in_row("q1", PROMPT, "ORIGINAL-5e2 four")) + "\n")
    (reg / "code.job.json").write_text(json.dumps({
        "out": str(out), "servers": [], "inputs": [str(root / "prompts.jsonl")], "root": str(root)}))
    now = time.time()
    append(reg / "code.progress.jsonl", snap(now - 5, 1, total=2, state="done",
                                             errors={"bad_request": {"count": 1, "example": f"HTTP 400 {PROMPT}"}}))
    return out


@pytest.fixture
def ws(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
    yield tmp_path
    close_runtime(tmp_path)


def _as(monkeypatch, caller: Caller) -> None:
    """The browser's request as the backend sees it (without this: this host, no server: local)."""
    monkeypatch.setattr("ui.auth.caller", lambda: caller)


def _viewer(rt) -> Caller:
    rt.auth.users.add("vera", PASSWORD, role="viewer")
    token = rt.auth.login(Caller("0.0.0.0", CLIENT), "vera", PASSWORD).token
    return Caller("0.0.0.0", CLIENT, token=token)


def _open(page: str) -> AppTest:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
    at.run()
    at.switch_page(page)
    at.run()
    assert not at.exception, at.exception
    return at


def _unlocked_page(monkeypatch, *modules) -> None:
    """The page draws its controls as if this session could act (the backend still knows better)."""
    import ui.auth

    for m in (ui.auth, *modules):
        monkeypatch.setattr(m, "control_lock", lambda rt=None: "")


def _everything(at: AppTest) -> str:
    """Every element the page drew, as the protos sent to the browser (tables' bytes included)."""
    parts: list[str] = []

    def walk(node) -> None:
        proto = getattr(node, "proto", None)
        if proto is not None:
            parts.append(str(proto))
        for child in (getattr(node, "children", None) or {}).values():
            walk(child)

    walk(at._tree)
    return "\n".join(parts)


def _refused(rt, action: str, actor: str = "vera") -> list:
    return [e for e in audit.recent(rt.store, limit=50)
            if (e.action, e.outcome, e.actor, e.client) == (action, "refused", actor, CLIENT)]


# -- a viewer: nothing read, nothing run -----------------------------------------------------------

@pytest.mark.timeout(120)
def test_a_viewer_cannot_follow_a_training_log_by_path(ws, monkeypatch):
    _workspace(ws, anonymous_view=False)
    log = ws / "train.log"
    log.write_text(gen2_log(), encoding="utf-8")
    rt = runtime_mod.get_runtime()
    read = []
    import ui.train.curves
    real = ui.train.curves.follower
    monkeypatch.setattr(ui.train.curves, "follower", lambda *a, **k: read.append(a) or real(*a, **k))
    _as(monkeypatch, _viewer(rt))
    at = _open("app_pages/training.py")
    at.session_state["train-follow-open"] = True  # the follow form is built while its expander is open
    at.run()
    follow = next(b for b in at.button if b.label == "Follow")
    assert follow.disabled and "viewer" in follow.help and at.text_input(key="train-follow-log").disabled
    import ui.train.runs
    _unlocked_page(monkeypatch, ui.train.runs)
    at = _open("app_pages/training.py")
    at.session_state["train-follow-open"] = True
    at.run()
    at.text_input(key="train-follow-log").input(str(log))
    next(b for b in at.button if b.label == "Follow").click()
    at.run()
    assert not at.exception, at.exception
    assert any("viewer" in e.value for e in at.error)
    assert read == [] and not [m for m in at.metric if m.label == "step"]  # the log was never read
    assert [e.target for e in _refused(rt, "read")] == [str(log)]


@pytest.mark.timeout(120)
def test_a_viewer_cannot_follow_a_specforge_run_by_path(ws, monkeypatch):
    _workspace(ws, anonymous_view=False)
    inp, out = ws / "sf_in.jsonl", ws / "sf_out.jsonl"
    inp.write_text(json.dumps(in_row("q0", "p", "a")) + "\n")
    append(out, {**in_row("q0", "p", "new"), "status": "success"})
    rt = runtime_mod.get_runtime()
    followed = []
    import ui.regen.live
    monkeypatch.setattr(ui.regen.live, "specforge_follower", lambda *a: followed.append(a))
    _as(monkeypatch, _viewer(rt))
    at = _open("app_pages/regeneration.py")
    at.segmented_control(key="regen-mode").set_value("SpecForge's regenerate_train_data.py").run()
    assert at.text_input(key="regen-sf-in").disabled and at.text_input(key="regen-sf-out").disabled
    _unlocked_page(monkeypatch)
    at.run()
    at.text_input(key="regen-sf-in").input(str(inp))
    at.text_input(key="regen-sf-out").input(str(out)).run()
    assert not at.exception, at.exception
    assert followed == [] and not at.metric
    assert any("viewer" in e.value for e in at.error)
    assert _refused(rt, "read")


@pytest.mark.timeout(120)
def test_a_viewer_cannot_ask_for_a_pcie_read(ws, monkeypatch):
    _workspace(ws, anonymous_view=False)
    rt = runtime_mod.get_runtime()
    rt.telemetry.sample_once()
    asked = []
    monkeypatch.setattr(rt.telemetry, "request_slow", lambda **k: asked.append(k))
    _as(monkeypatch, _viewer(rt))
    at = _open("app_pages/gpus.py")
    button = at.button(key="gpu-pcie-read")
    assert button.disabled and "viewer" in button.help
    _unlocked_page(monkeypatch)
    at.run()
    at.button(key="gpu-pcie-read").click().run()
    assert not at.exception, at.exception
    assert asked == []
    assert _refused(rt, "read-pcie")
    assert any("PCIe throughput was not read" in e.value for e in at.error)


@pytest.mark.timeout(120)
def test_a_viewer_runs_no_preflight_of_a_server(ws, monkeypatch):
    _workspace(ws, anonymous_view=False)
    rt = runtime_mod.get_runtime()
    ran = []
    monkeypatch.setattr(rt.fleet, "preflight", lambda *a, **k: ran.append(a) or [])
    monkeypatch.setattr(rt.fleet, "warm_parser", lambda name: ran.append(("warm", name)))
    _as(monkeypatch, _viewer(rt))
    at = _open("app_pages/servers.py")
    assert at.button(key="srv-run-preflight").disabled
    assert ran == []  # not run on the first visit either
    _unlocked_page(monkeypatch)
    at.run()  # the page's first visit now runs preflight: refused
    at.button(key="srv-run-preflight").click().run()
    assert not at.exception, at.exception
    assert [r for r in ran if r[0] != "warm"] == []
    assert _refused(rt, "preflight")


# -- anonymous viewing: figures and states, no data ------------------------------------------------

def _ready(rt) -> None:
    wait_for(lambda: printed(rt.workspace.log_path("ticker"), LOG_LINE), 30, "the process's log line")
    log = rt.fleet.log_path("sim")
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text(f"[2026-01-01 10:00:00] {SERVER_LINE} loading the weights\n")

    def read() -> bool:
        rt.fleet.monitor("sim").refresh(http=False)
        return any(SERVER_LINE in line for line in rt.fleet.snapshot("sim").log_tail)

    wait_for(read, 20, "the server's log line")


@pytest.mark.timeout(180)
def test_anonymous_viewing_shows_no_log_line_command_line_or_audit(ws, monkeypatch):
    _workspace(ws, anonymous_view=True)
    rt = runtime_mod.get_runtime()
    _ready(rt)
    # this host sees them all (so the checks below look where they would be)
    at = _open("app_pages/processes.py")
    at.selectbox(key="proc-selected").set_value("ticker").run()
    local = _everything(at)
    assert LOG_LINE in local and ARGV_MARK in local and "Download audit log" in local
    assert SERVER_LINE in _everything(_open("app_pages/servers.py"))

    _as(monkeypatch, Caller("0.0.0.0", CLIENT))
    at = _open("app_pages/processes.py")
    at.selectbox(key="proc-selected").set_value("ticker").run()
    seen = _everything(at)
    assert "RUNNING" in seen  # states stay
    assert LOG_LINE not in seen and ARGV_MARK not in seen
    assert not [b for b in at.get("download_button")] and "Audit log" in [s.value for s in at.subheader]
    assert str(rt.workspace.log_path("ticker")) not in seen
    at = _open("app_pages/servers.py")
    seen = _everything(at)
    assert SERVER_LINE not in seen and "--model-path" not in seen and "draft_model_path" not in seen
    assert any("Hidden until you sign in" in c.value for c in at.caption)


@pytest.mark.timeout(120)
def test_anonymous_viewing_shows_no_prompt_or_answer(ws, monkeypatch):
    _workspace(ws, anonymous_view=True)
    _regen_run(ws)
    runtime_mod.get_runtime()
    local = _everything(_open("app_pages/regeneration.py"))
    assert ANSWER in local and PROMPT in local and "ORIGINAL-5e2" in local

    _as(monkeypatch, Caller("0.0.0.0", CLIENT))
    at = _open("app_pages/regeneration.py")
    seen = _everything(at)
    assert "PROMPT-5e2" not in seen and "ANSWER-5e2" not in seen and "ORIGINAL-5e2" not in seen
    assert [m.value for m in at.metric if m.label == "done"] == ["1"]  # the figures stay
    assert "bad_request" in seen  # the failure's class and count, not its text


# -- an image in an answer -------------------------------------------------------------------------

@pytest.mark.timeout(120)
def test_an_image_in_an_answer_is_shown_as_text(ws):
    _workspace(ws, anonymous_view=False)
    _regen_run(ws, answer=f"Look: ![t]({EVIL}) and [![n]({EVIL})](http://example.org)",
               reasoning=f"first ![r][1]\n\n[1]: {EVIL}")
    runtime_mod.get_runtime()
    at = _open("app_pages/regeneration.py")
    shown = [m.value for m in at.markdown] + [c.value for c in at.caption] + [e.label for e in at.expander]
    assert any(f"Look: !\\[t]({EVIL})" in v for v in shown), shown
    assert any("first !\\[r][1]" in v for v in shown), shown
    for v in shown:
        assert "![" not in v, v  # no image syntax left to load
