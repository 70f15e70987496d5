"""Regeneration: how far, how fast, when done and what went wrong; start, pause, resume, requeue, stop."""

from __future__ import annotations

import streamlit as st

from backend.regen.output import RunFiles
from ui.regen import control as regen_control
from ui.regen import live as live
from ui.auth import control_lock, data_lock, typed_path
from ui.components import open_expander, page_header
from ui.context import runtime
from ui.overview_query import QueryState

SPECDECK, SPECFORGE = "Specdeck job", "SpecForge's regenerate_train_data.py"
START_OPEN = "regen-start-open"  # the "Start a regeneration" expander below a run is open

rt = runtime()

page_header("Regeneration", "The target model answers the training prompts again: progress, speed, ETA, failures "
            "and samples of a running job, or of a run of SpecForge's own script.")

# the view and the run are in the URL's query (?job=NAME, ?view=specforge): a link opens the page on them;
# a value that names nothing here is ignored, with a note
query = QueryState("regeneration")
VIEWS = {"job": SPECDECK, "specforge": SPECFORGE}
if (v := query.take("view", "regen-view-wanted", list(VIEWS), what="view (job or specforge)")) is not None:
    st.session_state["regen-mode"] = VIEWS[v]
st.session_state.setdefault("regen-mode", SPECDECK)  # the widget's first value (a link's, else the job view)
mode = st.segmented_control("Follow", [SPECDECK, SPECFORGE], key="regen-mode") or SPECDECK
query.put("view", "specforge" if mode == SPECFORGE else None)

if mode == SPECFORGE:
    query.show_notes()
    lock = control_lock(rt)  # reading files by a typed path: an operator's action
    a, b, c = st.columns([3, 3, 1])
    inp = a.text_input("Its --input-file-path", key="regen-sf-in",
                       persist_state="session", disabled=bool(lock), help=lock or None)
    out = b.text_input("Its --output-file-path (.jsonl)", key="regen-sf-out",
                       persist_state="session", disabled=bool(lock), help=lock or None)
    stall_min = c.number_input("Stall after (min)", 1.0, 1440.0, 10.0, key="regen-sf-stall", persist_state="session")
    if not (inp and out):
        st.info("Give the input and output paths of a `regenerate_train_data.py` run: its progress is read from "
                "the output, _error and _skipped files it writes.", icon=":material/info:")
        st.stop()
    if not out.strip().endswith(".jsonl"):
        st.error("SpecForge's output path ends in .jsonl.")
        st.stop()
    # each run of the page asks again (the session may have ended); a path read again is audited once
    inp_path = typed_path(rt, inp)
    out_path = typed_path(rt, out) if inp_path is not None else None
    if inp_path is None or out_path is None:
        st.stop()
    # the _error and _skipped files beside the output are read too: a symlink there must not lead out
    sides = RunFiles.of(out_path)
    if any(typed_path(rt, str(side)) is None for side in (sides.error, sides.skipped)):
        st.stop()
    live.live_specforge(str(inp_path), str(out_path), stall_min, rt)
    live.sample_viewer(str(out_path), [{"dataset": None, "file": inp_path, "first_turn_only": False,
                                        "max_prompt_chars": None}], key="sf", rt=rt)
    st.stop()

runs = live.known_runs(rt)
by_name = {name: out for out, name in runs.items()}
linked = query.take("job", "regen-job-wanted", list(by_name), what="regeneration run")
query.show_notes()
if not runs:
    with st.expander("Start a regeneration", expanded=True, icon=":material/add:"):
        regen_control.start_form(rt)
    st.info("No regeneration yet in this workspace: start one above, or from a terminal with "
            "`python -m backend.cli regen run --mix NAME --server NAME --out PATH`.", icon=":material/info:")
    st.stop()
outs = list(runs)
wanted = st.session_state.pop("regen-run-wanted", None)
if wanted in outs:  # just started from the form: show it
    st.session_state["regen-run"] = wanted
elif linked is not None:  # opened from a link (?job=NAME)
    st.session_state["regen-run"] = by_name[linked]
if st.session_state.get("regen-run") not in outs:
    st.session_state["regen-run"] = outs[-1]
paths_hidden = bool(data_lock(rt))  # the outputs' paths: for sessions that may see the workspace's paths
chosen = st.selectbox("Run", outs, format_func=lambda o: runs[o] if paths_hidden else f"{runs[o]} · {o}",
                      key="regen-run")
query.put("job", runs[chosen])
# the run's state, its Pause / Resume / Stop and its ETA come first: in the first screen at 1024x768
live.live_job(rt, chosen, controls=regen_control.job_controls)
live.sample_viewer(chosen, None, key="regen-sample", rt=rt)
# below a run, closed: its form is built only while it is open (opening it runs the page again), so a visit
# draws the run's figures without a hidden form of a dozen fields
start_box = open_expander("Start a regeneration", key=START_OPEN, icon=":material/add:")
if start_box is not None:
    with start_box:
        regen_control.start_form(rt)
