"""The Training page's runs: the workspace's training runs, and logs followed by path (a run started
outside the dashboard)."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from ui.train_data import RunRef

FOLLOWED = "train-followed"


def followed() -> dict[str, RunRef]:
    return st.session_state.setdefault(FOLLOWED, {})


def workspace_run(rt, name: str) -> RunRef:
    cfg = rt.train.config(name)
    return RunRef(name, rt.train.log_path(name), rt.train.output_dir(name), run_id=name,
                  draft_config=cfg.draft_config, process=name, target=cfg.target_model, source="workspace")


def known_runs(rt) -> dict[str, RunRef]:
    """The runs to choose from: the workspace's ``[[train]]`` runs, then the logs followed in this session."""
    out: dict[str, RunRef] = {}
    for name in rt.train.names():
        out[name] = workspace_run(rt, name)
    for name, ref in followed().items():
        out.setdefault(name, ref)
    return out


def run_tab(rt, ref: RunRef) -> None:
    """A workspace run's command (and Gen-3 YAML) and its edit form; for a followed log, what is followed."""
    from ui.train_control import command_preview, log_tail
    from ui.train_form import run_form

    if ref.source != "workspace":
        st.markdown(f"Followed by path in this session (started elsewhere): log `{ref.log}`"
                    + (f", output folder `{ref.output_dir}`" if ref.output_dir else ""))
        if st.button("Stop following", key="train-unfollow", icon=":material/visibility_off:"):
            followed().pop(ref.name, None)
            st.rerun()
    else:
        head = st.container(horizontal=True, vertical_alignment="center")
        head.markdown("**Command**")
        if head.button("Detect the generation again", key="train-redetect", icon=":material/refresh:",
                       help="ask the training environment's python again (after SpecForge was installed or "
                            "upgraded); its answer is otherwise kept while the dashboard runs"):
            rt.train.generation(ref.name, refresh=True)
        command_preview(rt, ref.name)
        with st.expander("Edit this run", icon=":material/edit:"):
            run_form(rt, ref.name)
    if ref.log is not None:
        st.markdown("**Log**")
        log_tail(ref.log)


def follow_form(rt) -> None:
    """Follow a SpecForge run by its log (and output folder) without starting anything."""
    with st.form("train-follow"):
        a, b, c = st.columns([3, 3, 1])
        log = a.text_input("Training log (its console output)", key="train-follow-log",
                           help="a relative path is taken from the workspace folder",
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
    root = Path(rt.workspace.root)
    logp = root / Path(log.strip()).expanduser() if log.strip() else None  # relative: to the workspace folder
    outp = root / Path(out.strip()).expanduser() if out.strip() else None
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
