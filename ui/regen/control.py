"""The Regeneration page's controls: pause, resume, requeue failed, stop, and the start form."""

from __future__ import annotations

import shlex

import streamlit as st

from backend.regen import control
from backend.regen.catalog import mixes
from backend.regen.output import RunFiles
from ui import fmt
from ui.auth import control_lock, show_data_lock, typed_path
from ui.components import confirm_box
from ui.context import actor


def _do(what: str, fn) -> None:
    try:
        fn()
    except Exception as exc:  # refused or failed: the audit log has it
        st.error(f"Could not {what}: {exc}")
    else:
        st.toast(f"{what[0].upper()}{what[1:]}: requested", icon=":material/check_circle:")


def job_controls(rt, out: str, snap: dict) -> None:
    """Pause, resume, requeue failed and stop, as the job's live state allows (:func:`control.controls`);
    drawn inside the page's live block, from the snapshot that block shows."""
    c = control.controls(rt, out, snap)
    lock = control_lock(rt)
    bar = st.container(horizontal=True)
    if bar.button("Pause", key="regen-pause", icon=":material/pause:", disabled=not c.can_pause or bool(lock),
                  help=lock or "stop submitting, finish what is in flight, flush, exit"):
        _do("pause", lambda: control.pause(rt, c, actor=actor()))
    if bar.button("Resume", key="regen-resume", icon=":material/play_arrow:",
                  disabled=not c.can_resume or bool(lock),
                  help=lock or "start the job again on the same output: it asks only the rows not written yet"):
        _do("resume", lambda: control.resume(rt, c, actor=actor()))
    if bar.button("Requeue failed", key="regen-requeue", icon=":material/replay:",
                  disabled=not c.can_requeue or bool(lock),
                  help=lock or "move the failed rows back to the queue; Resume then asks them again"):
        st.session_state["regen-confirm-requeue"] = True
    if bar.button("Stop", key="regen-stop", icon=":material/stop:", disabled=not c.can_stop or bool(lock),
                  help=lock or "SIGTERM, then SIGKILL after the grace period; prefer Pause"):
        st.session_state["regen-confirm-stop"] = True
    if confirm_box("regen-confirm-requeue", f"Requeue the {fmt.count(snap.get('failed'))} failed rows of "
                   f"`{out}`? They leave the error file and are asked again at the next resume.",
                   confirm_label="Yes, requeue", danger=False) is True:
        _do("requeue the failed rows", lambda: control.requeue(rt, c, actor=actor()))
    if c.view is not None and confirm_box(
            "regen-confirm-stop", f"Stop **{c.view.name}**? It gets SIGTERM and flushes what it has; after "
            f"{c.view.spec.stop_grace_s:.0f} s it gets SIGKILL. Pause is the gentler way.",
            confirm_label="Yes, stop") is True:
        _do("stop", lambda: control.stop(rt, c, actor=actor()))
    if c.started_elsewhere:
        st.caption("Started outside the dashboard: Pause works; Stop needs the job started from here (or "
                   "Ctrl-C / SIGTERM to its process, which flushes and exits).")


