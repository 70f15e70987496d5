"""Training: a SpecForge draft's live curves per TTT position, the accept length they predict beside the one
benchmarks measured, its checkpoints, and the runs of the workspace."""

from __future__ import annotations

import streamlit as st

from ui.train import runs as train_runs

from ui.train import form as train_form

from ui.train import curves as train_curves

from ui.train import control as train_control

from ui.train import ckpt as train_ckpt
from ui.train import cost as train_cost
from ui.components import open_expander, page_header
from ui.overview_train import focus_run
from ui.train.deploy import deploy_panel
from ui.context import runtime
from ui.overview_query import QueryState

TAB_KEY = "train-tab"
SECTION_NAMES = ("Curves", "Checkpoints", "Deploy", "Run")  # the tabs, in order (SECTIONS below)

rt = runtime()

page_header("Training", "SpecForge draft training: live loss, acc_i and acceptance_rate_i per TTT position, the "
            "accept length they predict beside the one benchmarks measured, and the run's checkpoints.")

runs = train_runs.known_runs(rt)
# the two forms are built only while their expander is open (opening one runs the page again): their dozens of
# fields are not drawn behind closed expanders before the page's charts
if (box := open_expander("New training run", key="train-new-open", expanded=not runs,
                         icon=":material/add:")) is not None:
    with box:
        train_form.run_form(rt)
if (box := open_expander("Follow a training log (a run started elsewhere)", key="train-follow-open",
                         icon=":material/visibility:")) is not None:
    with box:
        train_runs.follow_form(rt)
if not runs:
    st.info("No training run yet: add one above (it is written to the workspace file as a `[[train]]` entry), "
            "or follow the log of a run started elsewhere.", icon=":material/info:")
    st.stop()

names = list(runs)


def _first_run(names: list[str]) -> str:
    """A first visit's run: the one the Overview shows where it is running or has a log (a running run, else the
    one whose log was written last), not a run that never started; else the newest entry."""
    focus = focus_run(rt)
    if focus in names:
        view = rt.supervisor.view(focus)
        try:
            logged = rt.train.log_path(focus).exists()
        except (OSError, KeyError, ValueError):
            logged = False
        if (view is not None and view.live) or logged:
            return focus
    return names[-1]

# the run, the overlaid runs (and paths) and the tab are in the URL's query (?run=NAME&overlay=A&overlay_path=
# /runs/b&tab=Checkpoints): a view can be reloaded and shared; a value that is not a run or tab here is ignored
# with a note
query = QueryState("training")
query.take("overlay_path", train_runs.OVERLAY_PATHS, st.query_params.get_all("overlay_path"), multi=True,
           what="path")
by_path, path_labels, path_problems = train_runs.path_overlays(rt, train_runs.overlay_paths(), set(names))
query.take("run", "train-run", names, what="training run")
query.take("overlay", "train-overlay", names + list(by_path), multi=True, what="training run")
wanted = st.session_state.pop("train-run-wanted", None)
if wanted in names:
    st.session_state["train-run"] = wanted
if st.session_state.get("train-run") not in names:
    st.session_state["train-run"] = _first_run(names)
new_paths = [n for n in by_path if n not in st.session_state.get("train-overlay-offered", [])]
st.session_state["train-overlay-offered"] = list(by_path)
if new_paths:  # a path just added is drawn at once
    st.session_state["train-overlay"] = list(st.session_state.get("train-overlay") or []) + new_paths
if st.session_state.get("train-overlay"):  # never the chosen run itself
    st.session_state["train-overlay"] = [n for n in st.session_state["train-overlay"]
                                         if (n in names or n in by_path) and n != st.session_state["train-run"]]
query.take("tab", TAB_KEY, SECTION_NAMES, what="tab")  # into the tabs' state: their default stays the same
query.show_notes()
# the path column is the widest: at 1024 px its field and Overlay button must share one row (in a column of
# 3/8 the button fell under the field)
left, mid, right = st.columns([2, 3, 4], vertical_alignment="bottom")
name = left.selectbox("Run", names, key="train-run")
overlay = mid.multiselect("Overlay runs", [n for n in names if n != name] + list(by_path), key="train-overlay",
                          help="their curves drawn with this run's, a colour per run (runs of this workspace, "
                               "logs followed, and logs added by path)")
with right:
    train_runs.overlay_path_input(rt)
# a path that gave no log, or whose every log was taken off the overlay, is dropped (and leaves the URL)
st.session_state[train_runs.OVERLAY_PATHS] = [t for t in train_runs.overlay_paths()
                                              if any(n in overlay for n in path_labels.get(t, ()))]
for line in path_problems:
    st.caption(f":orange[⚠ Not overlaid: {line}]")
query.put("run", name)
query.put("overlay", [n for n in overlay if n in names])
query.put("overlay_path", train_runs.overlay_paths())
run = runs[name]
if run.source == "workspace":
    train_control.run_controls(rt, name)
    train_cost.cost_caption(rt, name)

SECTIONS = {
    "Curves": lambda: train_curves.live_curves(rt, [run] + [runs.get(n) or by_path[n] for n in overlay],
                                               train_curves.controls()),
    "Checkpoints": lambda: train_ckpt.checkpoints_tab(rt, run),
    "Deploy": lambda: (train_ckpt.follow_for_deploy(run), deploy_panel(rt, run.name, train_ckpt.deploy_target(run))),
    "Run": lambda: train_runs.run_tab(rt, run),
}
# switching tabs runs the page again, to write the tab into the URL
tabs = st.tabs(list(SECTIONS), key=TAB_KEY, on_change="rerun")
query.put("tab", st.session_state.get(TAB_KEY), default=SECTION_NAMES[0])  # before the tabs' content, which may stop the run
ALWAYS_BUILT = {"Run"}  # its edit form keeps what was typed but not yet reviewed only while it is drawn
for label, tab, render in zip(SECTIONS, tabs, SECTIONS.values()):
    # the other tabs are built only while open (choosing a tab runs the page again): the curves are not drawn
    # behind another tab, nor the checkpoints' table and the deploy form behind the curves.  Their fields
    # (smoothing, axis, draft steps, the deploy form) keep their values while their tab is not built
    # (persist_state="session").
    if label not in ALWAYS_BUILT and not tab.open:
        if label == "Deploy":
            train_ckpt.not_deploying(run)
        continue
    with tab:
        render()
