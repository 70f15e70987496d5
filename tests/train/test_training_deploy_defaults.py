"""Training › Deploy: it offers the run's newest checkpoint and follows the run when it saves one (no reload),
defaults to a server the checkpoint passes preflight on, and says how long the benchmark will take."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from backend import runtime as runtime_mod
from backend.flows.deploy import DeployRequest
from tests.bench.sweep_kit import SERVER
from tests.train.test_deploy_flow import BASELINE_TOK_S, LOAD, hand_rows, make_ckpt, make_ws

PANEL = """
from ui.context import runtime
from ui.train.deploy import deploy_panel
deploy_panel(runtime(), {run!r}, {ckpt!r})
"""

# the Checkpoints tab and the Deploy tab of one run, as the Training page draws them; "as-live" set by the test
# makes the next run of the Checkpoints tab one of its live refreshes (the rest of the page not drawn again)
TABS = """
import streamlit as st
from pathlib import Path
from ui.context import runtime
from ui.train import ckpt
from ui.train.data import RunRef

st.session_state["runs"] = st.session_state.get("runs", 0) + 1
ckpt.fragment_run = lambda: st.session_state.pop("as-live", False)
rt = runtime()
ref = RunRef("tiny-run", None, Path({out!r}))
ckpt.checkpoints_tab(rt, ref)
st.markdown("deploying: " + str(ckpt.deploy_target(ref)))
"""


@pytest.fixture
def ws(tmp_path, monkeypatch):
    w = make_ws(tmp_path)
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(w["root"]))
    yield w
    runtime_mod.close_all()


def _big_server_first(ws, tmp_path) -> None:
    """A server on a 128-wide target, before the one the checkpoints are made for: the checkpoint fails its
    preflight there."""
    from tests.train.test_deploy_flow import make_target_dir

    big = make_target_dir(tmp_path / "models" / "big-target", hidden_size=128, num_hidden_layers=6, vocab_size=512)
    toml = ws["root"] / "specdeck.toml"
    text = toml.read_text()
    entry = (f'\n[[server]]\nname = "big"\nmodel_path = {json.dumps(str(big))}\nport = 1\nsimulate = true\n'
             '\n[server.speculative]\nalgorithm = "EAGLE3"\nnum_steps = 3\neagle_topk = 1\nnum_draft_tokens = 4\n\n')
    toml.write_text(text.replace("[[server]]", entry.lstrip("\n") + "[[server]]", 1))


def _panel(run: str, ckpt: Path) -> AppTest:
    return AppTest.from_string(PANEL.format(run=run, ckpt=str(ckpt)), default_timeout=30).run()


def test_the_server_defaults_to_one_the_checkpoint_passes_preflight_on(ws, tmp_path):
    _big_server_first(ws, tmp_path)
    assert runtime_mod.get_runtime().fleet.names()[0] == "big"
    at = _panel("tiny-run", make_ckpt(ws["runs"] / "tiny-run"))
    assert not at.exception, at.exception
    box = at.selectbox(key="train-deploy-server")
    assert box.value == SERVER
    assert "big (" in " ".join(box.options) and "preflight error(s)" in " ".join(box.options)
    assert ":green[no errors]" in "\n".join(m.value for m in at.markdown)


def test_the_benchmark_time_is_estimated_at_the_baselines_speed(ws):
    hand_rows(ws)
    at = _panel("tiny-run", make_ckpt(ws["runs"] / "tiny-run"))
    want = LOAD["num_prompts"] * LOAD["output_len"] / BASELINE_TOK_S
    from ui import fmt

    line = next(c.value for c in at.caption if "Benchmark time" in c.value)
    assert f"**Benchmark time: {fmt.duration(want)}**" in line, line
    assert f"{LOAD['num_prompts'] * LOAD['output_len']:,} output tokens" in line


def test_without_any_speed_known_the_estimate_says_so():
    from ui.train.deploy import load_estimate

    req = DeployRequest("/c", "s", concurrency=(2,), num_prompts=16, input_len=128, output_len=64,
                        measure_baseline=True)
    assert load_estimate(req, [], [], None) is None
    lo, point, hi, basis = load_estimate(req, [], [], 64.0)
    # 16 × 64 tokens twice (the baseline measured first) at 64 tok/s per request: 32 s alone, 16 s two at a time
    assert (lo, hi) == (16.0, 32.0) and lo <= point <= hi and "single-stream 64.0 tok/s" in basis


def test_a_given_load_without_a_baseline_shows_the_tokens_and_why_no_time(ws):
    at = _panel("tiny-run", make_ckpt(ws["runs"] / "tiny-run"))
    line = next(c.value for c in at.caption if "Benchmark time" in c.value)
    assert "N/A" in line and "no speed of this server is known" in line
    n, o = at.number_input(key="train-deploy-n").value, at.number_input(key="train-deploy-out").value
    assert f"{2 * n * o:,} output tokens" in line  # the baseline measured first: twice


def test_the_deploy_tab_follows_a_checkpoint_saved_after_it_was_drawn(ws):
    out = ws["runs"] / "tiny-run"
    at = AppTest.from_string(TABS.format(out=str(out)), default_timeout=30).run()
    assert not at.exception, at.exception
    assert any(m.value == "deploying: None" for m in at.markdown)
    make_ckpt(out, "epoch_0_step_20", epoch=0, step=20)
    at.session_state["as-live"] = True  # the run saved a checkpoint: the Checkpoints tab's live refresh sees it
    at.run()
    assert not at.exception, at.exception
    # the live refresh drew the whole page again, so the Deploy tab offers the new checkpoint
    assert at.session_state["runs"] == 3
    assert any(m.value == f"deploying: {out / 'epoch_0_step_20'}" for m in at.markdown)
    make_ckpt(out, "epoch_0_step_40", epoch=0, step=40)
    at.session_state["as-live"] = True
    at.run()
    assert at.session_state["runs"] == 5
    assert any(m.value == f"deploying: {out / 'epoch_0_step_40'}" for m in at.markdown)
    at.session_state["as-live"] = True  # nothing new: no second drawing
    at.run()
    assert at.session_state["runs"] == 6


# the Training page with the Checkpoints tab open first, then the Deploy tab alone (only the open tab is built)
ONE_TAB = """
import streamlit as st
from pathlib import Path
from ui.context import runtime
from ui.train import ckpt
from ui.train.data import RunRef

