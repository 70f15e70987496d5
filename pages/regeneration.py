"""Regeneration: how far, how fast, when done and what went wrong; start, pause, resume, requeue, stop."""

from __future__ import annotations

import random
import shlex
import time
from pathlib import Path

import streamlit as st

from backend.regen import control
from backend.regen.catalog import mixes
from backend.regen.follow import RunPaths, progress_follower
from backend.regen.follow_specforge import specforge_follower
from backend.regen.samples import _input_entries, find_original, find_row, last_row, read_job, row_at, row_before
from ui import fmt
from ui import regen as blocks
from ui.auth import control_lock
from ui.components import confirm_box, freshness, page_header
from ui.context import actor, require_frame, runtime

REFRESH_S = 2
SPECDECK, SPECFORGE = "Specdeck job", "SpecForge's regenerate_train_data.py"
LIVE_STATES = ("starting", "running", "waiting", "pausing", "stopping")

require_frame(__file__)
rt = runtime()
ws = rt.workspace

page_header("Regeneration", "The target model answers the training prompts again: progress, speed, ETA, failures "
            "and samples of a running job, or of a run of SpecForge's own script.")


def _known_runs() -> dict[str, str]:
    """Output paths of the runs this workspace knows: its jobs, and progress logs in its outputs."""
    found: dict[str, str] = {}
    for job in rt.jobs():
        if job.meta.get("kind") == "regen" and job.meta.get("out"):
            found[job.meta["out"]] = job.name
    for pattern in ("*.progress.jsonl", "*/*.progress.jsonl", "*/*/*.progress.jsonl"):
        for p in sorted(ws.outputs_dir.glob(pattern)):
            out = str(p.with_name(p.name[: -len(".progress.jsonl")] + ".jsonl"))
            found.setdefault(out, control.job_name(Path(out)))
    return found


def _job_for(out: str):
    for job in rt.jobs():
        if job.meta.get("out") == out:
            return job
    return None


def _do(what: str, fn) -> None:
    try:
        fn()
    except Exception as exc:  # refused or failed: the audit log has it
        st.error(f"Could not {what}: {exc}")
    else:
        st.toast(f"{what[0].upper()}{what[1:]}: requested", icon=":material/check_circle:")


# -- Specdeck's job: live figures ------------------------------------------------------------


@st.fragment(run_every=REFRESH_S)
def live_job(out: str) -> None:
    f = progress_follower(out).poll()
    snap = f.latest
    job = _job_for(out)
    view = rt.supervisor.view(job.name) if job is not None else None
    if view is not None:
        badge = fmt.state_badge(view.state.value, view.exit_code)
        st.markdown(f"{badge.markdown()} &nbsp; **{view.name}**" + (f" · pid {view.pid}" if view.pid else "")
                    + f" · log `{view.log_path}`")
    if snap is None:
        st.info(f"No progress yet: `{f.paths.progress}` is empty or missing. A job writes its first snapshot "
                "when it starts; its log (above) says what it is doing.", icon=":material/hourglass_empty:")
        return
    if f.bad_lines:
        st.warning(f"{fmt.count(f.bad_lines)} line(s) of the progress log could not be read and were skipped; "
                   f"the last: {f.last_bad}")
    running = view is not None and view.state.value == "RUNNING"
    stall_s = float(job.meta.get("stall_after_s") or 600) if job is not None else 600.0
    alert = f.stall(view.name if view else Path(out).name, running=running, after_s=stall_s)
    if alert is not None:
        st.warning(f"**{alert.title}**. {alert.message} Likely: " + "; ".join(alert.causes),
                   icon=":material/warning:")
    eta = f.eta()
    blocks.progress_block(snap, eta)
    blocks.dataset_bars(snap)
    blocks.rate_charts(f.history, blocks.server_series(snap, rt.fleet), key="regen")
    left, right = st.columns(2)
    with left:
        blocks.length_histogram(snap.get("completion_tokens_hist"), unit="tokens", key="regen")
    with right:
        blocks.error_table(snap.get("errors"))
    blocks.server_table(snap)
    if snap.get("state") in LIVE_STATES:
        freshness(snap.get("t"), REFRESH_S, "progress logged")
    else:
        st.caption(f"last snapshot {fmt.age(time.time() - (snap.get('t') or time.time()))} · `{f.paths.progress}`")


