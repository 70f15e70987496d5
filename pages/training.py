"""Training: a SpecForge draft's live curves per TTT position, the accept length they predict beside the one
benchmarks measured, its checkpoints, and the runs of the workspace."""

from __future__ import annotations

from ui.context import require_frame  # first: a page run without the frame goes to it before the imports below

require_frame(__file__)

import streamlit as st

from ui.train import runs as train_runs

from ui.train import form as train_form

from ui.train import curves as train_curves

from ui.train import control as train_control

from ui.train import ckpt as train_ckpt
from ui.train import cost as train_cost
from ui.components import page_header
from ui.train.deploy import deploy_panel
from ui.context import runtime
from ui.overview_query import QueryState

TAB_KEY = "train-tab"
SECTION_NAMES = ("Curves", "Checkpoints", "Deploy", "Run")  # the tabs, in order (SECTIONS below)

rt = runtime()

page_header("Training", "SpecForge draft training: live loss, acc_i and acceptance_rate_i per TTT position, the "
            "accept length they predict beside the one benchmarks measured, and the run's checkpoints.")

runs = train_runs.known_runs(rt)
with st.expander("New training run", expanded=not runs, icon=":material/add:"):
    train_form.run_form(rt)
with st.expander("Follow a training log (a run started elsewhere)", icon=":material/visibility:"):
    train_runs.follow_form(rt)
if not runs:
    st.info("No training run yet: add one above (it is written to the workspace file as a `[[train]]` entry), "
            "or follow the log of a run started elsewhere.", icon=":material/info:")
    st.stop()

names = list(runs)
# the run, the overlaid runs and the tab are in the URL's query (?run=NAME&overlay=A&tab=Checkpoints): a view
# can be reloaded and shared; a value that is not a run or tab here is ignored with a note
query = QueryState("training")
query.take("run", "train-run", names, what="training run")
query.take("overlay", "train-overlay", names, multi=True, what="training run")
wanted = st.session_state.pop("train-run-wanted", None)
if wanted in names:
    st.session_state["train-run"] = wanted
if st.session_state.get("train-run") not in names:
    st.session_state["train-run"] = names[-1]
if st.session_state.get("train-overlay"):  # never the chosen run itself
    st.session_state["train-overlay"] = [n for n in st.session_state["train-overlay"]
                                         if n in names and n != st.session_state["train-run"]]
query.take("tab", TAB_KEY, SECTION_NAMES, what="tab")  # into the tabs' state: their default stays the same
query.show_notes()
left, right = st.columns([2, 3])
name = left.selectbox("Run", names, key="train-run")
overlay = right.multiselect("Overlay runs", [n for n in names if n != name], key="train-overlay",
                            help="their curves drawn with this run's, a colour per run")
query.put("run", name)
query.put("overlay", overlay)
run = runs[name]
if run.source == "workspace":
    train_control.run_controls(rt, name)
    train_cost.cost_caption(rt, name)

SECTIONS = {
    "Curves": lambda: train_curves.live_curves(rt, [run] + [runs[n] for n in overlay], train_curves.controls()),
    "Checkpoints": lambda: train_ckpt.checkpoints_tab(rt, run),
    "Deploy": lambda: deploy_panel(rt, run.name, train_ckpt.deploy_target(run)),
    "Run": lambda: train_runs.run_tab(rt, run),
}
# switching tabs runs the page again, to write the tab into the URL
tabs = st.tabs(list(SECTIONS), key=TAB_KEY, on_change="rerun")
query.put("tab", st.session_state.get(TAB_KEY), default=SECTION_NAMES[0])  # before the tabs' content, which may stop the run
for tab, render in zip(tabs, SECTIONS.values()):
    with tab:
        render()
