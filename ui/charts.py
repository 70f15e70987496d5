"""One plotly template and the helpers every chart uses.

Stable colours per series name across pages, time in local time, unified
hover, range buttons, a dashed labelled baseline, gaps kept as gaps, and at
most ~2,000 points per trace through min/max bucket downsampling.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
from datetime import datetime
from typing import Sequence

import numpy as np
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
    """Min/max bucket downsampling so spikes survive; gaps stay gaps.

    Each bucket keeps its lowest and highest point.  Wherever the input has a
    gap (a ``None``) between two kept points, the output has one too (at the
    first missing point), so a line never bridges missing data.  The output
    holds at most about ``max_points`` points: buckets are fewer when there
    are many gaps to keep.
    """
    n = len(xs)
    if n <= max_points:
        return list(xs), list(ys)
    # none_before[i]: missing points among ys[:i]
    none_before = [0] * (n + 1)
    gaps = 0
    for i, y in enumerate(ys):
        missing = y is None
        none_before[i + 1] = none_before[i] + missing
        if missing and (i == 0 or ys[i - 1] is not None):
            gaps += 1
    keep_gaps = min(gaps, max_points // 2)
    buckets = max(1, (max_points - keep_gaps) // 2)
    size = n / buckets
    kept: list[int] = []
    for b in range(buckets):
        lo, hi = int(b * size), min(int((b + 1) * size), n)
        idx = [i for i in range(lo, hi) if ys[i] is not None]
        if not idx:
            continue
        imin = min(idx, key=ys.__getitem__)
        imax = max(idx, key=ys.__getitem__)
        kept.extend(sorted({imin, imax}))
    out_x: list[float] = []
    out_y: list[float | None] = []

    def gap_in(a: int, b: int) -> None:  # a gap in ys[a:b] becomes one None
        if none_before[b] - none_before[a] > 0:
            first = next(j for j in range(a, b) if ys[j] is None)
            out_x.append(xs[first])
            out_y.append(None)

    prev = 0
    for i in kept:
        gap_in(prev, i)
        out_x.append(xs[i])
        out_y.append(ys[i])
        prev = i + 1
    gap_in(prev, n)
    return out_x, out_y


def with_breaks(ts: Sequence[float | None], ys: Sequence[float | None], starts: Sequence[float]):
    """``ts``/``ys`` with a gap (``None``) at each run start that falls between two points.

    A point logged strictly after a start belongs to the run that begins
    there, so a restart never joins the previous run's last point to the new
    run's first.
    """
    if not starts:
        return list(ts), list(ys)
    marks = sorted(starts)
    out_t: list[float | None] = []
    out_y: list[float | None] = []
    k = 0
    prev: float | None = None
    for t, y in zip(ts, ys):
        if t is not None:
            while k < len(marks) and marks[k] < t:
                if prev is not None and marks[k] >= prev:
                    out_t.append(marks[k])
                    out_y.append(None)
                k += 1
            prev = t
        out_t.append(t)
        out_y.append(y)
    return out_t, out_y


def points(ts: Sequence[float | None], ys: Sequence[float | None], breaks: Sequence[float] = (),
           max_points: int = MAX_POINTS) -> tuple[list, list]:
    """The points of one line as :func:`add_series` draws them: those with a time, cut at ``breaks`` (see
    :func:`with_breaks`) and downsampled (see :func:`downsample`).  A long line in time order (a server's
    20,000 decode lines) goes through :func:`_points_np`, the same points from numpy arrays: the loops
    above in Python cost a Servers page run about 60 ms for its five lines."""
    if len(ts) > max_points:
        fast = _points_np(ts, ys, breaks, max_points)
        if fast is not None:
            xs, vals = fast
            return xs.tolist(), [None if v != v else v for v in vals.tolist()]
    return _points_py(ts, ys, breaks, max_points)


def _points_py(ts, ys, breaks, max_points: int) -> tuple[list, list]:
    timed = [(t, y) for t, y in zip(ts, ys) if t is not None]  # a point without a time has no place
    return downsample(*with_breaks([t for t, _ in timed], [y for _, y in timed], breaks), max_points)


def _points_np(ts, ys, breaks, max_points: int) -> tuple[np.ndarray, np.ndarray] | None:
    """:func:`points` on numpy arrays, for times in order (None otherwise: the caller takes the Python path).
    A missing value (None) is NaN here."""
    try:
        t = np.asarray(ts, dtype=float)
        y = np.asarray(ys, dtype=float)
    except (TypeError, ValueError):  # a value that is not a number: the general path says what it does
        return None
    if t.shape != y.shape or t.ndim != 1:
        return None
    has_t = ~np.isnan(t)
    t, y = t[has_t], y[has_t]
    if len(t) and not bool(np.all(t[1:] >= t[:-1])):
        return None
    if len(breaks) and len(t):  # with_breaks: a gap at each start that falls between two points
        marks = np.sort(np.asarray(breaks, dtype=float))
        at = np.searchsorted(t, marks, side="right")  # the first point after each start
        cut = (at > 0) & (at < len(t))
        t = np.insert(t, at[cut], marks[cut])
        y = np.insert(y, at[cut], np.nan)
    n = len(t)
    missing = np.isnan(y)
    if n <= max_points:
        xs, vals = t, y
    else:
        gaps = int(missing[0]) + int(np.count_nonzero(missing[1:] & ~missing[:-1]))
        buckets = max(1, (max_points - min(gaps, max_points // 2)) // 2)
        size = n / buckets
        b = np.arange(buckets)
        lo = (b * size).astype(np.int64)  # int(b * size), as downsample cuts them
        end = min(int(buckets * size), n)
        there = ~missing[:end]
        idx = np.arange(end)
        lo_y = np.where(there, y[:end], np.inf)
        hi_y = np.where(there, y[:end], -np.inf)
        bucket = np.repeat(b, np.diff(np.append(lo, end)))
        has = np.add.reduceat(there.astype(np.int64), lo) > 0
        big = np.iinfo(np.int64).max
        # the first lowest and the first highest point of each bucket (min() and max() keep the first)
        imin = np.minimum.reduceat(np.where(there & (lo_y == np.minimum.reduceat(lo_y, lo)[bucket]), idx, big), lo)
        imax = np.minimum.reduceat(np.where(there & (hi_y == np.maximum.reduceat(hi_y, lo)[bucket]), idx, big), lo)
        first, second = np.minimum(imin, imax)[has], np.maximum(imin, imax)[has]
        kept = np.stack([first, second], axis=1).ravel()
        if len(kept):  # one point where the lowest is the highest
            kept = kept[np.append(True, kept[1:] != kept[:-1])]
        # a gap (its first missing point) before each kept point, and after the last, where there is one
        nones = np.flatnonzero(missing)
        starts = np.append(0, kept + 1)
        stops = np.append(kept, n)
        j = np.searchsorted(nones, starts)
        gap = j < len(nones)
        gap[gap] = nones[j[gap]] < stops[gap]
        out: list[int] = []
        for k, i in enumerate(kept.tolist()):
            if gap[k]:
                out.append(int(nones[j[k]]))
            out.append(i)
        if gap[-1]:
            out.append(int(nones[j[-1]]))
        sel = np.asarray(out, dtype=np.int64)
        xs, vals = t[sel], y[sel]
    return xs, vals


def to_local(ts: Sequence[float]) -> list[datetime]:
    return [datetime.fromtimestamp(t) for t in ts]


def local_text(ts: Sequence[float]) -> np.ndarray:
    """``ts`` in local time as ISO 8601 text (what plotly writes for :func:`to_local`'s datetimes)."""
    if not len(ts):
        return np.array([], dtype=object)
    return np.array([datetime.fromtimestamp(t).isoformat() for t in ts])


def _local_np(ts: np.ndarray):
    """``ts`` in local time as numpy datetimes (ms), or as :func:`local_text` gives them where the offset from
    UTC changes within them (a change to or from summer time)."""
    if not len(ts):
        return local_text(ts)
    first, last = (datetime.fromtimestamp(float(t)).astimezone().utcoffset() for t in (ts[0], ts[-1]))
    if first != last or first is None:
        return local_text(ts.tolist())
    return np.round((ts + first.total_seconds()) * 1000).astype("datetime64[ms]")


def figure(title: str | None = None, *, y_title: str | None = None, height: int = 300,
           range_buttons: bool = True, **layout) -> go.Figure:
    """An empty chart on the dashboard's template; ``layout``: more of the layout (plain values), as
    ``fig.update_layout(**layout)`` would set it."""
    # plotly checks every property it is given, the template's hundreds of defaults included (about
    # 45 ms a figure, 75 ms the first time in a process): the layout is checked once per kind of figure
    # (not per title: the titles go into the checked layout as plain text) and copied from then on
    extra = json.dumps(layout, sort_keys=True) if layout else ""
    fig = go.Figure(layout=_layout(title, y_title, height, range_buttons, extra), _validate=False)
    fig._validate = True  # what the caller adds is checked as before
    fig.layout._validate = True
    return fig


def white_figure(**layout) -> go.Figure:
    """An empty figure on the plotly_white template with ``layout`` (plain values: dicts, lists, text and
    numbers), which plotly checks once per distinct layout, as for :func:`figure`."""
    key = json.dumps(layout, sort_keys=True)
    fig = go.Figure(layout=copy.deepcopy(_white_layout(key)), _validate=False)
    fig._validate = True
    fig.layout._validate = True
    return fig


@functools.lru_cache(maxsize=256)
def _white_layout(key: str) -> dict:
    fig = go.Figure()
    fig.update_layout(template="plotly_white", **json.loads(key))
    return fig.layout.to_plotly_json()


# stand-ins for a figure's titles in the layout plotly checks once per kind of figure (see figure())
_TITLE, _Y_TITLE = "\x00specdeck-title", "\x00specdeck-y-title"


def _layout(title: str | None, y_title: str | None, height: int, range_buttons: bool, extra: str) -> dict:
    """The layout of :func:`figure` as plain data, a copy of its own: the checked layout of its kind with
    its titles and height put in."""
    extra_keys = json.loads(extra) if extra else {}
    out = copy.deepcopy(_checked_layout(bool(title), bool(y_title), range_buttons, extra))
    out = _put_texts(out, {_TITLE: title, _Y_TITLE: y_title})
    if "height" not in extra_keys:  # what ``layout`` sets wins, as update_layout after the height did
        out["height"] = height
    return out


def _put_texts(value, texts: dict):
    if isinstance(value, dict):
        return {k: _put_texts(v, texts) for k, v in value.items()}
    if isinstance(value, list):
        return [_put_texts(v, texts) for v in value]
    if isinstance(value, str) and value in texts:
        return texts[value]
    return value


@functools.lru_cache(maxsize=256)
def _checked_layout(titled: bool, y_titled: bool, range_buttons: bool, extra: str) -> dict:
    """The layout of a kind of :func:`figure`, checked by plotly, as plain data (titles as stand-ins)."""
    fig = go.Figure()
    fig.update_layout(
        template="plotly_white",
        # the title on its own line at the very top, the range buttons on the next one: on a narrow
        # chart (two side by side at 1024 px) the two never share a line and never cover each other
        title=dict(text=_TITLE, font=dict(size=14), x=0, xanchor="left", xref="container",
                   y=1, yanchor="top", yref="container", pad=dict(t=8, l=10)) if titled else None,
        height=300,
        margin=dict(l=10, r=10, t=(34 if titled else 0) + (34 if range_buttons else 0) or 10, b=10),
        hovermode="x unified",
        legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="right", x=1),
        font=dict(family="Inter, system-ui, sans-serif", size=12),
        yaxis_title=_Y_TITLE if y_titled else None,
    )
    if range_buttons:
        fig.update_xaxes(rangeselector=dict(buttons=RANGE_BUTTONS, x=0, xanchor="left", y=1.02, yanchor="bottom"),
                         type="date")
    if extra:
        fig.update_layout(**json.loads(extra))
    return fig.layout.to_plotly_json()


