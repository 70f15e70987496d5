"""The Training page's curves: progress and key figures of a run, its curves (several runs overlaid), and
the accept length predicted from per-position acceptance beside the one benchmarks measured.

A small live part refreshes every :data:`REFRESH_S`: each run's shared follower reads only what was
appended (by byte offset), the log's status line is drawn, and only when a log gained records does the page
run again to draw the figures and charts.  What is built from a log (curves, predictions, figures) is kept
per version of what was read, so nothing is parsed or built twice and an idle tab costs a stat and a line.  The smoothing, x axis, log scale and outlier choices are in the URL's query."""

from __future__ import annotations

import threading
import time

import pandas as pd
import streamlit as st

from backend.train.accept import FORMULA
from backend.train.checkpoints import list_checkpoints
from backend.train.reader import trainer_label
from state.bench import BenchStore
from ui import fmt
from ui.train import charts as tc
from ui.auth import data_lock, fragment_run, live_fragment
from ui.components import freshness, path_text
from ui.linechart import line_chart
from ui.overview_query import QueryState
from ui.train.data import AcceptView, Measured, RunRef, Snapshot, follower, measured, predicted
from ui.train.series import Curves, curves, curves_csv, eta, latest_run, step_times

REFRESH_S = 1
PARTIAL_REDRAW_S = 5.0  # while a log is read from its start, what is read so far is drawn again at most this often
FRESH_MIN_S = 2.0  # a log left alone for less than three times this is never called stale
MAX_BENCH_RESULTS = 5000
SLOW_READ_S = 15.0  # benchmark results and checkpoint folders are looked at again after this long
SMOOTH_CHOICES = [round(i / 100, 2) for i in range(100)]
FIGURES_KEPT = 16


# what the choices below start at (a first visit's charts; ui.launch builds them before it)
DEFAULT_OPTS = {"smooth": 0.6, "x_mode": tc.STEP, "log_y": False, "clip": False, "temperature": 0.0, "num_steps": 3}


def controls() -> dict:
    """Smoothing, x axis, y scale and how the accept length is predicted (outside the live part: they are
    choices); all but the last two in the URL's query (``?smooth=0.8&x=relative&log=True&clip=True``)."""
    query = QueryState("training-curves")
    query.take("smooth", "train-smooth", SMOOTH_CHOICES, what="smoothing weight")
    query.take("x", "train-x", tc.X_MODES, what="x axis")
    query.take("log", "train-log-y", [True, False], what="log scale choice")
    query.take("clip", "train-clip", [True, False], what="outlier choice")
    query.show_notes()
    with st.container(horizontal=True, vertical_alignment="bottom"):
        smooth = st.slider("Smoothing (EMA weight)", 0.0, 0.99, DEFAULT_OPTS["smooth"], 0.01, key="train-smooth",
                           width=240,
                           help="exponential moving average, as TensorBoard's slider: 0 shows the values as "
                                "logged; the raw values stay faint under the smoothed line", persist_state="session")
        x_mode = st.segmented_control(
            "x axis", list(tc.X_MODES), default=DEFAULT_OPTS["x_mode"], key="train-x",
            help="step; relative: hours since each run's first logged point (overlaid runs start together); "
                 "wall time: when each point was logged, local time", persist_state="session") or tc.STEP
        log_y = st.toggle("Log scale", value=DEFAULT_OPTS["log_y"], key="train-log-y",
                          help="a logarithmic y axis (loss, lr, grad norm)", persist_state="session")
        clip = st.toggle("Ignore outliers", value=DEFAULT_OPTS["clip"], key="train-clip",
                         help="the y range leaves out the lowest and highest 2 % of the values drawn (a spike at "
                              "the start no longer flattens the rest); the points stay on the chart", persist_state="session")
        temp = st.segmented_control(
            "Serving", ["greedy", "sampling"], key="train-serving",
            default="greedy" if DEFAULT_OPTS["temperature"] == 0.0 else "sampling",
            help="greedy (temperature 0) accepts a draft token when it is the target's argmax: a_i = acc_i; "
                 "sampling accepts with probability Σ min(p_target, p_draft): a_i = acceptance_rate_i", persist_state="session") or "greedy"
        steps = st.number_input("Draft steps", 1, 64, DEFAULT_OPTS["num_steps"], key="train-num-steps", width=120,
                                help="--speculative-num-steps of the server: only that many positions can be "
                                     "accepted, so the prediction counts positions 0 … steps-1", persist_state="session")
    query.put("smooth", round(float(smooth), 2), default=DEFAULT_OPTS["smooth"])
    query.put("x", x_mode, default=DEFAULT_OPTS["x_mode"])
    query.put("log", bool(log_y), default=DEFAULT_OPTS["log_y"])
    query.put("clip", bool(clip), default=DEFAULT_OPTS["clip"])
    return {"smooth": float(smooth), "x_mode": x_mode, "log_y": bool(log_y), "clip": bool(clip),
            "temperature": 0.0 if temp == "greedy" else 1.0, "num_steps": int(steps)}