def start_form(rt) -> None:
    if show_data_lock(rt):  # its fields hold the workspace's paths
        return
    ws = rt.workspace
    all_mixes = mixes(ws.config.dataset, ws.config.mix)
    catalog = {d.name: d for d in ws.config.dataset}
    servers = rt.fleet.names()
    with st.form("regen-start"):
        st.markdown("**Start a regeneration**")
        a, b = st.columns(2)
        source = a.radio("Rows from", ["a mix", "catalog datasets", "input files"], horizontal=True,
                         key="regen-f-source")
        mix = a.selectbox("Mix", list(all_mixes), key="regen-f-mix",
                          help="a [[mix]] of the workspace file" if all_mixes else "no [[mix]] in the workspace file")
        picked = a.multiselect("Catalog datasets", list(catalog), key="regen-f-datasets")
        files = a.text_area("Input files (one path a line; JSONL or Parquet)", key="regen-f-files", height=80)
        chosen = b.multiselect("Servers", servers, default=servers[:1], key="regen-f-servers",
                               help="servers of the workspace; their requests go to the host and port they listen on")
        urls = b.text_input("More servers (URLs, e.g. an sglang-router)", key="regen-f-urls",
                            placeholder="http://10.0.0.5:30000 http://10.0.0.6:30000")
        default_out = str(ws.outputs_dir / "regen" / f"{mix or 'regen'}.jsonl")
        out = b.text_input("Output (.jsonl)", value=default_out, key="regen-f-out",
                           help="an existing output is resumed: rows already written are not asked again")
        c = st.columns(6)
        conc = c[0].number_input("Concurrency per server", 1, 4096, 64, key="regen-f-conc")
        max_tokens = c[1].number_input("Max tokens", 1, 1_000_000, 4096, key="regen-f-maxtok")
        temp = c[2].number_input("Temperature", 0.0, 2.0, 0.7, step=0.1, key="regen-f-temp")
        top_p = c[3].number_input("top_p (0: server default)", 0.0, 1.0, 0.0, step=0.05, key="regen-f-topp")
        reasoning = c[4].selectbox("Reasoning", control.REASONING, key="regen-f-reason",
                                   help="none; save: keep reasoning_content; disable: enable_thinking=false")
        stall = c[5].number_input("Stall alert after (min)", 1.0, 1440.0, 10.0, key="regen-f-stall")
        system = st.text_input("System prompt (for rows without one; optional)", key="regen-f-system")
        lock = control_lock(rt)
        review = st.form_submit_button("Review", icon=":material/preview:", disabled=bool(lock),
                                       help=lock or "check the form and show the command it runs")
    if review:
        inputs: tuple[str, ...] = ()
        if source == "catalog datasets":
            inputs = tuple(str((ws.root / catalog[n].file).resolve()) for n in picked)
        elif source == "input files":
            # typed paths: looked at only once the backend allows this session to read them (an operator,
            # under the workspace's roots); a refusal says nothing of whether they exist
            typed = [typed_path(rt, p.strip()) for p in files.splitlines() if p.strip()]
            if any(p is None for p in typed):
                st.session_state.pop("regen-pending", None)
                return
            inputs = tuple(str(p) for p in typed)
        if out.strip():
            resolved = typed_path(rt, out.strip(), action="write")
            if resolved is None:
                st.session_state.pop("regen-pending", None)
                return
            out = str(resolved)
        form = control.RunForm(
            out=out, servers=tuple(chosen) + tuple(u for u in urls.replace(",", " ").split() if u),
            mix=mix if source == "a mix" else None, inputs=inputs, concurrency=int(conc),
            max_tokens=int(max_tokens), temperature=float(temp), top_p=float(top_p) or None,
            reasoning=reasoning, system_prompt=system or None, stall_after_min=float(stall))
        try:
            spec, meta = control.job_spec(form, ws.root, ws.logs_dir)
        except control.FormError as exc:
            st.error(f"Not started: {exc}")
            st.session_state.pop("regen-pending", None)
        else:
            st.session_state["regen-pending"] = (spec, meta)
    pending = st.session_state.get("regen-pending")
    if pending is None:
        return
    spec, meta = pending
    with st.container(border=True):
        resumes = RunFiles.of(meta["out"]).out.exists()
        st.markdown(f"**{spec.name}** will run as a supervised process"
                    + (" and **resume** the existing output (rows already written are not asked again)"
                       if resumes else "") + ":")
        st.code(shlex.join(spec.argv), language="bash")
        lock = control_lock(rt)
        x, y, _ = st.columns([1, 1, 4])
        if x.button("Start", key="regen-start-go", type="primary", disabled=bool(lock), help=lock or None,
                    icon=":material/play_arrow:"):
            st.session_state.pop("regen-pending", None)
            try:
                rt.start_job(spec, meta, actor=actor(), source="dashboard")
            except Exception as exc:  # refused or failed: the audit log has it
                st.error(f"Could not start {spec.name}: {exc}")
            else:
                st.session_state["regen-run-wanted"] = meta["out"]
                st.rerun()
        if y.button("Cancel", key="regen-start-cancel"):
            st.session_state.pop("regen-pending", None)
            st.rerun()