def add_series(fig: go.Figure, name: str, ts: Sequence[float], ys: Sequence[float | None], *,
               colour: str | None = None, mode: str = "lines", dash: str | None = None,
               fmt: str = ".2f", breaks: Sequence[float] = ()) -> None:
    """One line; ``breaks`` (run starts) cut it, so runs are never joined."""
    fast = _points_np(ts, ys, breaks, MAX_POINTS) if len(ts) > MAX_POINTS else None
    if fast is not None:  # a long line: numpy arrays to plotly, which takes them without a check per point
        x, y = _local_np(fast[0]), fast[1]
    else:
        xs, y = _points_py(ts, ys, breaks, MAX_POINTS)
        # the local times as the text plotly would write for them: an array of text plotly takes as it is,
        # where a list of datetimes is checked and converted point by point (about 5 times slower)
        x = local_text(xs)
    fig.add_trace(dict(
        type="scatter", x=x, y=y, name=name, mode=mode, connectgaps=False,
        line=dict(color=colour or colour_for(name), dash=dash),
        hovertemplate=f"%{{y:{fmt}}}<extra>{name}</extra>",
    ))


def add_baseline(fig: go.Figure, value: float | None, label: str) -> None:
    if value is None:
        return
    fig.add_hline(y=value, line_dash="dash", line_color="#6b7280",
                  annotation_text=f"{label}: {value:,.1f}", annotation_position="top left")