@st.fragment(run_every=REFRESH_S)
def job_controls(out: str) -> None:
    """Pause, resume, requeue failed and stop, enabled by the job's live state."""
    f = progress_follower(out)
    snap = f.latest or {}
    job = _job_for(out)
    view = rt.supervisor.view(job.name) if job is not None else None
    live = view is not None and view.live
    state = snap.get("state")
    lock = control_lock(rt)
    name = job.name if job is not None else control.job_name(Path(out))
    c = st.columns([1, 1, 1.4, 1, 2])
    can_pause = state in ("starting", "running", "waiting") and (live or view is None)
    if c[0].button("Pause", key="regen-pause", icon=":material/pause:", disabled=not can_pause or bool(lock),
                   help=lock or "stop submitting, finish what is in flight, flush, exit"):
        _do("pause", lambda: rt.act("pause", name, lambda: (True, f"wrote {control.request_pause(out)}"),
                                    actor=actor(), source="dashboard"))
    has_job_json = RunPaths.of(out).job.exists()
    can_resume = not live and state != "done" and (job is not None or has_job_json)
    if c[1].button("Resume", key="regen-resume", icon=":material/play_arrow:", disabled=not can_resume or bool(lock),
                   help=lock or "start the job again on the same output: it asks only the rows not written yet"):
        if job is not None:
            _do("resume", lambda: rt.start(job.name, actor=actor(), source="dashboard"))
        else:
            spec, meta = control.resume_spec(Path(out), ws.root, ws.logs_dir)
            _do("resume", lambda: rt.start_job(spec, meta, actor=actor(), source="dashboard"))
    can_requeue = not live and state not in LIVE_STATES and (snap.get("failed") or 0) > 0
    if c[2].button("Requeue failed", key="regen-requeue", icon=":material/replay:",
                   disabled=not can_requeue or bool(lock),
                   help=lock or "move the failed rows back to the queue; Resume then asks them again"):
        st.session_state["regen-confirm-requeue"] = True
    if c[3].button("Stop", key="regen-stop", icon=":material/stop:", disabled=not live or bool(lock),
                   help=lock or "SIGTERM, then SIGKILL after the grace period; prefer Pause"):
        st.session_state["regen-confirm-stop"] = True
    if confirm_box("regen-confirm-requeue", f"Requeue the {fmt.count(snap.get('failed'))} failed rows of "
                   f"`{out}`? They leave the error file and are asked again at the next resume.",
                   confirm_label="Yes, requeue", danger=False) is True:
        def _requeue():
            ok, text = rt.act("requeue", name, lambda: control.requeue(out), actor=actor(), source="dashboard")
            if not ok:
                raise RuntimeError(text)
        _do("requeue the failed rows", _requeue)
    if view is not None and confirm_box(
            "regen-confirm-stop", f"Stop **{view.name}**? It gets SIGTERM and flushes what it has; after "
            f"{view.spec.stop_grace_s:.0f} s it gets SIGKILL. Pause is the gentler way.",
            confirm_label="Yes, stop") is True:
        _do("stop", lambda: rt.stop(view.name, actor=actor(), source="dashboard"))
    if view is None and state in LIVE_STATES:
        c[4].caption("Started outside the dashboard: Pause works; to stop it, signal its process.")


# -- the start form ----------------------------------------------------------------------------------


def start_form() -> None:
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
        review = st.form_submit_button("Review", icon=":material/preview:")
    if review:
        inputs: tuple[str, ...] = ()
        if source == "catalog datasets":
            inputs = tuple(str((ws.root / catalog[n].file).resolve()) for n in picked)
        elif source == "input files":
            inputs = tuple(p.strip() for p in files.splitlines() if p.strip())
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
        resumes = RunPaths.of(meta["out"]).out.exists()
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


# -- samples -------------------------------------------------------------------------------------


def _pos(row) -> tuple[int, int] | None:
    return (row.start, row.end) if row is not None else None