_slow: dict[object, tuple[float, object]] = {}
_slow_lock = threading.Lock()


def _every(key: object, make, ttl: float = SLOW_READ_S):
    """``make()``, looked at again only after ``ttl`` seconds (shared by the page's sessions)."""
    now = time.monotonic()
    with _slow_lock:
        hit = _slow.get(key)
        if hit is not None and now - hit[0] < ttl:
            return hit[1]
    value = make()
    with _slow_lock:
        if len(_slow) >= 64:
            _slow.clear()
        _slow[key] = (now, value)
    return value


def bench_results(rt) -> list:
    """The stored benchmark results: read again when their count changed (a result stored or deleted) or
    after :data:`SLOW_READ_S`."""
    try:
        store = BenchStore(rt.store)
        return _every(("bench", id(rt.store), store.count()), lambda: store.list(limit=MAX_BENCH_RESULTS))
    except Exception:  # a store that cannot be read leaves the measured side N/A, not the page broken
        return []


def _checkpoints(ref: RunRef) -> tuple:
    if not ref.output_dir:
        return ()
    return _every(("ckpt", str(ref.output_dir), ref.run_id),
                  lambda: list_checkpoints(ref.output_dir, ref.run_id).checkpoints)


def _snapshot(ref: RunRef) -> Snapshot | None:
    if ref.log is None:
        return None
    return follower(ref.log, ref.output_dir).poll()


def _status_line(rt, ref: RunRef, snap: Snapshot | None) -> None:
    """Which log, and how fresh (the run's state is above the tabs, with its controls)."""
    bits = []
    view = rt.supervisor.view(ref.process) if ref.process else None
    if snap is not None and (snap.generation or snap.records or snap.progress.step is not None):
        # named only from a line that generation alone prints; a progress bar alone is "unknown trainer"
        bits.append(f"{trainer_label(snap.generation)} log")
    bits.append(f"log {path_text(ref.log, bool(data_lock(rt)))}")
    st.markdown(fmt.data_markdown(" · ".join(bits)))
    if snap is None or not snap.exists:
        return
    live = view is not None and view.live
    if live:
        freshness(snap.written_at, expected_gap_s(snap), "log written")
    else:
        st.caption(f"log last written {fmt.age(time.time() - snap.written_at)}" if snap.written_at else "")


def expected_gap_s(snap: Snapshot) -> float:
    """How long a healthy run may leave its log alone: a step (a tqdm bar redraws once a step), or for logs
    that print only every N steps (Gen-3's step lines) N steps; never less than :data:`FRESH_MIN_S`."""
    s_per = snap.progress.s_per_step
    steps: list[int] = []
    for r in reversed(snap.records):
        if r.kind == "metrics" and r.split == "train" and r.step is not None and r.source != "step_line":
            if r.step not in steps:
                steps.append(r.step)
            if s_per is None and r.metrics.get("step_time_s") is not None:
                s_per = r.metrics["step_time_s"]
            if len(steps) == 2 and s_per is not None:
                break
    every = steps[0] - steps[1] if len(steps) == 2 and steps[0] > steps[1] else 1
    return max(FRESH_MIN_S, (s_per or 0.0) * every)


