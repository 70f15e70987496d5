"""Processes: every managed process, its state, its log, and start/stop/restart."""

from __future__ import annotations

import shlex
import time

import pandas as pd
import streamlit as st

from backend.logview import newest_line_age
from backend.runtime import PreflightBlocked
from state import audit
from ui import fmt
from ui.auth import control_lock, data_lock, live_fragment, show_data_lock
from ui.components import alerts_panel, code_span, confirm_box, freshness, log_block, page_header, path_text
from ui.context import actor, runtime
from ui.overview_query import QueryState

REFRESH_S = 2
NA = fmt.NA  # a missing value in a table: never a blank cell
TAIL_KEEP_CHARS = 64_000
SELECTED = "proc-selected"

rt = runtime()
sup = rt.supervisor

page_header("Processes", "Everything Specdeck runs for you: servers, regeneration, training and "
            "benchmarks. They keep running when this tab or the dashboard closes.")


@live_fragment(run_every=REFRESH_S)
def overview() -> None:
    views = sup.views()
    if not views:
        st.info("No managed processes yet: add a `[[process]]` entry to "
                f"{path_text(rt.workspace.config_path, bool(data_lock(rt)))} and reload.", icon=":material/info:")
        return
    states = [v.state.value for v in views]
    failed = sum(1 for v in views if fmt.view_badge(v).colour == "red")
    c = st.columns(4)
    c[0].metric("Running", states.count("RUNNING"), help="processes in RUNNING: their readiness check passed")
    c[1].metric("In transition", sum(states.count(s) for s in ("STARTING", "BACKOFF", "STOPPING")),
                help="STARTING, BACKOFF (waiting to restart) or STOPPING")
    c[2].metric("Failed", failed, help="FATAL, or EXITED with a non-zero code without a stop being asked for")
    c[3].metric("Managed", len(views), help="every process in the workspace file, servers included")
    rows = []
    for v in views:
        rows.append({
            "name": v.name,
            "kind": v.kind.value,
            # where it runs: this machine, or a job on the workspace's Ray cluster (its submission id)
            "where": f"ray · {v.submission_id}" if v.backend == "ray" and v.submission_id else v.backend,
            "state": ("PENDING on Ray" if v.pending else
                      fmt.state_text(v.state.value, v.exit_code, stopped=fmt.stopped_by_user(v.detail))),
            "uptime": fmt.duration(v.uptime_s) if v.uptime_s is not None else NA,
            "pid": NA if v.pid is None else str(v.pid),
            "readiness": v.readiness + (" ✓" if v.ready else "") if v.readiness != "none" else "none",
            "restarts": v.tries,
            "since": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(v.state_since)) if v.state_since else NA,
            "detail": v.detail or NA,
        })
    st.table(pd.DataFrame(rows), hide_index=True)  # wraps long details instead of cutting them
    freshness(rt.loop.last_poll_at, REFRESH_S, "states checked")


overview()

st.subheader("Alerts", anchor="alerts")
st.caption("What the alert rules see now across the pipeline (the sidebar lists them on every page): "
           "acknowledge one, mute its rule, or send the notification channels a test.")
alerts_panel(rt)

views = sup.views()
names = [v.name for v in views]
if not names:
    st.stop()

st.subheader("Control")
# the process whose controls and log are shown is in the URL's query (?process=NAME): a link opens the page on
# it; a name that is not a process here is ignored with a note
query = QueryState("processes")
query.take("process", SELECTED, names, what="process")
if st.session_state.get(SELECTED) not in names:  # removed from the workspace since: the first one
    st.session_state[SELECTED] = names[0]
query.show_notes()
name = st.selectbox("Process", names, key=SELECTED)
query.put("process", name)
v = sup.view(name)
if v is None:  # removed from the config since the list above was read
    st.info(f"**{name}** is no longer in the workspace config.", icon=":material/info:")
    st.stop()


def _do(proc: str, action: str) -> None:
    try:
        if action == "start":
            rt.start(proc, actor=actor(), source="dashboard")
        elif action == "stop":
            rt.stop(proc, actor=actor(), source="dashboard")
        else:
            rt.restart(proc, actor=actor(), source="dashboard")
    except PreflightBlocked as exc:
        st.error(f"**{proc}** was not {action}ed: preflight found errors. Review them and use "
                 "*launch anyway* on the Servers page if you are sure.")
        for f in exc.findings:
            if f.severity == "error":
                st.markdown(fmt.data_markdown(f"- :red[**{f.code}**] {f.found}  \n  *Fix:* {f.fix}"))
    except Exception as exc:  # refused or failed; the action is in the audit log
        st.error(f"Could not {action} **{proc}**: {exc}")
    else:
        st.toast(f"{action.capitalize()} requested for {proc}", icon=":material/check_circle:")
        st.rerun(scope="app")  # the state history and audit log below show the action at once


