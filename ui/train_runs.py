"""The Training page's runs: the workspace's training runs, and logs followed by path (a run started
outside the dashboard)."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from ui.train_data import RunRef

FOLLOWED = "train-followed"


def followed() -> dict[str, RunRef]:
    return st.session_state.setdefault(FOLLOWED, {})


def known_runs(rt) -> dict[str, RunRef]:
    """The runs to choose from: the workspace's, then the logs followed in this session."""
    out: dict[str, RunRef] = {}
    for name, ref in followed().items():
        out.setdefault(name, ref)
    return out


def follow_form(rt) -> None:
    """Follow a SpecForge run by its log (and output folder) without starting anything."""
    with st.form("train-follow"):
        a, b, c = st.columns([3, 3, 1])
        log = a.text_input("Training log (its console output)", key="train-follow-log",
                           placeholder="/runs/llama3-eagle3/train.log")
        out = b.text_input("Output folder (--output-dir; optional)", key="train-follow-out",
                           placeholder="/runs/llama3-eagle3/outputs")
        run_id = c.text_input("Gen-3 run_id", key="train-follow-runid", help="only for Gen-3 checkpoints "
                              "({run_id}-stepN); empty lists every run's")
        go = st.form_submit_button("Follow", icon=":material/visibility:")
    if not go:
        return
    if not log.strip() and not out.strip():
        st.error("Give the log path, the output folder, or both.")
        return
    logp = Path(log.strip()).expanduser() if log.strip() else None
    outp = Path(out.strip()).expanduser() if out.strip() else None
    if logp is not None and logp.is_dir():
        st.error(f"`{logp}` is a folder: give the log file (the run's stdout and stderr).")
        return
    if outp is not None and outp.exists() and not outp.is_dir():
        st.error(f"`{outp}` is a file: the output folder is the run's --output-dir.")
        return
    base = (logp or outp).name
    name = base
    n = 2
    while name in known_runs(rt) and followed().get(name) != RunRef(name, logp, outp, run_id.strip() or None,
                                                                    source="followed"):
        name, n = f"{base} ({n})", n + 1
    followed()[name] = RunRef(name, logp, outp, run_id.strip() or None, source="followed")
    st.session_state["train-run-wanted"] = name
    st.rerun()