def _key_figures(snap: Snapshot, c: Curves, view: AcceptView, meas: list[Measured], opts: dict) -> None:
    p = snap.progress
    if p.step is not None and p.total_steps:
        frac = min(1.0, p.step / p.total_steps)
        epoch = (f" · epoch {p.epoch + 1} of {p.num_epochs}" if p.epoch is not None and p.num_epochs
                 else "")
        st.progress(frac, text=f"**{fmt.count(p.step)} of {fmt.count(p.total_steps)} steps** "
                               f"({fmt.pct(frac * 100)}){epoch}")
    elif p.step is not None:
        st.progress(0.0, text=f"**step {fmt.count(p.step)}**: the log does not say the total yet")
    cols = st.columns(5)
    rate = f"{p.s_per_step:.2f} s/step" if p.s_per_step else None
    cols[0].metric("step", fmt.count(p.step) if p.step is not None else fmt.NA,
                   delta=rate, delta_color="off", delta_arrow="off",
                   help=(f"of {fmt.count(p.total_steps)}; " if p.total_steps else "total not known yet; ")
                   + "speed from tqdm's rate")
    e = eta(p, c)
    if p.ended is not None:
        cols[1].metric("ETA", "ended", help=e.basis)
    elif e.point_s == 0:
        cols[1].metric("ETA", "done", help=e.basis)
    else:
        band = fmt.eta_range(e.low_s, e.high_s) if e.low_s != e.high_s else fmt.duration(e.point_s)
        cols[1].metric("ETA", band,
                       delta=f"point {fmt.duration(e.point_s)}" if e.point_s is not None else None,
                       delta_color="off", delta_arrow="off", help=e.basis)
    loss = c.train.get("loss")
    last, prev = (loss.last(), loss.before_last()) if loss else (None, None)
    cols[2].metric("loss", f"{last:.3f}" if last is not None else fmt.NA,
                   delta=f"{last - prev:+.3f} vs previous log" if last is not None and prev is not None else None,
                   delta_color="inverse", help="the latest logged loss; the change since the one before"
                   if loss else "N/A: the log has no loss value yet")
    lat, pre = view.latest, view.previous
    cols[3].metric("predicted accept length", fmt.accept_len(lat.accept_length if lat else None),
                   delta=f"{lat.accept_length - pre.accept_length:+.2f} tokens vs previous log" if lat and pre else None,
                   help=f"{FORMULA} with a_i = {view.metric}_i of the latest logged step: a prediction from "
                        "training metrics, not a measurement" if lat else
                        f"N/A: the log has no {view.metric}_0 yet")
    m = meas[-1] if meas else None
    there = _predicted_at(view).get(m.step) if m is not None and m.step is not None else None
    cols[4].metric("measured accept_len", fmt.accept_len(m.accept_len if m else None),
                   delta=(f"{m.accept_len - there:+.2f} tokens vs predicted at step {m.step:,.0f}"
                          if m is not None and there is not None else None),
                   delta_color="off", delta_arrow="off",
                   help=(f"benchmark #{m.result_id} of {m.checkpoint} on {m.server or 'a server'}" if m else
                         "N/A: no benchmark in this workspace served one of this run's checkpoints"))
    if lat is not None:
        rates = " · ".join(f"a{i} = {a:.2f}" for i, a in enumerate(lat.rates))
        used = min(len(lat.rates), opts["num_steps"])
        at = f"step {fmt.count(lat.step)}" if lat.step is not None else f"epoch {lat.epoch}"
        st.caption(f"**Predicted accept length** = {FORMULA} = **{lat.accept_length:.2f}**, with a_i = "
                   f"`{view.metric}_i` at {at} ({rates}); {used} of {len(lat.rates)} positions counted for "
                   f"{opts['num_steps']} draft steps. {view.why[:1].upper() + view.why[1:]}. A prediction from "
                   "training metrics, not a measurement: the 1 is the token every verification adds (SGLang's "
                   "accept len counts it).")


def _predicted_at(view: AcceptView) -> dict[float, float]:
    """The predicted accept length by step (epoch for Gen-1)."""
    return {float(p.step if p.step is not None else p.epoch): p.accept_length for p in view.history
            if p.step is not None or p.epoch is not None}


