"""The Training page's charts (plotly, the shared template of ui/charts.py): a metric per run, a metric
per TTT position, and the accept length predicted beside the one measured."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import plotly.graph_objects as go

from ui import charts
from ui.train.data import AcceptView, Curves, Measured, Series, ema

STEP, WALL = "step", "wall time"
# positions in a fixed order of well-separated colours (position 0 always the same blue)
POSITION_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                    "#bcbd22", "#17becf")
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")


def new_figure(title: str, x_mode: str, *, y_title: str | None = None, x_is_epoch: bool = False,
               height: int = 300) -> go.Figure:
    fig = charts.figure(title, y_title=y_title, height=height, range_buttons=x_mode == WALL)
    if x_mode == STEP:
        fig.update_xaxes(title_text="epoch" if x_is_epoch else "step")
    return fig


def _xy(s: Series, x_mode: str, values: Sequence[float | None]) -> tuple[list, list]:
    xs: list = []
    ys: list = []
    src = s.steps if x_mode == STEP else s.times
    for x, y, v in zip(src, values, s.values):
        if x is None and v is not None:
            continue  # a point without a place on this axis (no time known)
        xs.append(x)
        ys.append(y)
    # downsample needs numbers for x: a gap's x is taken from its neighbour
    filled = [x if x is not None else (xs[i - 1] if i and xs[i - 1] is not None else 0.0) for i, x in enumerate(xs)]
    dx, dy = charts.downsample(filled, ys)
    if x_mode == WALL:
        dx = [datetime.fromtimestamp(x) for x in dx]
    return dx, dy


def add_curve(fig: go.Figure, s: Series, name: str, x_mode: str, *, colour: str, smooth: float = 0.0,
              dash: str = "solid", fmt: str = ".3f", group: str | None = None) -> None:
    """The curve, and under it the raw values faint when it is smoothed."""
    if not len(s):
        return
    if smooth > 0:
        x, y = _xy(s, x_mode, s.values)
        fig.add_trace(go.Scatter(x=x, y=y, mode="lines", connectgaps=False, opacity=0.25, showlegend=False,
                                 line=dict(color=colour, dash=dash, width=1), hoverinfo="skip", legendgroup=group))
    mode = "lines+markers" if len(s) < 3 else "lines"
    x, y = _xy(s, x_mode, ema(s.values, smooth) if smooth > 0 else s.values)
    fig.add_trace(go.Scatter(x=x, y=y, mode=mode, connectgaps=False, name=name, legendgroup=group,
                             line=dict(color=colour, dash=dash), hovertemplate=f"%{{y:{fmt}}}<extra>{name}</extra>"))


def mark_restarts(fig: go.Figure, restarts: Sequence[tuple[float | None, float | None]], x_mode: str) -> None:
    if x_mode == WALL:
        charts.mark_restarts(fig, [t for _, t in restarts if t is not None], label="restart")
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
                      smooth=smooth, fmt=fmt, group=name)
        if eval_too and metric in c.eval:
            s = c.eval[metric]
            x, y = _xy(s, x_mode, s.values)
            fig.add_trace(go.Scatter(x=x, y=y, mode="markers", name=f"{name} eval" if len(runs) > 1 else "eval",
                                     marker=dict(color=colour, symbol="diamond", size=8), legendgroup=name,
                                     hovertemplate=f"%{{y:{fmt}}}<extra>eval</extra>"))
        if len(runs) == 1:
            mark_restarts(fig, c.restarts, x_mode)
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
                      smooth=smooth, dash=DASHES[k % len(DASHES)], group=label)
        if len(runs) == 1:
            mark_restarts(fig, c.restarts, x_mode)
    fig.update_yaxes(range=[0, 1.02])
    charts.legend_below(fig)
    return fig


def accept_chart(runs: Sequence[tuple[str, AcceptView, Sequence[Measured], dict[float, float]]],
                 x_mode: str, *, smooth: float) -> go.Figure | None:
    """Predicted accept length (1 + a0 + a0·a1 + …) over the run, and the benchmarks' measured accept_len
    of its checkpoints as points at the checkpoint's step.  ``runs``: (name, prediction, measured,
    time of each step) — the last maps a step to its time for the wall-time axis."""
    if not any(v.history or m for _, v, m, _ in runs):
        return None
    fig = new_figure("Accept length: predicted and measured", x_mode, y_title="accept length")
    for name, view, meas, step_time in runs:
        colour = charts.colour_for(name)
        s = Series()
        for p in view.history:
            x = p.step if p.step is not None else p.epoch
            s.add(float(x) if x is not None else None, step_time.get(float(x)) if x is not None else None,
                  p.accept_length)
        label = f"{name} predicted" if len(runs) > 1 else "predicted (1 + a0 + a0·a1 + …)"
        add_curve(fig, s, label, x_mode, colour=colour, smooth=smooth, fmt=".2f", group=name)
        pts = [(m.step if x_mode == STEP else step_time.get(m.step) if m.step is not None else m.started_at, m)
               for m in meas]
        pts = [(x, m) for x, m in pts if x is not None]
        if pts:
            xs = [x if x_mode == STEP else datetime.fromtimestamp(x) for x, _ in pts]
            fig.add_trace(go.Scatter(
                x=xs, y=[m.accept_len for _, m in pts], mode="markers", legendgroup=name,
                name=f"{name} measured" if len(runs) > 1 else "measured (benchmark)",
                marker=dict(color=colour, symbol="star", size=13, line=dict(color="#111827", width=1)),
                text=[f"{m.checkpoint} · {m.server or 'server N/A'} · concurrency {m.concurrency or 'N/A'}"
                      for _, m in pts],
                hovertemplate="%{y:.2f}<br>%{text}<extra>measured</extra>"))
    charts.legend_below(fig)
    return fig