def sample_viewer(out: str, inputs: list[dict], key: str) -> None:
    """One output row at a time, read at its byte offset, beside its original input record."""
    st.subheader("Samples")
    c = st.columns([1, 1, 1, 1, 3])
    pos_key = f"{key}-pos"
    cur = st.session_state.get(pos_key)
    row = None
    if c[0].button("Newest", key=f"{key}-newest", icon=":material/last_page:"):
        row = last_row(out)
    elif c[1].button("Previous", key=f"{key}-prev", icon=":material/chevron_left:"):
        ref = cur or _pos(last_row(out))
        row = (row_before(out, ref[0]) or row_at(out, ref[0])) if ref else None
    elif c[2].button("Next", key=f"{key}-next", icon=":material/chevron_right:"):
        ref = cur or _pos(last_row(out))
        row = (row_at(out, ref[1]) or row_at(out, ref[0])) if ref else None
    elif c[3].button("Random", key=f"{key}-random", icon=":material/shuffle:"):
        size = Path(out).stat().st_size if Path(out).exists() else 0
        row = row_at(out, random.randrange(size)) if size else None
        row = row or last_row(out)
    find = c[4].text_input("Find id", key=f"{key}-find", placeholder="a row id", label_visibility="collapsed")
    if find and st.session_state.get(f"{key}-found") != find:
        st.session_state[f"{key}-found"] = find
        row = find_row(out, find.strip())
        if row is None:
            st.warning(f"No row with id `{find}` in `{out}` (yet).")
    if row is None:
        row = row_at(out, cur[0]) if cur is not None else last_row(out)
    if row is None:
        st.caption(f"No complete row in `{out}` yet.")
        return
    st.session_state[pos_key] = (row.start, row.end)
    if row.record is None:
        st.error(row.error)
        return
    rid = str(row.record.get("id", ""))
    cache = st.session_state.setdefault(f"{key}-originals", {})
    if rid and rid not in cache:
        cache.clear()  # one at a time: the viewer shows one row
        cache[rid] = find_original(inputs, rid, (row.record.get("regen") or {}).get("dataset")) if inputs else None
    original = cache.get(rid)
    why = "" if original is not None else (
        "The original record was not found in the run's inputs." if inputs else
        "The run's inputs are not known (no .job.json), so the original answer cannot be shown.")
    st.caption(f"byte {fmt.count(row.start)} of `{out}`")
    blocks.sample_columns(row.record, original, original_why=why)


# -- SpecForge's own script --------------------------------------------------------------------------


@st.fragment(run_every=REFRESH_S)
def live_specforge(inp: str, out: str, stall_min: float) -> None:
    f = specforge_follower(inp, out).poll()
    if not f.exists:
        st.info(f"No output yet at `{out}` (nor its _error / _skipped files). Check the path; SpecForge "
                "creates them when the script starts writing.", icon=":material/hourglass_empty:")
        return
    if f.input_error:
        st.error(f"{f.input_error}: the total, the remaining rows and the ETA stay N/A until it can be read.")
    if f.catching_up:
        st.progress(f.read_fraction, text=f"Reading the existing output: {fmt.pct(f.read_fraction * 100)}; the rate "
                                          "and ETA start once everything written so far is read")
    snap = f.snapshot()
    blocks.progress_block(snap, f.eta())
    if f.duplicates:
        st.warning(f"{fmt.count(f.duplicates)} row(s) are in the files more than once (SpecForge's --resume counts "
                   "lines, so a crash can write a row twice); each is counted once here.")
    if f.last_completion_t is not None and time.time() - f.last_completion_t > stall_min * 60:
        st.warning(f"No new row for {fmt.duration(time.time() - f.last_completion_t)}: is the script still "
                   "running, and are its servers up?", icon=":material/warning:")
    if len(f.points) >= 2:
        from backend.regen.follow import History
        h = History()
        prev = None
        for t, done in f.points:
            rate = None if prev is None or t <= prev[0] else (done - prev[1]) / (t - prev[0])
            h.add({"t": t, "done": done, "req_s": rate})
            prev = (t, done)
        blocks.rate_charts(h, {}, key="sf")
    left, right = st.columns(2)
    with left:
        blocks.length_histogram(snap.get("answer_chars_hist"), unit="characters", key="sf")
    with right:
        blocks.error_table(snap.get("errors"))
    st.caption("SpecForge's tqdm bar moves when a request is sent; these counts are the rows in its three output "
               f"files (`{f.paths.out.name}`, `{f.paths.error.name}`, `{f.paths.skipped.name}`), read by byte offset.")
    freshness(f.polled_at, REFRESH_S, "files read")


# -- the page ------------------------------------------------------------------------------------

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
    live_specforge(inp, out, stall_min)
    sample_viewer(str(Path(out).expanduser()), [{"dataset": None, "file": Path(inp).expanduser(),
                                                 "first_turn_only": False, "max_prompt_chars": None}], key="sf")
    st.stop()

runs = _known_runs()
with st.expander("Start a regeneration", expanded=not runs, icon=":material/add:"):
    start_form()
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
live_job(chosen)
job_controls(chosen)
job_json = read_job(RunPaths.of(chosen)) or {}
sample_viewer(chosen, _input_entries(job_json), key="regen-sample")