def mark_restarts(fig: go.Figure, starts: Sequence[float], label: str = "restart") -> None:
    """A dotted vertical line at each run start; the latest is labelled with its time, the
    earlier ones with ↻ (their time on hover), so close restarts do not write over each other.
    On a one-plot figure the lines and labels go in with one layout update: adding them one at a
    time re-checks every shape already there, which a server relaunched twenty times paid on each
    of its four charts at every refresh."""
    marks = [datetime.fromtimestamp(t) for t in sorted(starts)]
    if not marks:
        return
    line = dict(dash="dot", color="#9333ea", width=1)
    anns = [dict(x=x, y=1, yref="paper", yanchor="top", xanchor="left", showarrow=False,
                 text=f"{label} {x:%H:%M:%S}" if i == len(marks) - 1 else "↻",
                 hovertext=f"{label} at {x:%Y-%m-%d %H:%M:%S}",
                 font=dict(size=10, color="#9333ea"), bgcolor="rgba(255,255,255,0.7)")
            for i, x in enumerate(marks)]
    if getattr(fig, "_grid_ref", None) is not None:  # subplots: a line on each, as plotly places them
        for x in marks:
            fig.add_vline(x=x, line_dash=line["dash"], line_color=line["color"], line_width=line["width"])
        for a in anns:
            fig.add_annotation(**a)
        return
    # inside the plot, at its top: above it are the range buttons, at its foot the baseline labels
    shapes = [dict(type="line", x0=x, x1=x, xref="x", y0=0, y1=1, yref="y domain", line=line) for x in marks]
    fig.update_layout(shapes=[*fig.layout.shapes, *shapes], annotations=[*fig.layout.annotations, *anns])


def legend_below(fig: go.Figure) -> None:
    """Legend under the x axis, where a narrow chart's range buttons cannot cover it."""
    fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.6, xanchor="left", x=0),
                      margin=dict(b=90))
