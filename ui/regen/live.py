"""The Regeneration page's live parts: a job's figures, a SpecForge run's figures, the sample viewer."""

from __future__ import annotations

import random
import time
from pathlib import Path

import streamlit as st

from backend.regen import control
from backend.regen.follow import History, progress_follower
from backend.regen.output import RunFiles
from backend.regen.follow_specforge import specforge_follower
from backend.regen.samples import find_original, find_row, input_entries, last_row, read_job, row_at, row_before
from ui import fmt
from ui.regen import blocks as blocks
from ui.regen import cost as regen_cost
from ui.auth import control_lock, data_lock, live_fragment, show_data_lock
from ui.components import code_span, freshness, path_text

REFRESH_S = 2
SAMPLE_REFRESH_S = 5


def known_runs(rt) -> dict[str, str]:
    """Output paths of the runs this workspace knows: its jobs, and progress logs in its outputs."""
    found: dict[str, str] = {}
    for job in rt.jobs():
        if job.meta.get("kind") == "regen" and job.meta.get("out"):
            found[job.meta["out"]] = job.name
    for pattern in ("*.progress.jsonl", "*/*.progress.jsonl", "*/*/*.progress.jsonl"):
        for p in sorted(rt.workspace.outputs_dir.glob(pattern)):
            out = str(p.with_name(p.name[: -len(".progress.jsonl")] + ".jsonl"))
            found.setdefault(out, control.job_name(Path(out)))
    return found


def ended_run(snap: dict | None, view) -> bool:
    """The run is over: its last snapshot says so, or the dashboard's process for it has ended
    (a stopped or killed job's last snapshot may still say running or stopping)."""
    if view is not None and not view.live:
        return True
    return snap is not None and snap.get("state") not in control.LIVE_STATES


@live_fragment(run_every=REFRESH_S)
def live_job(rt, out: str, controls=None) -> None:
    """The run's one state, its controls (``controls(rt, out, snap)``, the page's buttons) and its key
    figures first, so all three are in the first screen; then the bars, charts, servers and errors."""
    f = progress_follower(out).poll()
    snap = f.latest
    job = control.job_for(rt, out)
    view = rt.supervisor.view(job.name) if job is not None else None
    hidden = bool(data_lock(rt))  # paths and the log's words: only for sessions that may see them
    ended = ended_run(snap, view)
    state_line = None
    if view is not None:
        badge = fmt.view_badge(view)  # a job the user stopped reads STOPPED, not its exit code
        end = ""
        if not view.live:
            if snap is None or snap.get("state") in control.LIVE_STATES:
                # one state: the process's end, not a snapshot written before it (still "stopping")
                state_line = badge.markdown()
            else:  # the snapshot's own end (done, paused, failed) is the state; the exit code beside the name
                end = f" · {badge.markdown()}"
        st.caption(fmt.data_markdown(f"**{view.name}**" + end
                                     + (f" · pid {view.pid}" if view.pid and view.live else "")
                                     + f" · log {path_text(view.log_path, hidden)}"))
    draw_controls = (lambda: controls(rt, out, snap or {})) if controls is not None else None
    if snap is None:
        if state_line is not None:
            st.markdown(fmt.data_markdown(state_line))
        if draw_controls is not None:
            draw_controls()
        st.info(fmt.data_markdown(f"No progress yet: {path_text(f.paths.progress, hidden)} is empty or missing. "
                                  "A job writes its first snapshot when it starts; its log (above) says what it "
                                  "is doing."), icon=":material/hourglass_empty:")
        return
    running = view is not None and view.state.value == "RUNNING"
    stall_s = float(job.meta.get("stall_after_s") or 600) if job is not None else 600.0
    alert = None if ended else f.stall(view.name if view else Path(out).name, running=running, after_s=stall_s)
    blocks.progress_block(snap, f.eta(), ended=ended, state_line=state_line, controls=draw_controls)
    regen_cost.cost_line(rt, out, view, snap, f.history)
    if alert is not None:
        st.warning(fmt.data_markdown(f"**{alert.title}**. {alert.message} Likely: " + "; ".join(alert.causes)),
                   icon=":material/warning:")
    if f.bad_lines:
        st.warning(f"{fmt.count(f.bad_lines)} line(s) of the progress log could not be read and were skipped"
                   + ("" if hidden else fmt.data_markdown(f"; the last: {f.last_bad}")))
    blocks.dataset_bars(snap)
    left, right = st.columns([3, 2])
    with left:
        blocks.speed_chart(f.history, blocks.server_series(snap, rt.fleet), key="regen")
    with right:
        blocks.length_histogram(snap.get("completion_tokens_hist"), unit="tokens", key="regen")
    blocks.server_lines(snap, ended=ended, fleet=rt.fleet)
    blocks.error_table(snap.get("errors"), examples=not hidden)
    if not ended:
        freshness(snap.get("t"), REFRESH_S, "progress logged")
    else:
        st.caption(fmt.data_markdown(f"last snapshot {fmt.age(time.time() - (snap.get('t') or time.time()))} · "
                                     f"{path_text(f.paths.progress, hidden)}"))


def _pos(row) -> tuple[int, int] | None:
    return (row.start, row.end) if row is not None else None


