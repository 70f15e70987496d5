"""The Training page's state in the URL's query (run, overlaid runs, tab: a view survives a reload and can be
shared), bad values ignored with a note; and the run's cost beside its controls, N/A with why when unknown."""

from __future__ import annotations

import sys

import pytest
from streamlit.testing.v1 import AppTest

from tests.helpers import REPO, close_runtime


def _train(name: str, root, gpus: str = "") -> str:
    return f"""
[[train]]
name = "{name}"
python = "{sys.executable}"
generation = "gen2"
entry = "module:backend.flows.tiny train"
target_model = "{root / 'target'}"
train_data = "{root / 'data.jsonl'}"
{gpus}
"""


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    (tmp_path / "specdeck.toml").write_text('[workspace]\nname = "train-query"\n'
                                            + _train("alpha", tmp_path, "gpus = [0, 1]") + _train("beta", tmp_path))
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
    yield tmp_path
    close_runtime(tmp_path)


def _page(query: dict | None = None) -> AppTest:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=90).run()
    for k, v in (query or {}).items():
        at.query_params[k] = v
    at.switch_page("app_pages/training.py")
    at.run()
    assert not at.exception, at.exception
    return at


def _captions(at: AppTest) -> str:
    return "\n".join(str(c.value) for c in at.caption)


@pytest.mark.timeout(240)
def test_run_overlay_and_tab_come_from_the_link_and_go_back_into_it(workspace):
    at = _page({"run": "alpha", "overlay": "beta", "tab": "Checkpoints"})
    assert at.selectbox(key="train-run").value == "alpha"
    assert at.multiselect(key="train-overlay").value == ["beta"]
    assert at.session_state["train-tab"] == "Checkpoints"
    assert at.query_params["run"] in ("alpha", ["alpha"]) and at.query_params["tab"] in ("Checkpoints", ["Checkpoints"])
    # the user's choice afterwards is the page's, and the URL follows it
    at.selectbox(key="train-run").select("beta").run()
    assert not at.exception, at.exception
    assert at.selectbox(key="train-run").value == "beta"
    assert at.query_params["run"] in ("beta", ["beta"])
    assert at.multiselect(key="train-overlay").value == []  # never the chosen run itself


@pytest.mark.timeout(240)
def test_bad_values_are_ignored_with_a_note_and_the_cost_says_why_it_is_unknown(workspace):
    at = _page({"run": "no-such-run", "tab": "Nowhere", "overlay": ["beta", "ghost"]})
    text = _captions(at)
    assert "run=no-such-run" in text and "tab=Nowhere" in text and "ghost" in text and "ignored" in text
    assert at.selectbox(key="train-run").value == "beta"  # the newest, as without a link
    assert at.session_state["train-tab"] in (None, "Curves")
    # never started: its cost is N/A (why on hover), never 0
    cost = next(c for c in at.caption if "Cost of this run" in str(c.value))
    assert "N/A" in str(cost.value) and "0.00" not in str(cost.value)
    assert "not started" in (cost.proto.help or "")


@pytest.mark.timeout(240)
def test_a_first_visit_opens_the_run_with_a_log_not_a_run_never_started(workspace):
    """Without a link the page opens the run the Overview shows: one with a log (beta never started, alpha wrote
    its log), not the newest entry, whose curves would be an empty 'no log yet'."""
    from backend import runtime as runtime_mod
    from backend.flows.workspace import load_workspace

    rt = runtime_mod.Runtime(load_workspace(workspace), background=False)
    try:
        log = rt.train.log_path("alpha")
    finally:
        rt.close()
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("Training Epoch 0:   1%|          | 1/100 [00:01<01:39,  1.00it/s, loss=5.0]\n")
    at = _page()
    assert at.selectbox(key="train-run").value == "alpha"
    at.selectbox(key="train-run").select("beta").run()  # the user's choice stays
    assert at.selectbox(key="train-run").value == "beta"