def _measured_table(view: AcceptView, meas: list[Measured]) -> None:
    """Each benchmark of the run's checkpoints beside the accept length predicted at the checkpoint's step."""
    if not meas:
        return
    at_step = _predicted_at(view)
    rows = []
    for m in reversed(meas):  # newest first
        pred = at_step.get(m.step) if m.step is not None else None
        rows.append({"checkpoint": m.checkpoint, "step": fmt.count(m.step) if m.step is not None else fmt.NA,
                     "measured accept_len": fmt.accept_len(m.accept_len), "predicted there": fmt.accept_len(pred),
                     "server": m.server or fmt.NA, "concurrency": fmt.count(m.concurrency),
                     "benchmark": f"#{m.result_id}" if m.result_id is not None else fmt.NA})
    with st.expander(f"Benchmarks of this run's checkpoints ({len(meas)})", icon=":material/speed:"):
        st.dataframe(pd.DataFrame(rows), hide_index=True)
        st.caption("predicted there: the prediction from the per-position acceptance logged at the checkpoint's "
                   "step (N/A when no acceptance was logged at that step)")


def _unparsed(snap: Snapshot, key: str, *, lines: bool = True) -> None:
    s = snap.stats
    text = (f"read {fmt.count(s.lines)} lines and bar redraws: {fmt.count(s.records)} records, "
            f"{fmt.count(s.ignored)} other lines")
    if s.unparsed or s.values_rejected:
        text += f", :orange[{fmt.count(s.unparsed)} not readable, {fmt.count(s.values_rejected)} values dropped]"
    st.caption(fmt.data_markdown(text + (f" · {snap.tracker_note}" if snap.tracker_note else "")))
    if snap.unparsed and lines:  # the log's own lines
        with st.expander(f"Lines not read ({fmt.count(len(snap.unparsed))} latest)"):
            st.dataframe(pd.DataFrame([{"line": u.line_no, "why": u.reason, "text": u.text} for u in snap.unparsed]),
                         hide_index=True, key=f"{key}-unparsed")


def _missing(what: str, why: str) -> None:
    st.caption(f"**{what}**: N/A — {why}")


Row = tuple[RunRef, "Snapshot | None", Curves, AcceptView, list[Measured]]


def _rows(rt, refs: list[RunRef], opts: dict, *, newest_run: bool = False) -> list[Row]:
    """Each run's latest snapshot (its shared follower reads only what was appended), curves, prediction and
    measured benchmarks, each built once per version of what was read; ``newest_run``: only what the newest
    run appended to the log wrote."""
    results = bench_results(rt)
    rows: list[Row] = []
    for ref in refs:
        if ref.log is None:
            rows.append((ref, None, Curves(), AcceptView("acc", "", ()), []))
            continue
        f = follower(ref.log, ref.output_dir)
        snap = f.poll()
        if not snap.exists:
            rows.append((ref, snap, Curves(), AcceptView("acc", "", ()), []))
            continue

        recs, times = latest_run(snap.records, snap.times) if newest_run else (snap.records, snap.times)
        part = len(recs) != len(snap.records)  # a log of one run: the whole log's curves serve both parts
        c = f.memo(snap, ("curves", part), lambda: curves(recs, times, snap.tracker_records))
        view = f.memo(snap, ("predicted", part, opts["temperature"], opts["num_steps"]),
                      lambda: predicted(recs, snap.generation, temperature=opts["temperature"],
                                        num_steps=opts["num_steps"]))
        rows.append((ref, snap, c, view, measured(results, _checkpoints(ref))))
    return rows


def prepare(rt, ref: RunRef) -> None:
    """Build what a first visit to run ``ref``'s curves draws with the default choices (its figures from the
    newest run, every run's curves, the prediction and the charts), kept where the page finds them: the
    follower's memo and the charts' cache, valid while nothing is appended.  Called by ui.launch once the
    log is read, before anyone asks."""
    opts = dict(DEFAULT_OPTS)
    _rows(rt, [ref], opts, newest_run=True)
    _panels(_rows(rt, [ref], opts), opts)


SEEN_KEY = "train-curves-seen"  # (runs, their data's versions, stored results) the page last drew


def live_curves(rt, refs: list[RunRef], opts: dict) -> None:
    """The first run's progress and figures, and every run's curves overlaid: drawn when the page runs, and
    again (the page runs again) when a run's log gained records; between, only the log's status refreshes."""
    if not refs:
        st.info("Choose a run to show above.", icon=":material/info:")
        return
    _watch(rt, refs)
    _figures_part(rt, refs, opts)
    _charts_part(rt, refs, opts)