@live_fragment(run_every=REFRESH_S)
def control(proc: str) -> None:
    """State, command and buttons of one process, redrawn with its live state."""
    view = sup.view(proc)
    if view is None:
        st.info(f"**{proc}** is no longer in the workspace config.", icon=":material/info:")
        return
    with st.container(border=True):
        active = view.live
        st.markdown(fmt.data_markdown(f"{fmt.view_badge(view).markdown()} &nbsp; **{view.name}** · {view.kind.value}"
                                      + (f" · pid {view.pid}" if view.pid else "")
                                      + (f" · on Ray, job `{view.submission_id}`" if view.submission_id else
                                         " · on Ray" if view.backend == "ray" else "")
                                      + (f" · {view.detail}" if view.detail else "")))
        if view.pending:
            st.info(f"Queued on the Ray cluster: {view.pending}. It becomes RUNNING once Ray places it and its "
                    "readiness check passes; Stop ends it here at once.", icon=":material/hourglass_top:")
        if not show_data_lock(rt):  # the command line
            st.code(shlex.join(view.spec.argv), language="bash", wrap_lines=True)
        row = st.container(horizontal=True)  # each button as wide as its label: never "St…"
        lock = control_lock(rt)
        if row.button("Start", key="btn-start", disabled=active or bool(lock), help=lock or None,
                      icon=":material/play_arrow:"):
            st.session_state["confirm-start"] = True
        if row.button("Stop", key="btn-stop", disabled=not active or bool(lock), help=lock or None,
                      icon=":material/stop:"):
            st.session_state["confirm-stop"] = True
        if row.button("Restart", key="btn-restart", disabled=bool(lock), help=lock or None,
                      icon=":material/restart_alt:"):
            st.session_state["confirm-restart"] = True
        for action, question in (
            ("start", f"Start **{proc}** with the command above?"),
            ("stop", f"Stop **{proc}**? It gets SIGTERM, then SIGKILL after "
                     f"{view.spec.stop_grace_s:.0f} s, with everything it started."),
            ("restart", f"Restart **{proc}**? The running process is stopped first."),
        ):
            if confirm_box(f"confirm-{action}", question, confirm_label=f"Yes, {action}") is True:
                _do(proc, action)


control(name)

st.subheader(f"Log · {name}")


@live_fragment(run_every=REFRESH_S)
def log_tail(proc: str) -> None:
    if show_data_lock(rt):
        return
    st.caption(fmt.data_markdown(code_span(v.log_path)))
    key = f"tail-{proc}"
    buf = st.session_state.get(key)
    if buf is None:
        text, offset = sup.tail_last(proc, lines=200)
        buf = {"text": text, "offset": offset, "inode": None}
    else:
        chunk = sup.tail(proc, buf["offset"], inode=buf.get("inode"))
        if chunk.reset:
            buf = {"text": chunk.text, "offset": chunk.offset, "inode": chunk.inode}
        else:
            buf = {"text": (buf["text"] + chunk.text)[-TAIL_KEEP_CHARS:], "offset": chunk.offset,
                   "inode": chunk.inode}
    st.session_state[key] = buf
    log_block(buf["text"].splitlines(), newest_age_s=newest_line_age(v.log_path), toggle_key="proc-log-probes")


log_tail(name)



@live_fragment(run_every=REFRESH_S)
def history_and_audit(proc: str) -> None:
    """Redrawn with the live parts, so an action shows here without a reload."""
    st.subheader("State history")
    hist = sup.history(proc)
    hdf = pd.DataFrame([{
        "at": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.at)),
        "from": e.from_state or NA, "to": e.to_state, "pid": NA if e.pid is None else str(e.pid),
        "exit code": NA if e.exit_code is None else str(e.exit_code), "detail": e.detail or NA,
    } for e in reversed(hist)])
    if hdf.empty:
        st.caption("No transitions yet.")
    else:
        with st.container(height=300 if len(hdf) > 6 else "content"):
            st.table(hdf, hide_index=True)
    st.subheader("Audit log")
    if show_data_lock(rt):  # it names users and their addresses
        return
    entries = audit.recent(rt.store, limit=200)
    adf = pd.DataFrame([{
        "at": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e.at)),
        "actor": e.actor or NA, "client": e.client or NA, "source": e.source, "action": e.action,
        "target": e.target, "outcome": e.outcome, "detail": e.detail or NA,
    } for e in entries])
    if adf.empty:
        st.caption("No control actions yet.")
    else:
        with st.container(height=300 if len(adf) > 6 else "content"):
            st.table(adf, hide_index=True)
        st.download_button("Download audit log (CSV)", adf.to_csv(index=False), "audit.csv",
                           mime="text/csv")


history_and_audit(name)
