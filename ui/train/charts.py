"""The Training page's charts (plotly, the shared template of ui/charts.py): a metric per run, a metric
per TTT position, and the accept length predicted beside the one measured.

The x axis is the step, the time since the run's first logged point (hours; runs overlaid start
together), or the wall time.  Each trace is drawn from at most :data:`MAX_POINTS` points: min/max buckets
over the whole curve (numpy), so spikes survive and a gap stays a gap; the full data stays with the page
(its CSV).  The y axis can be logarithmic, and can leave outliers out of its range (:func:`scale_y`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import numpy as np
import plotly.graph_objects as go

from ui import charts
from ui.train.series import Curves, Series, ema

STEP, REL, WALL = "step", "relative", "wall time"
X_MODES = (STEP, REL, WALL)
MAX_POINTS = 1500  # per trace: min/max buckets (spikes survive), about one bucket per pixel of a half-page chart
LAYOUT_TITLE = "Training chart"  # the title of the one shared layout (each chart sets its own)
CLIP_QUANTILES = (0.02, 0.98)  # the y range with outliers left out: these quantiles of the values shown, padded
# positions in a fixed order of well-separated colours (position 0 always the same blue)
POSITION_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                    "#bcbd22", "#17becf")
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")


def new_figure(title: str, x_mode: str, *, y_title: str | None = None, x_is_epoch: bool = False,
               height: int = 300) -> go.Figure:
    # the shared layout is built (and checked by plotly, a third of a second) once per kind of figure: one
    # layout for every training chart, the title and y title set on the copy
    fig = charts.figure(LAYOUT_TITLE, y_title=None, height=height, range_buttons=x_mode == WALL)
    fig.layout.title.text = title
    if y_title:
        fig.layout.yaxis.title.text = y_title
    if x_mode == STEP:
        fig.update_xaxes(title_text="epoch" if x_is_epoch else "step")
    elif x_mode == REL:
        fig.update_xaxes(title_text="hours since the run's first point")
    return fig


def decimate(x: np.ndarray, y: np.ndarray, max_points: int = MAX_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """At most about ``max_points`` of the points (x, y): per bucket of consecutive points the lowest and the
    highest, in their order, and the first missing value (NaN) of a bucket that has one, so a line never
    bridges a gap."""
    n = len(y)
    if n <= max_points:
        return x, y
    buckets = max(1, max_points // 2 - 1)
    size = -(-n // buckets)
    pad = buckets * size - n
    yy = np.concatenate([y, np.full(pad, np.nan)]).reshape(buckets, size)
    missing = np.isnan(yy)
    if pad:
        missing[-1, size - pad:] = False  # the padding is no gap
    lo = np.where(np.isnan(yy), np.inf, yy).argmin(axis=1)
    hi = np.where(np.isnan(yy), -np.inf, yy).argmax(axis=1)
    has = ~np.isnan(yy).all(axis=1)
    base = np.arange(buckets) * size
    keep = [np.array([0, n - 1]), base[has] + lo[has], base[has] + hi[has]]  # the line spans the whole curve
    gaps = missing.any(axis=1)
    if gaps.any():
        keep.append(base[gaps] + missing[gaps].argmax(axis=1))
    idx = np.unique(np.concatenate(keep))
    idx = idx[idx < n]
    return x[idx], y[idx]


def _xy(s: Series, x_mode: str, values: Sequence[float | None], t0: float | None = None) -> tuple[list | np.ndarray,
                                                                                               np.ndarray]:
    y = np.asarray(values, dtype=float)
    x = np.asarray(s.steps if x_mode == STEP else s.times, dtype=float)
    if not len(y):
        return [], y
    keep = ~(np.isnan(x) & ~np.isnan(y))  # a point without a place on this axis (no time known) is left out
    x, y = x[keep], y[keep]
    if np.isnan(x).any():  # a gap's x is taken from its neighbour (the gap stays: its y is missing)
        ok = ~np.isnan(x)
        x = x[np.maximum.accumulate(np.where(ok, np.arange(len(x)), 0))] if ok.any() else np.zeros_like(x)
    x, y = decimate(x, y)
    if x_mode == REL:
        return (x - (t0 if t0 is not None else (x[0] if len(x) else 0.0))) / 3600.0, y
    if x_mode == WALL:
        return [datetime.fromtimestamp(v) for v in x.tolist()], y
    return x, y


def add_curve(fig: go.Figure, s: Series, name: str, x_mode: str, *, colour: str, smooth: float = 0.0,
              dash: str = "solid", fmt: str = ".3f", group: str | None = None, t0: float | None = None) -> None:
    """The curve, and under it the raw values faint when it is smoothed."""
    if not len(s):
        return
    if smooth > 0:
        x, y = _xy(s, x_mode, s.values, t0)
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines", connectgaps=False, opacity=0.25, showlegend=False,
                                 line=dict(color=colour, dash=dash, width=1), hoverinfo="skip", legendgroup=group))
    mode = "lines+markers" if len(s) < 3 else "lines"
    x, y = _xy(s, x_mode, ema(s.values, smooth) if smooth > 0 else s.values, t0)
    fig.add_trace(go.Scatter(x=x, y=y, mode=mode, connectgaps=False, name=name, legendgroup=group,
                             line=dict(color=colour, dash=dash), hovertemplate=f"%{{y:{fmt}}}<extra>{name}</extra>"))


def scale_y(fig: go.Figure, *, log: bool = False, clip: bool = False) -> None:
    """A logarithmic y axis (values at or below 0 cannot be drawn on it and are left out of the range), and
    with ``clip`` a range that leaves outliers out (the 2nd to the 98th percentile of the values drawn,
    padded), as TensorBoard's "ignore outliers in chart scaling"."""
    if log:
        fig.update_yaxes(type="log", range=None)
    if not clip:
        return
    ys = [np.asarray(t.y, dtype=float) for t in fig.data if t.y is not None and t.opacity != 0.25]
    vals = np.concatenate(ys) if ys else np.array([])
    vals = vals[np.isfinite(vals)]
    if log:
        vals = np.log10(vals[vals > 0])
    if len(vals) < 5:
        return
    lo, hi = np.quantile(vals, CLIP_QUANTILES)
    span = float(hi - lo)
    # a flat curve (a constant step time) has no spread, only rounding: a band around it, not a range of width 0
    pad = span * 0.1 if span > 1e-9 * max(1.0, abs(float(hi))) else abs(float(hi)) * 0.05 if abs(hi) > 1e-9 else 0.1
    fig.update_yaxes(range=[float(lo - pad), float(hi + pad)], autorange=False)


