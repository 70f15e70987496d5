"""Regeneration: how far, how fast, when done and what went wrong; start, pause, resume, requeue, stop."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from ui import regen_control
from ui import regen_live as live
from ui.components import page_header
from ui.context import require_frame, runtime

SPECDECK, SPECFORGE = "Specdeck job", "SpecForge's regenerate_train_data.py"

require_frame(__file__)
rt = runtime()

page_header("Regeneration", "The target model answers the training prompts again: progress, speed, ETA, failures "
            "and samples of a running job, or of a run of SpecForge's own script.")

mode = st.segmented_control("Follow", [SPECDECK, SPECFORGE], default=SPECDECK, key="regen-mode") or SPECDECK

if mode == SPECFORGE:
    a, b, c = st.columns([3, 3, 1])
    inp = a.text_input("Its --input-file-path", key="regen-sf-in")
    out = b.text_input("Its --output-file-path (.jsonl)", key="regen-sf-out")
    stall_min = c.number_input("Stall after (min)", 1.0, 1440.0, 10.0, key="regen-sf-stall")
    if not (inp and out):
        st.info("Give the input and output paths of a `regenerate_train_data.py` run: its progress is read from "
                "the output, _error and _skipped files it writes.", icon=":material/info:")
        st.stop()
    if not out.endswith(".jsonl"):
        st.error(f"`{out}`: SpecForge's output path ends in .jsonl.")
        st.stop()
    live.live_specforge(inp, out, stall_min)
    live.sample_viewer(str(Path(out).expanduser()), [{"dataset": None, "file": Path(inp).expanduser(),
                                                      "first_turn_only": False, "max_prompt_chars": None}], key="sf")
    st.stop()

runs = live.known_runs(rt)
with st.expander("Start a regeneration", expanded=not runs, icon=":material/add:"):
    regen_control.start_form(rt)
if not runs:
    st.info("No regeneration yet in this workspace: start one above, or from a terminal with "
            "`python -m backend.cli regen run --mix NAME --server NAME --out PATH`.", icon=":material/info:")
    st.stop()
outs = list(runs)
wanted = st.session_state.pop("regen-run-wanted", None)
if wanted in outs:  # just started from the form: show it
    st.session_state["regen-run"] = wanted
if st.session_state.get("regen-run") not in outs:
    st.session_state["regen-run"] = outs[-1]
chosen = st.selectbox("Run", outs, format_func=lambda o: f"{runs[o]} · {o}", key="regen-run")
live.live_job(rt, chosen)
regen_control.job_controls(rt, chosen)
live.sample_viewer(chosen, None, key="regen-sample")