def sample_viewer(out: str, inputs: list[dict] | None, key: str, *, rt=None) -> None:
    """``inputs``: the run's input files (see samples.input_entries); None: those its .job.json names,
    read when a row is shown (a job started after the page was opened writes it then).  Prompts and
    answers are shown only to a session that may see them (nothing is read for another)."""
    st.subheader("Samples")
    if show_data_lock(rt):
        return
    _samples(out, inputs, key, rt)


@live_fragment(run_every=SAMPLE_REFRESH_S)
def _samples(out: str, inputs: list[dict] | None, key: str, rt=None) -> None:
    """One output row at a time, beside its original input record.

    While "Follow newest" is on it shows the newest row written, every few seconds; Previous, Next,
    Random and Find turn it off, so the view stays on the row they chose until Newest or the toggle
    turns it on again."""
    if data_lock(rt):  # the session changed since the page was drawn
        st.rerun(scope="app")
    bar = st.container(horizontal=True, vertical_alignment="center")
    c = [bar] * 5
    pos_key, follow_key = f"{key}-pos", f"{key}-follow"
    cur = st.session_state.get(pos_key)
    row = None
    moved = True  # a button or Find chose the row: stay on it
    if c[0].button("Newest", key=f"{key}-newest", icon=":material/last_page:"):
        row, moved = last_row(out), False
        st.session_state[follow_key] = True
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
    else:
        moved = False
    find = c[4].text_input("Find id", key=f"{key}-find", placeholder="find a row id", label_visibility="collapsed",
                           width=220)
    if find and st.session_state.get(f"{key}-found") != find:
        st.session_state[f"{key}-found"] = find
        row, moved = find_row(out, find.strip()), True
        if row is None:
            st.warning(fmt.data_markdown(f"No row with id {code_span(find)} in {code_span(out)} (yet)."))
    if moved:
        st.session_state[follow_key] = False
    st.session_state.setdefault(follow_key, True)
    follow = bar.toggle("Follow newest", key=follow_key,
                        help="show the newest row as the job writes it; off: stay on the row shown")
    raw = bar.toggle("Raw text", key=f"{key}-raw", help="show the texts as they are, instead of as Markdown")
    if row is None:
        row = last_row(out) if follow or cur is None else row_at(out, cur[0])
    if row is None:
        st.caption(fmt.data_markdown(f"No complete row in {code_span(out)} yet."))
        return
    st.session_state[pos_key] = (row.start, row.end)
    if row.record is None:
        st.error(fmt.data_markdown(row.error))
        return
    rid = str(row.record.get("id", ""))
    cache = st.session_state.setdefault(f"{key}-originals", {})
    if rid in cache:
        original, known = cache[rid]
    else:
        ins = inputs if inputs is not None else input_entries(read_job(RunFiles.of(out)) or {})
        dataset = (row.record.get("regen") or {}).get("dataset")
        original, known = (find_original(ins, rid, dataset) if ins and rid else None), bool(ins)
        if known:  # inputs not known yet (no .job.json so far): look again next time
            cache.clear()  # one at a time: the viewer shows one row
            cache[rid] = (original, known)
    why = "" if original is not None else (
        "The original record was not found in the run's inputs." if known else
        "The run's inputs are not known (no .job.json), so the original answer cannot be shown.")
    newest = _pos(last_row(out)) == (row.start, row.end) if not follow else True
    st.caption(fmt.data_markdown(f"row id {code_span(rid) if rid else fmt.NA}"
                                 + (" · the newest row written" if newest else "")
                                 + (" · following the newest" if follow else " · staying on this row")))
    blocks.sample_columns(row.record, original, original_why=why, raw=raw)


@live_fragment(run_every=REFRESH_S)
def live_specforge(inp: str, out: str, stall_min: float, rt=None) -> None:
    """A SpecForge run followed by the paths typed on the page (resolved and allowed there): the page runs
    again, asking anew, once this session may no longer read typed paths."""
    if rt is not None and control_lock(rt):
        st.rerun(scope="app")
    f = specforge_follower(inp, out).poll()
    if not f.exists:
        st.info(fmt.data_markdown(f"No output yet at {code_span(out)} (nor its _error / _skipped files). Check "
                                  "the path; SpecForge creates them when the script starts writing."),
                icon=":material/hourglass_empty:")
        return
    if f.input_error:
        st.error(fmt.data_markdown(f"{f.input_error}: the total, the remaining rows and the ETA stay N/A until it "
                                   "can be read."))
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
    h = History()
    if len(f.points) >= 2:
        prev = None
        for t, done in f.points:
            rate = None if prev is None or t <= prev[0] else (done - prev[1]) / (t - prev[0])
            h.add({"t": t, "done": done, "req_s": rate})
            prev = (t, done)
    left, right = st.columns([3, 2])
    with left:
        if len(h):
            blocks.speed_chart(h, {}, key="sf")
    with right:
        blocks.length_histogram(snap.get("answer_chars_hist"), unit="characters", key="sf")
    blocks.error_table(snap.get("errors"), examples=not data_lock(rt))
    st.caption(fmt.data_markdown(
        "SpecForge's tqdm bar moves when a request is sent; these counts are the rows in its three output files "
        f"({code_span(f.paths.out.name)}, {code_span(f.paths.error.name)}, {code_span(f.paths.skipped.name)}), "
        "read by byte offset."))
    freshness(f.polled_at, REFRESH_S, "files read")