def mark_restarts(fig: go.Figure, restarts: Sequence[tuple[float | None, float | None]], x_mode: str,
                  t0: float | None = None) -> None:
    if x_mode == WALL:
        charts.mark_restarts(fig, [t for _, t in restarts if t is not None], label="restart")
        return
    if x_mode == REL:
        for _, t in restarts:
            if t is not None and t0 is not None:
                fig.add_vline(x=(t - t0) / 3600.0, line_dash="dot", line_color="#9333ea", line_width=1,
                              annotation_text="restart", annotation_position="top left",
                              annotation_font=dict(size=10, color="#9333ea"))
        return
    for step, _ in restarts:
        if step is not None:
            fig.add_vline(x=step, line_dash="dot", line_color="#9333ea", line_width=1,
                          annotation_text=f"resumed at {step:,.0f}", annotation_position="top left",
                          annotation_font=dict(size=10, color="#9333ea"))


def metric_chart(title: str, runs: Sequence[tuple[str, Curves]], metric: str, x_mode: str, *, smooth: float,
                 y_title: str | None = None, fmt: str = ".3f", eval_too: bool = True) -> go.Figure | None:
    """``metric`` of every run (a colour per run); its evaluation values as markers. None when no run has it."""
    if not any(metric in c.train or metric in c.eval for _, c in runs):
        return None
    fig = new_figure(title, x_mode, y_title=y_title, x_is_epoch=all(c.x_is_epoch for _, c in runs))
    for name, c in runs:
        colour = charts.colour_for(name)
        if metric in c.train:
            add_curve(fig, c.train[metric], name if len(runs) > 1 else metric, x_mode, colour=colour,
                      smooth=smooth, fmt=fmt, group=name, t0=c.t0)
        if eval_too and metric in c.eval:
            s = c.eval[metric]
            x, y = _xy(s, x_mode, s.values, c.t0)
            fig.add_trace(go.Scatter(x=x, y=y, mode="markers", name=f"{name} eval" if len(runs) > 1 else "eval",
                                     marker=dict(color=colour, symbol="diamond", size=8), legendgroup=name,
                                     hovertemplate=f"%{{y:{fmt}}}<extra>eval</extra>"))
        if len(runs) == 1:
            mark_restarts(fig, c.restarts, x_mode, c.t0)
    if sum(t.showlegend is not False for t in fig.data) == 1:
        fig.update_layout(showlegend=False)  # one line: the title says what it is
    return fig


