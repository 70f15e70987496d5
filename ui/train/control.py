"""The Training page's run controls: the run's state, the command it runs (Gen-3's YAML with it), and
Start / Stop / Resume through the supervisor, with a confirmation before anything that stops or may
replace work (SpecForge 0.2.0's resume, which silently starts over, among them)."""

from __future__ import annotations

import os

import shlex

import streamlit as st

from backend.train.checkpoints import list_checkpoints
from backend.train.command import CommandError
from backend.train.runs import ResumeNeedsConfirmation, failure_reason
from ui import fmt
from ui.auth import control_lock, data_lock, live_fragment, show_data_lock
from backend.logview import newest_line_age
from backend.supervisor.logtail import last_lines
from ui.components import code_span, confirm_box, open_expander, path_text, text_block
from ui.context import actor

REFRESH_S = 2


def _do(what: str, fn) -> bool:
    try:
        fn()
    except ResumeNeedsConfirmation as exc:  # the warning changed since the page asked: ask again
        st.warning(f"Not resumed: {exc.warning}", icon=":material/warning:")
        return False
    except Exception as exc:  # refused or failed: the audit log has it
        st.error(f"Could not {what}: {exc}")
        return False
    st.toast(f"{what[0].upper()}{what[1:]}: requested", icon=":material/check_circle:")
    return True


def command_problems(exc: CommandError) -> str:
    return "**The command cannot be built**:\n\n" + "\n".join(
        f"- `{f}`: {why}" if f else f"- {why}" for f, why in exc.problems)


def command_preview(rt, name: str, cfg=None, *, resume: bool = False, cmd=None, copy_key: str | None = None) -> bool:
    """The generation (detected or chosen) and the command of workspace run ``name``, or ``cmd``: the
    command of an edit not saved yet, built once by ``Runtime.review_train`` (it runs the typed python).
    False when the command cannot be built (its problems shown, each naming its field).  With ``copy_key``
    the command and config are shown as text, and as code blocks to copy in an expander of that key that
    builds them only while open (the Run tab, built on every visit of the page)."""
    train = rt.train
    if cmd is None:
        try:
            cmd = train.command(name, resume=resume, cfg=cfg)
        except CommandError as exc:
            st.error(fmt.data_markdown(command_problems(exc)))
            return False
        except KeyError as exc:
            st.error(str(exc).strip("'\""))
            return False
    gen = cmd.generation
    st.markdown(fmt.data_markdown(f"**SpecForge generation:** {gen.label}"))
    if gen.evidence:
        st.caption(fmt.data_markdown(" · ".join(gen.evidence)))
    for p in gen.problems:
        st.warning(fmt.data_markdown(p), icon=":material/warning:")
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(cmd.env.items()))
    command = f"cd {shlex.quote(cmd.cwd)}\n" + (f"env {env} \\\n  " if env else "") + shlex.join(cmd.argv)
    if copy_key is None:
        st.code(command, language="bash", wrap_lines=True)
    else:
        text_block(command)
    st.caption(fmt.data_markdown(f"checkpoints and tracker files go to {code_span(cmd.output_dir)} · log "
                                 f"{code_span(train.log_path(name))}"))
    if cmd.yaml_text is not None:
        st.markdown(fmt.data_markdown(f"**Gen-3 config** (written to {code_span(cmd.yaml_path)} at the start):"))
        if copy_key is None:
            st.code(cmd.yaml_text, language="yaml")
        else:
            text_block(cmd.yaml_text)
    if copy_key is not None:
        # the copy buttons are in an expander that builds them only while open (a page's first st.code starts the
        # browser's syntax highlighter: see ui.components.text_block); opening it runs the page again
        box = open_expander("Command and config to copy", key=copy_key, icon=":material/content_copy:")
        if box is not None:
            with box:
                st.code(command, language="bash", wrap_lines=True)
                if cmd.yaml_text is not None:
                    st.code(cmd.yaml_text, language="yaml")
    notes = [n for n in cmd.notes if n not in gen.evidence and n not in gen.problems]
    for n in notes:
        st.caption(fmt.data_markdown(f"• {n}"))
    return True


