"""The Training page's runs: the workspace's training runs, and logs followed by path (a run started
outside the dashboard)."""

from __future__ import annotations

import streamlit as st

from backend.auth import NotAuthorised, PathRefused
from ui import fmt
from ui.auth import control_lock, show_data_lock, typed_path
from ui.components import code_span, open_expander
from ui.context import actor
from ui.train.data import RunRef

FOLLOWED = "train-followed"
TYPED = "train-followed-typed"


def followed() -> dict[str, RunRef]:
    return st.session_state.setdefault(FOLLOWED, {})


def _typed() -> dict[str, tuple[str, str]]:
    """The paths each followed run was typed with: they are allowed again at each run of the page."""
    return st.session_state.setdefault(TYPED, {})


def workspace_run(rt, name: str) -> RunRef:
    cfg = rt.train.config(name)
    return RunRef(name, rt.train.log_path(name), rt.train.output_dir(name), run_id=name,
                  draft_config=cfg.draft_config, process=name, target=cfg.target_model, source="workspace")


def _still_allowed(rt, name: str, ref: RunRef) -> bool:
    """Whether this session may still read the paths run ``name`` was followed by (typed paths: an
    operator's, under the workspace's roots, resolved afresh); the run is dropped when not."""
    typed = _typed().get(name)
    if typed is None:
        return False
    try:
        for text, now in zip(typed, (ref.log, ref.output_dir)):
            if text and rt.typed_path(actor(), text, source="dashboard") != now:
                raise PathRefused(f"{text} now resolves to another file; follow it again")
    except (NotAuthorised, PathRefused) as exc:
        followed().pop(name, None)
        _typed().pop(name, None)
        st.warning(f"No longer following **{name}**: {exc}", icon=":material/lock:")
        return False
    return True


def known_runs(rt) -> dict[str, RunRef]:
    """The runs to choose from: the workspace's ``[[train]]`` runs, then the logs followed in this session
    (each checked again: reading a typed path is an operator's action, audited once per path and while)."""
    out: dict[str, RunRef] = {}
    for name in rt.train.names():
        out[name] = workspace_run(rt, name)
    for name, ref in list(followed().items()):
        if name not in out and _still_allowed(rt, name, ref):
            out[name] = ref
    return out


def run_tab(rt, ref: RunRef) -> None:
    """A workspace run's command (and Gen-3 YAML) and its edit form; for a followed log, what is followed."""
    from ui.train.control import command_preview, log_tail
    from ui.train.form import run_form

    if ref.source != "workspace":
        st.markdown(fmt.data_markdown(
            f"Followed by path in this session (started elsewhere): log {code_span(ref.log)}"
            + (f", output folder {code_span(ref.output_dir)}" if ref.output_dir else "")))
        if st.button("Stop following", key="train-unfollow", icon=":material/visibility_off:"):
            followed().pop(ref.name, None)
            _typed().pop(ref.name, None)
            st.rerun()
    else:
        head = st.container(horizontal=True, vertical_alignment="center")
        head.markdown("**Command**")
        lock = control_lock(rt)
        if head.button("Detect the generation again", key="train-redetect", icon=":material/refresh:",
                       disabled=bool(lock),
                       help=lock or "ask the training environment's python again (after SpecForge was installed or "
                                    "upgraded); its answer is otherwise kept while the dashboard runs"):
            try:
                rt.detect_generation(actor(), ref.name, source="dashboard")
            except Exception as exc:  # refused (audited) or the interpreter could not be asked
                st.error(f"The generation was not detected again: {exc}", icon=":material/lock:")
        if not show_data_lock(rt):  # a command line and the workspace's paths
            command_preview(rt, ref.name, copy_key="train-cmd-copy")
            if (box := open_expander("Edit this run", key="train-edit-open", icon=":material/edit:")) is not None:
                with box:
                    run_form(rt, ref.name)
    if ref.log is not None:
        st.markdown("**Log**")
        log_tail(rt, ref.log, followed=ref.source == "followed")