st.session_state["runs"] = st.session_state.get("runs", 0) + 1
ckpt.fragment_run = lambda: st.session_state.pop("as-live", False)
rt = runtime()
ref = RunRef("tiny-run", None, Path({out!r}))
if st.session_state.get("tab", "Checkpoints") == "Checkpoints":
    ckpt.checkpoints_tab(rt, ref)
    ckpt.not_deploying(ref)
else:
    ckpt.follow_for_deploy(ref)
    st.markdown("deploying: " + str(ckpt.deploy_target(ref)))
"""


def test_deploy_alone_offers_the_newest_checkpoint_saved_since_the_checkpoints_tab_was_seen(ws):
    out = ws["runs"] / "tiny-run"
    make_ckpt(out, "epoch_0_step_20", epoch=0, step=20)
    at = AppTest.from_string(ONE_TAB.format(out=str(out)), default_timeout=30).run()
    assert not at.exception, at.exception
    at.session_state["tab"] = "Deploy"
    at.run()
    assert any(m.value == f"deploying: {out / 'epoch_0_step_20'}" for m in at.markdown)
    make_ckpt(out, "epoch_0_step_40", epoch=0, step=40)  # saved while Checkpoints is not drawn
    at.run()
    assert any(m.value == f"deploying: {out / 'epoch_0_step_40'}" for m in at.markdown)
    # back on Checkpoints: its live refreshes do not draw the page again for a Deploy tab that is not there
    at.session_state["tab"] = "Checkpoints"
    at.run()
    runs = at.session_state["runs"]
    for _ in range(3):
        at.session_state["as-live"] = True
        at.run()
    assert at.session_state["runs"] == runs + 3  # one run each, no extra page runs


def test_deploy_alone_draws_the_page_again_when_the_run_saves_a_newer_checkpoint(ws):
    out = ws["runs"] / "tiny-run"
    make_ckpt(out, "epoch_0_step_20", epoch=0, step=20)
    at = AppTest.from_string(ONE_TAB.format(out=str(out)), default_timeout=30).run()
    at.session_state["tab"] = "Deploy"
    at.run()
    runs = at.session_state["runs"]
    at.session_state["as-live"] = True  # a live refresh with nothing new: no drawing of the page
    at.run()
    assert at.session_state["runs"] == runs + 1
    make_ckpt(out, "epoch_0_step_40", epoch=0, step=40)
    at.session_state["as-live"] = True  # the live part sees the newer checkpoint: the page is drawn again
    at.run()
    assert not at.exception, at.exception
    assert at.session_state["runs"] == runs + 3
    assert any(m.value == f"deploying: {out / 'epoch_0_step_40'}" for m in at.markdown)