def _snapshots(refs: list[RunRef]) -> list[Snapshot | None]:
    """What each run's follower has read, reading what was appended."""
    return [follower(r.log, r.output_dir).poll() if r.log is not None else None for r in refs]


def redraw_now(changed: bool, catching_up: bool, last_partial: float | None, now: float) -> bool:
    """Whether the live part runs the page again: when a run's log gained records (or the stored benchmarks
    changed); while a log is still read from its start, at most every :data:`PARTIAL_REDRAW_S` (what is read
    so far, drawn again), and at once when it is read.  Each redraw of a log being read builds every chart of
    it again, in the same process as the thread that reads it."""
    if not changed:
        return False
    return not catching_up or last_partial is None or now - last_partial >= PARTIAL_REDRAW_S


@live_fragment(run_every=REFRESH_S)
def _watch(rt, refs: list[RunRef]) -> None:
    """Every :data:`REFRESH_S`: the first run's log status (which log, how fresh), and the page runs again
    when any run's log gained records (or the stored benchmarks changed): a refresh with nothing new reads
    a few bytes and draws one line."""
    from ui.train.follow import recheck_followed

    recheck_followed(rt, refs)
    key, partial_key = SEEN_KEY, "train-curves-partial-at"
    try:
        results = BenchStore(rt.store).count()
    except Exception:  # the measured side stays as it was
        results = None
    snaps = _snapshots(refs)
    seen = (tuple(r.name for r in refs), tuple(s.version if s is not None else -1 for s in snaps), results)
    before = st.session_state.get(key)
    catching_up = any(s is not None and s.catching_up for s in snaps)
    chosen = before is None or before[0] != seen[0]  # another choice of runs: the page run that made it drew them
    # within a full run (a click, a choice) the charts below are drawn after this, from data at least as new
    # as ``seen``: recorded, and the page is not run a second time for it
    drawn_below = chosen or not fragment_run()
    if drawn_below or redraw_now(before != seen, catching_up, st.session_state.get(partial_key), time.monotonic()):
        st.session_state[key] = seen
        st.session_state[partial_key] = time.monotonic() if catching_up else None  # drawn as read so far
        if not drawn_below:
            st.rerun(scope="app")
    # else: a change while a log is read stays pending (``seen`` is not kept) until the next redraw
    ref, snap = refs[0], snaps[0]
    _status_line(rt, ref, snap)
    if snap is not None and snap.catching_up and snap.size:  # here, as the page runs again only once it is read
        st.progress(min(1.0, snap.offset / snap.size), text=f"reading the log: {snap.offset / 2**20:,.0f} of "
                    f"{snap.size / 2**20:,.0f} MiB (what is read so far is shown)")


def _figures_part(rt, refs: list[RunRef], opts: dict) -> None:
    ref, snap, c, view, meas = _rows(rt, refs[:1], opts, newest_run=True)[0]
    where = path_text(ref.log, bool(data_lock(rt)))
    if snap is None or not snap.exists:
        st.info(fmt.data_markdown(f"No log yet at {where}: the run writes it when it starts.") if ref.log else
                "This run has no log path.", icon=":material/hourglass_empty:")
    elif not any(r.kind in ("metrics", "progress") for r in latest_run(snap.records, snap.times)[0]):
        st.info(fmt.data_markdown(f"{where} has no training line yet ({fmt.count(snap.stats.lines)} other lines): "
                                  "SpecForge prints its first bar or metrics once the data is prepared."),
                icon=":material/hourglass_empty:")
    else:
        _key_figures(snap, c, view, meas, opts)
        _measured_table(view, meas)


_figures: dict[tuple, dict] = {}
_figures_lock = threading.Lock()