@live_fragment(run_every=REFRESH_S)
def run_controls(rt, name: str) -> None:
    """Start, Stop and Resume of a workspace run, enabled by its live state."""
    train = rt.train
    if name not in train.names():
        st.info(f"`{name}` is no longer in the workspace file.", icon=":material/info:")
        return
    view = train.view(name)
    live = view is not None and view.live
    badge = fmt.view_badge(view)
    line = f"{badge.markdown()} &nbsp; **{name}**"
    if view is not None and view.pid and live:
        line += f" · pid {view.pid}"
    if view is not None and view.detail and not live:
        line += f" · {view.detail}"
    st.markdown(fmt.data_markdown(line))
    lock = control_lock(rt)
    out = train.output_dir(name)
    bar = st.container(horizontal=True)
    has_checkpoint = bool(list_checkpoints(out).checkpoints)
    if bar.button("Start", key="train-start", icon=":material/play_arrow:", type="primary",
                  disabled=live or bool(lock), help=lock or "start the run from step 0"):
        if has_checkpoint:
            st.session_state["train-confirm-start"] = True
        else:
            _do("start", lambda: train.start(name, actor=actor(), source="dashboard"))
    if bar.button("Stop", key="train-stop", icon=":material/stop:", disabled=not live or bool(lock),
                  help=lock or f"SIGTERM to the run's processes; SIGKILL after {train.config(name).stop_grace_s:.0f} s"):
        st.session_state["train-confirm-stop"] = True
    no_resume = "" if has_checkpoint else "nothing to resume from: the run has saved no checkpoint yet (Start runs it)"
    if bar.button("Resume", key="train-resume", icon=":material/replay:", disabled=live or bool(lock or no_resume),
                  help=lock or no_resume or "start again from the latest checkpoint (--resume; Gen-3: "
                                            "training.resume_from)"):
        warning = train.resume_warning(name)
        if warning:
            st.session_state["train-confirm-resume"] = warning
        else:
            note = train.resume_note(name)  # torn checkpoints skipped: which good one the run continues from
            if _do("resume", lambda: train.resume(name, actor=actor(), source="dashboard")) and note:
                st.warning(fmt.data_markdown(note), icon=":material/warning:")
    if confirm_box("train-confirm-start", fmt.data_markdown(
                   f"{code_span(out)} already holds checkpoints. **Start** trains from step 0 and writes new "
                   "checkpoints beside (or over) them; **Resume** continues from the latest."),
                   confirm_label="Start from step 0") is True:
        _do("start", lambda: train.start(name, actor=actor(), source="dashboard"))
    if confirm_box("train-confirm-stop", f"Stop **{name}**? Its processes get SIGTERM; after "
                   f"{train.config(name).stop_grace_s:.0f} s, SIGKILL. Steps since the last checkpoint are lost.",
                   confirm_label="Yes, stop") is True:
        _do("stop", lambda: train.stop(name, actor=actor(), source="dashboard"))
    warning = st.session_state.get("train-confirm-resume")
    if warning and confirm_box("train-confirm-resume", fmt.data_markdown(f"**Resume {name}?** {warning}"),
                               confirm_label="Resume anyway") is True:
        _do("resume", lambda: train.resume(name, actor=actor(), source="dashboard", confirmed=True))
    if view is not None and view.state.value in ("EXITED", "FATAL") and view.exit_code not in (0, None) \
            and not fmt.stopped_by_user(view.detail):
        hidden = bool(data_lock(rt))  # the log's words and its path: only for sessions that may see them
        lines = [] if hidden else display_lines(view.log_path, 60)
        why = failure_reason(lines, out) if lines else None
        st.error(fmt.data_markdown(f"The run ended with exit code {view.exit_code}"
                                   + (f": {code_span(why.strip()[:400])}" if why else "")
                                   + f". The log's last lines are in the Run tab; the whole log is "
                                   f"{path_text(view.log_path, hidden)}."),
                 icon=":material/error:")



_tails: dict[tuple, list[str]] = {}


def display_lines(path, n: int) -> list[str]:
    """The last ``n`` lines of a log as a reader sees them: of a tqdm bar redrawn after carriage returns,
    only its last drawing.  Read again only when the log changed (its size or modification time)."""
    try:
        st_ = os.stat(path)
        key = (str(path), n, st_.st_size, st_.st_mtime_ns, st_.st_ino)
        hit = _tails.get(key)
        if hit is not None:
            return hit
        lines = last_lines(path, n)
    except OSError:
        return []
    out = [ln.rsplit("\r", 1)[-1] if "\r" in ln else ln for ln in lines]
    if len(_tails) >= 32:
        _tails.clear()
    _tails[key] = out
    return out


@live_fragment(run_every=REFRESH_S)
def log_tail(rt, path, *, followed: bool = False) -> None:
    """The run's log, newest line where the eye lands (for a session that may see logs; a log
    ``followed`` by a typed path, for one that may still read typed paths)."""
    from ui.train.follow import recheck_followed

    if followed:
        recheck_followed(rt)
    if show_data_lock(rt):
        return
    training_log(display_lines(path, 215), newest_age_s=newest_line_age(path))


def training_log(lines: list[str], *, newest_age_s: float | None, latest: int = 15, earlier: int = 200) -> None:
    """A training log's tail, the newest lines where the eye lands.  Unlike a server's log it holds no
    requests of the dashboard's, so there is nothing to hide and no toggle for it."""
    age = "no line yet" if newest_age_s is None else f"newest line written {fmt.age(newest_age_s)}"
    st.caption(f"Latest {min(latest, len(lines))} of {fmt.count(len(lines))} lines · {age}")
    text_block("\n".join(lines[-latest:]) or "(log is empty)")
    before = lines[:-latest][-earlier:]
    if before:
        with st.expander(f"Earlier lines ({fmt.count(len(before))})"):
            text_block("\n".join(before), height=320)
