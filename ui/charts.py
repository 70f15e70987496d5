"""One plotly template and the helpers every chart uses.

Stable colours per series name across pages, time in local time, unified
hover, range buttons, a dashed labelled baseline, gaps kept as gaps, and at
most ~2,000 points per trace through min/max bucket downsampling.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Sequence

import plotly.graph_objects as go

PALETTE = [
    "#2563eb", "#16a34a", "#ea580c", "#9333ea", "#0891b2",
    "#db2777", "#65a30d", "#ca8a04", "#4f46e5", "#dc2626",
]
MAX_POINTS = 2000
RANGE_BUTTONS = [
    dict(count=15, label="15 m", step="minute", stepmode="backward"),
    dict(count=1, label="1 h", step="hour", stepmode="backward"),
    dict(count=6, label="6 h", step="hour", stepmode="backward"),
    dict(count=24, label="24 h", step="hour", stepmode="backward"),
    dict(step="all", label="all"),
]


def colour_for(name: str) -> str:
    """The same series name gets the same colour on every page."""
    h = int(hashlib.sha1(name.encode()).hexdigest()[:8], 16)
    return PALETTE[h % len(PALETTE)]


def downsample(xs: Sequence[float], ys: Sequence[float | None], max_points: int = MAX_POINTS):
    """Min/max bucket downsampling so spikes survive; ``None`` gaps are kept."""
    n = len(xs)
    if n <= max_points:
        return list(xs), list(ys)
    buckets = max(1, max_points // 2)
    size = n / buckets
    out_x: list[float] = []
    out_y: list[float | None] = []
    for b in range(buckets):
        lo, hi = int(b * size), int((b + 1) * size)
        seg = [(xs[i], ys[i]) for i in range(lo, min(hi, n))]
        vals = [p for p in seg if p[1] is not None]
        if not vals:
            if seg:
                out_x.append(seg[0][0])
                out_y.append(None)
            continue
        pmin = min(vals, key=lambda p: p[1])
        pmax = max(vals, key=lambda p: p[1])
        for p in sorted({pmin, pmax}, key=lambda p: p[0]):
            out_x.append(p[0])
            out_y.append(p[1])
    return out_x, out_y


def to_local(ts: Sequence[float]) -> list[datetime]:
    return [datetime.fromtimestamp(t) for t in ts]


def figure(title: str | None = None, *, y_title: str | None = None, height: int = 300,
           range_buttons: bool = True) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(
        template="plotly_white",
        title=dict(text=title, font=dict(size=14)) if title else None,
        height=height,
        margin=dict(l=10, r=10, t=40 if title else 10, b=10),
        hovermode="x unified",
        legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="right", x=1),
        font=dict(family="Inter, system-ui, sans-serif", size=12),
        yaxis_title=y_title,
    )
    if range_buttons:
        fig.update_xaxes(rangeselector=dict(buttons=RANGE_BUTTONS), type="date")
    return fig


def add_series(fig: go.Figure, name: str, ts: Sequence[float], ys: Sequence[float | None], *,
               colour: str | None = None, mode: str = "lines", dash: str | None = None,
               fmt: str = ".2f") -> None:
    xs, vals = downsample(ts, ys)
    fig.add_trace(go.Scatter(
        x=to_local(xs), y=vals, name=name, mode=mode, connectgaps=False,
        line=dict(color=colour or colour_for(name), dash=dash),
        hovertemplate=f"%{{y:{fmt}}}<extra>{name}</extra>",
    ))


def add_baseline(fig: go.Figure, value: float | None, label: str) -> None:
    if value is None:
        return
    fig.add_hline(y=value, line_dash="dash", line_color="#6b7280",
                  annotation_text=f"{label}: {value:,.1f}", annotation_position="top left")