def _panels(rows: list[Row], opts: dict) -> dict:
    """The charts of ``rows`` (title → figure, or the reason it is not drawn), built once per version of
    every run's data and choice of axes (kept for the page's sessions)."""
    key = (tuple((r.name, str(r.log), str(r.output_dir), id(follower(r.log, r.output_dir)) if r.log else None,
                  s.version if s is not None else -1, tuple(m.result_id for m in meas))
                 for r, s, _, _, meas in rows),
           opts["smooth"], opts["x_mode"], opts["log_y"], opts["clip"], opts["temperature"], opts["num_steps"])
    with _figures_lock:
        hit = _figures.get(key)
    if hit is not None:
        return hit
    shown = [(r.name, cv) for r, s, cv, _, _ in rows if s is not None and s.exists and s.records]
    smooth, x_mode = opts["smooth"], opts["x_mode"]
    out: dict[str, tuple] = {}
    out["loss"] = (tc.metric_chart("Loss", shown, "loss", x_mode, smooth=smooth, y_title="loss"),
                   "Loss", "no loss in the log (Gen-1 prints per-position pLoss only)")
    accept = [(r.name, v, m, step_times(cv), cv.t0) for r, s, cv, v, m in rows if s is not None and s.exists]
    out["accept"] = (tc.accept_chart(accept, x_mode, smooth=0.0),  # as computed: the figure above reads the same
                     "Accept length", f"no {rows[0][3].metric}_i logged yet and no benchmark of this run's checkpoints")
    out["acc-pos"] = (tc.position_chart("acc_i per TTT position", shown, "acc", x_mode, smooth=smooth),
                      "acc_i per TTT position", "not in the log")
    out["acceptance_rate-pos"] = (
        tc.position_chart("acceptance_rate_i per TTT position", shown, "acceptance_rate", x_mode, smooth=smooth),
        "acceptance_rate_i per TTT position", "not in the log (Gen-1 and SpecForge 0.2.0 log acc_i only)")
    out["lr"] = (tc.metric_chart("Learning rate", shown, "lr", x_mode, smooth=0.0, y_title="lr", fmt=".2e",
                                 eval_too=False), "Learning rate",
                 "Gen-2 prints it to its tracker only: run with `--report-to tensorboard` and its files under "
                 "`<output>/runs` are read")
    out["time"] = (tc.metric_chart("Step time", shown, "step_time_s", x_mode, smooth=smooth, y_title="s per step",
                                   fmt=".2f", eval_too=False), "Step time", "not in the log")
    for m, title in (("acc", "acc (all positions)"), ("acceptance_rate", "acceptance_rate (mean)"),
                     ("grad_norm", "grad norm")):
        if any(m in cv.train for _, cv in shown):  # optional extras: shown only where the log has them
            out[m] = (tc.metric_chart(title, shown, m, x_mode, smooth=smooth, y_title=m), title, "")
    for key_, (fig, _, _) in out.items():
        if fig is not None:
            tc.scale_y(fig, log=opts["log_y"] and key_ not in ("acc-pos", "acceptance_rate-pos"), clip=opts["clip"])
    with _figures_lock:
        if len(_figures) >= FIGURES_KEPT:
            _figures.pop(next(iter(_figures)))
        _figures[key] = out
    return out


def _charts_part(rt, refs: list[RunRef], opts: dict) -> None:
    """The charts, two a row, drawn by uPlot (ui/linechart.py): each in a few milliseconds, all at once."""
    rows = _rows(rt, refs, opts)
    snap = rows[0][1]
    if not any(s is not None and s.exists and s.records for _, s, _, _, _ in rows):
        return
    panels = _panels(rows, opts)
    order = list(panels)
    for i in range(0, len(order), 2):
        for col, key in zip(st.columns(2), order[i:i + 2]):
            fig, title, why = panels[key]
            with col:
                if fig is not None:
                    line_chart(fig, key=f"train-chart-{key}")
                else:
                    _missing(title, why)
    shown = [(r.name, cv) for r, s, cv, _, _ in rows if s is not None and s.exists and s.records]
    with st.container(horizontal=True, vertical_alignment="center"):
        st.download_button(
            "Download CSV", data=lambda: curves_csv(shown), file_name=_csv_name(shown), mime="text/csv",
            key="train-csv", icon=":material/download:", on_click="ignore",
            help="every point of every curve of the runs shown (not only the points drawn): run, split, metric, "
                 "step, wall time (UTC), seconds since the run's first point, value")
        if snap is not None and snap.exists:
            _unparsed(snap, "train-log", lines=not data_lock(rt))


def _csv_name(shown: list[tuple[str, Curves]]) -> str:
    names = "+".join(n for n, _ in shown)[:80] or "training"
    return "".join(ch if ch.isalnum() or ch in "-_+." else "_" for ch in names) + "-curves.csv"
