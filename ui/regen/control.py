"""The Regeneration page's controls: pause, resume, requeue failed, stop, and the start form."""

from __future__ import annotations

import shlex

import streamlit as st

from backend.regen import control
from backend.regen.catalog import mixes
from backend.regen.follow import progress_follower
from backend.regen.output import RunFiles
from ui import fmt
from ui.auth import control_lock, show_data_lock, typed_path
from ui.components import confirm_box
from ui.context import actor
from ui.regen.live import known_runs


RUN_ON = {"local": "this machine", "ray": "the Ray cluster"}


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


def _rates(rt) -> list[tuple[str, float]]:
    """(run, its last rows/s) of this workspace's regenerations, in the page's order (newest last)."""
    out = []
    for path, name in known_runs(rt).items():
        rate = (progress_follower(path).poll().latest or {}).get("req_s")
        if isinstance(rate, (int, float)) and rate > 0:
            out.append((name, float(rate)))
    return out


def start_form(rt) -> None:
    if show_data_lock(rt):  # its fields hold the workspace's paths
        return
    ws = rt.workspace
    all_mixes = mixes(ws.config.dataset, ws.config.mix)
    catalog = {d.name: d for d in ws.config.dataset}
    servers = rt.fleet.names()
    # outside the form, so that the form shows the fields of the source chosen, and only those
    source = st.radio("Rows from", ["a mix", "catalog datasets", "input files"], horizontal=True,
                      key="regen-f-source", persist_state="session")
    mix, picked, files = None, [], ""
    with st.form("regen-start"):
        st.markdown("**Start a regeneration**")
        a, b = st.columns(2)
        if source == "a mix":
            mix = a.selectbox("Mix", list(all_mixes), key="regen-f-mix", persist_state="session",
                              help="a [[mix]] of the workspace file" if all_mixes else "no [[mix]] in the workspace file")
        elif source == "catalog datasets":
            picked = a.multiselect("Catalog datasets", list(catalog), key="regen-f-datasets", persist_state="session")
        else:
            files = a.text_area("Input files (one path a line; JSONL or Parquet)", key="regen-f-files",
                                persist_state="session", height=80)
        chosen = b.multiselect("Servers", servers, default=servers[:1], key="regen-f-servers", persist_state="session",
                               help="servers of the workspace; their requests go to the host and port they listen on")
        urls = b.text_input("More servers (URLs, e.g. an sglang-router)", key="regen-f-urls", persist_state="session",
                            placeholder="http://10.0.0.5:30000 http://10.0.0.6:30000")
        default_out = str(ws.outputs_dir / "regen" / f"{mix or 'regen'}.jsonl")
        out = a.text_input("Output (.jsonl)", value=default_out, key="regen-f-out", persist_state="session",
                           help="an existing output is resumed: rows already written are not asked again")
        c = st.columns(3) + st.columns(3)  # two rows: each label whole at 1024 px
        conc = c[0].number_input("Concurrency per server", 1, 4096, 64, key="regen-f-conc", persist_state="session")
        max_tokens = c[1].number_input("Max tokens", 1, 1_000_000, 4096, key="regen-f-maxtok", persist_state="session")
        temp = c[2].number_input("Temperature", 0.0, 2.0, 0.7, step=0.1, key="regen-f-temp", persist_state="session")
        top_p = c[3].number_input("top_p (0: server default)", 0.0, 1.0, 0.0, step=0.05, key="regen-f-topp",
                                  persist_state="session")
        reasoning = c[4].selectbox("Reasoning", control.REASONING, key="regen-f-reason", persist_state="session",
                                   help="none; save: keep reasoning_content; disable: enable_thinking=false")
        stall = c[5].number_input("Stall alert after (min)", 1, 1440, 10, step=1, key="regen-f-stall",
                                  persist_state="session")
        stream = st.checkbox("Stream answers (--stream)", key="regen-f-stream", persist_state="session",
                               help="a stalled server is noticed within the chunk timeout; costs the client about "
                                    "three times the CPU")
        t = st.columns(3)
        first_byte = t[0].number_input("First-byte timeout (s)", 0, 86_400, 0, key="regen-f-firstbyte",
                                       persist_state="session",
                                       help="seconds to the first byte of an answer before it is asked again; "
                                            "0: regen run's default (600 streamed; not streamed, 600 + max tokens "
                                            "at the slowest decode rate)")
        chunk = t[1].number_input("Chunk timeout (s)", 0, 86_400, 0, key="regen-f-chunk", persist_state="session",
                                  help="seconds between two chunks of a streamed answer; 0: the default (120)")
        startup = t[2].number_input("Startup timeout (s)", 0, 86_400, 0, key="regen-f-startup", persist_state="session",
                                    help="give up when no server has answered at all this long after start; "
                                         "0: the default (300)")
        system = st.text_input("System prompt (for rows without one; optional)", key="regen-f-system",
                               persist_state="session")
        where = "local"
        if getattr(ws.config, "cluster", None) is not None:  # offered only where there is a cluster
            where = st.radio("Run on", list(RUN_ON), format_func=RUN_ON.get, horizontal=True, key="regen-f-where",
                             persist_state="session",
                             help="ray: the job runs on the workspace's [cluster] (no GPU; the servers do the work)")
        lock = control_lock(rt)
        review = st.form_submit_button("Review", icon=":material/preview:", disabled=bool(lock),
                                       help=lock or "check the form, count the rows and show the command it runs")
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
            reasoning=reasoning, system_prompt=system or None, stall_after_min=float(stall),
            stream=bool(stream), first_byte_timeout=float(first_byte) or None,
            chunk_timeout=float(chunk) or None, startup_timeout=float(startup) or None, where=where)
        try:
            spec, meta = control.job_spec(form, ws.root, ws.logs_dir)
            with st.spinner("Counting the rows of the inputs…"):
                counts = control.count_form_rows(form, ws.root, ws.config.dataset, ws.config.mix)
        except control.FormError as exc:
            st.error(f"Not started: {exc}")
            st.session_state.pop("regen-pending", None)
        else:
            seconds, basis = control.duration_estimate(counts.rows, _rates(rt))
            st.session_state["regen-pending"] = (spec, meta, counts, seconds, basis)
    pending = st.session_state.get("regen-pending")
    if pending is None:
        return
    spec, meta, counts, seconds, basis = pending
    with st.container(border=True):
        resumes = RunFiles.of(meta["out"]).out.exists()
        st.markdown(f"**{spec.name}** will run as a supervised process"
                    + (" on the Ray cluster" if spec.on_ray else "")
                    + (" and **resume** the existing output (rows already written are not asked again)"
                       if resumes else "") + ":")
        r = st.columns(2)
        r[0].metric("rows to ask", fmt.count(counts.rows),
                    help=f"{fmt.count(counts.total)} rows in the inputs, {fmt.count(counts.skipped)} skipped "
                         "(bad input, repeated ids, filters)" + ("; those already in the output are not asked "
                                                                  "again" if resumes else ""))
        r[1].metric("duration estimate", fmt.duration(seconds) if seconds is not None else fmt.NA,
                    help=basis if seconds is not None else f"N/A: {basis}; the ETA appears once the run has a rate")
        if seconds is not None:
            st.caption(f"{fmt.count(counts.rows)} rows {basis}" + (" (rows already written are not asked, so "
                                                                    "it takes less)" if resumes else ""))
        st.code(shlex.join(spec.argv), language="bash", wrap_lines=True)
        lock = control_lock(rt)
        x = y = st.container(horizontal=True)
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