def position_chart(title: str, runs: Sequence[tuple[str, Curves]], base: str, x_mode: str, *, smooth: float,
                   split: str = "train") -> go.Figure | None:
    """``{base}_{i}`` per TTT position: a colour per position, a dash per run."""
    found = [(name, c, c.positions(base, split)) for name, c in runs]
    if not any(pos for _, _, pos in found):
        return None
    fig = new_figure(title, x_mode, y_title=base, x_is_epoch=all(c.x_is_epoch for _, c in runs))
    for k, (name, c, pos) in enumerate(found):
        src = c.train if split == "train" else c.eval
        for i in pos:
            label = f"pos {i}" if len(runs) == 1 else f"{name} · pos {i}"
            add_curve(fig, src[f"{base}_{i}"], label, x_mode, colour=POSITION_COLOURS[i % len(POSITION_COLOURS)],
                      smooth=smooth, dash=DASHES[k % len(DASHES)], group=label, t0=c.t0)
        if len(runs) == 1:
            mark_restarts(fig, c.restarts, x_mode, c.t0)
    fig.update_yaxes(range=[0, 1.02])
    charts.legend_below(fig)
    return fig


def accept_chart(runs: Sequence[tuple], x_mode: str, *, smooth: float) -> go.Figure | None:
    """Predicted accept length (1 + a0 + a0·a1 + …) over the run, and the benchmarks' measured accept_len
    of its checkpoints as points at the checkpoint's step.  ``runs``: (name, prediction, measured,
    time of each step[, time of the run's first point]) — the step times place the points on a time axis."""
    if not any(r[1].history or r[2] for r in runs):
        return None
    fig = new_figure("Accept length: predicted and measured", x_mode, y_title="accept length")
    for name, view, meas, step_time, *rest in runs:
        t0 = rest[0] if rest else None
        colour = charts.colour_for(name)
        s = Series()
        for p in view.history:
            x = p.step if p.step is not None else p.epoch
            s.add(float(x) if x is not None else None, step_time.get(float(x)) if x is not None else None,
                  p.accept_length)
        label = f"{name} predicted" if len(runs) > 1 else "predicted (1 + a0 + a0·a1 + …)"
        add_curve(fig, s, label, x_mode, colour=colour, smooth=smooth, fmt=".2f", group=name, t0=t0)
        pts = [(m.step if x_mode == STEP else step_time.get(m.step) if m.step is not None else m.started_at, m)
               for m in meas]
        pts = [(x, m) for x, m in pts if x is not None]
        if pts:
            xs = [x if x_mode == STEP else (x - (t0 or 0.0)) / 3600.0 if x_mode == REL else datetime.fromtimestamp(x)
                  for x, _ in pts]
            fig.add_trace(go.Scatter(
                x=xs, y=[m.accept_len for _, m in pts], mode="markers", legendgroup=name,
                name=f"{name} measured" if len(runs) > 1 else "measured (benchmark)",
                marker=dict(color=colour, symbol="star", size=13, line=dict(color="#111827", width=1)),
                text=[f"{m.checkpoint} · {m.server or 'server N/A'} · concurrency {m.concurrency or 'N/A'}"
                      for _, m in pts],
                hovertemplate="%{y:.2f}<br>%{text}<extra>measured</extra>"))
    charts.legend_below(fig)
    return fig