def follow_form(rt) -> None:
    """Follow a SpecForge run by its log (and output folder) without starting anything: reading files by
    a typed path is an operator's action, allowed by the backend under the workspace's roots."""
    lock = control_lock(rt)
    with st.form("train-follow"):
        a, b, c = st.columns([3, 3, 1])
        log = a.text_input("Training log (its console output)", key="train-follow-log", disabled=bool(lock),
                           help="a relative path is taken from the workspace folder",
                           placeholder="/runs/llama3-eagle3/train.log", persist_state="session")
        out = b.text_input("Output folder (--output-dir; optional)", key="train-follow-out", disabled=bool(lock),
                           placeholder="/runs/llama3-eagle3/outputs", persist_state="session")
        run_id = c.text_input("Gen-3 run_id", key="train-follow-runid", disabled=bool(lock),
                              help="only for Gen-3 checkpoints ({run_id}-stepN); empty lists every run's", persist_state="session")
        go = st.form_submit_button("Follow", icon=":material/visibility:", disabled=bool(lock), help=lock or None)
    if not go:
        return
    if not log.strip() and not out.strip():
        st.error("Give the log path, the output folder, or both.")
        return
    # nothing is looked at before the backend allows it: a refusal says nothing of whether a path exists
    logp = typed_path(rt, log.strip()) if log.strip() else None
    if log.strip() and logp is None:
        return
    outp = typed_path(rt, out.strip()) if out.strip() else None
    if out.strip() and outp is None:
        return
    if logp is not None and logp.is_dir():
        st.error(fmt.data_markdown(f"{code_span(logp)} is a folder: give the log file (the run's stdout and "
                                   "stderr)."))
        return
    if outp is not None and outp.exists() and not outp.is_dir():
        st.error(fmt.data_markdown(f"{code_span(outp)} is a file: the output folder is the run's --output-dir."))
        return
    base = (logp or outp).name
    name = base
    n = 2
    taken = set(rt.train.names()) | set(followed())
    while name in taken and followed().get(name) != RunRef(name, logp, outp, run_id.strip() or None,
                                                           source="followed"):
        name, n = f"{base} ({n})", n + 1
    followed()[name] = RunRef(name, logp, outp, run_id.strip() or None, source="followed")
    _typed()[name] = (log.strip(), out.strip())
    st.session_state["train-run-wanted"] = name
    st.rerun()


OVERLAY_PATHS = "train-overlay-paths"


def overlay_paths() -> list[str]:
    """The paths typed to overlay (logs or folders), in the order they were added."""
    return st.session_state.setdefault(OVERLAY_PATHS, [])


def overlay_path_input(rt) -> None:
    """A log or a folder (another workspace, a run's folder) to overlay by path: read under the workspace's
    roots only, as an operator's action."""
    lock = control_lock(rt)
    with st.form("train-overlay-path", border=False, clear_on_submit=True):
        with st.container(horizontal=True, vertical_alignment="bottom"):
            text = st.text_input("Overlay a log or folder", key="train-overlay-path-text",
                                 disabled=bool(lock), placeholder="/runs/other-workspace  or  /runs/a/train.log",
                                 help="by path: a training log, or a folder whose *.log and logs/*.log files are "
                                      "training logs (another workspace's runs); a relative path is taken from the "
                                      "workspace folder", persist_state="session")
            add = st.form_submit_button("Overlay", icon=":material/stacked_line_chart:", disabled=bool(lock),
                                        help=lock or None)
    if add and text.strip():
        if text.strip() not in overlay_paths():
            overlay_paths().append(text.strip())
        st.rerun()


def path_overlays(rt, texts: list[str], taken: set[str]) -> tuple[dict[str, RunRef], dict[str, list[str]], list[str]]:
    """The runs the typed ``texts`` name (a log, or each training log of a folder) by label, the labels of
    each text, and a line for each text that gave none; a path refused (outside the roots, not an
    operator) says why."""
    from backend.train.discover import overlay_label, training_logs

    out: dict[str, RunRef] = {}
    by_text: dict[str, list[str]] = {}
    problems: list[str] = []
    for text in texts:
        try:
            p = rt.typed_path(actor(), text, source="dashboard")
        except (NotAuthorised, PathRefused) as exc:
            problems.append(f"{text}: {exc}")
            continue
        logs = [p] if p.is_file() else training_logs(p) if p.is_dir() else []
        if not logs:
            problems.append(f"{text}: " + ("no training log in this folder (its *.log and logs/*.log were looked at)"
                                           if p.is_dir() else "no such file or folder"))
        for log in logs:
            label = base = overlay_label(log)
            n = 2
            while label in taken or label in out:
                label, n = f"{base} ({n})", n + 1
            out[label] = RunRef(label, log, None, source="followed")
            by_text.setdefault(text, []).append(label)
    return out, by_text, problems
