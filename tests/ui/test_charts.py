"""Chart helpers: min/max downsampling that keeps spikes and gaps, and run breaks."""

from __future__ import annotations

from ui.charts import downsample, with_breaks


def _assert_no_bridge(xs, ys, dx, dy):
    """Two output points joined by a line (adjacent, both present) have no gap between them in the input."""
    pos = {x: i for i, x in enumerate(xs)}
    for (x0, y0), (x1, y1) in zip(zip(dx, dy), zip(dx[1:], dy[1:])):
        if y0 is None or y1 is None:
            continue
        between = ys[pos[x0]:pos[x1] + 1]
        assert None not in between, f"the line from x={x0} to x={x1} bridges a gap"


def _assert_every_gap_kept(xs, ys, dx, dy):
    """Every run of missing input points that has data on both sides is a None in the output."""
    gaps_out = [x for x, y in zip(dx, dy) if y is None]
    i = 0
    while i < len(ys):
        if ys[i] is None:
            j = i
            while j < len(ys) and ys[j] is None:
                j += 1
            if 0 < i and j < len(ys):
                assert any(xs[i] <= g < xs[j] for g in gaps_out), f"the gap at x={xs[i]}..{xs[j - 1]} is lost"
            i = j
        else:
            i += 1


def test_a_short_gap_inside_one_bucket_stays_a_gap():
    n = 100_000  # 1,000 buckets of 100 points
    xs = list(range(n))
    ys = [1.0] * n
    for i in range(50_010, 50_013):  # 3 missing points in the middle of a bucket
        ys[i] = None
    dx, dy = downsample(xs, ys, max_points=2000)
    assert len(dx) <= 2000
    assert dx == sorted(dx)
    assert dy.count(None) == 1
    gap_at = dx[dy.index(None)]
    assert gap_at == 50_010  # at the first missing point
    _assert_no_bridge(xs, ys, dx, dy)
    _assert_every_gap_kept(xs, ys, dx, dy)


def test_spikes_and_long_gaps_survive_together():
    n = 100_000
    xs = list(range(n))
    ys = [1.0] * n
    ys[54_321] = 99.0
    ys[70_000] = -5.0
    for i in range(80_000, 80_200):
        ys[i] = None
    ys[80_250] = 42.0  # a spike just after the gap, in the gap's bucket
    dx, dy = downsample(xs, ys, max_points=2000)
    assert len(dx) <= 2000
    pairs = dict(zip(dx, dy))
    assert pairs[54_321] == 99.0 and pairs[70_000] == -5.0 and pairs[80_250] == 42.0
    assert dy.count(None) == 1 and dx[dy.index(None)] == 80_000
    _assert_no_bridge(xs, ys, dx, dy)
    _assert_every_gap_kept(xs, ys, dx, dy)


def test_many_gaps_stay_gaps_and_the_output_stays_small():
    n = 50_000
    xs = list(range(n))
    ys = [float(i % 7) if i % 10 else None for i in range(n)]  # a gap every 10 points: 5,000 gaps
    dx, dy = downsample(xs, ys, max_points=2000)
    assert len(dx) <= 2001
    assert None in dy
    _assert_no_bridge(xs, ys, dx, dy)


def test_small_case_by_hand():
    # 10 points, 2 gaps, max 4 points: one bucket (keeps the minimum 0 at x=6 and the maximum 9 at x=5),
    # the gap before it (first missing x=2) and the gap after it (first missing x=7)
    xs = list(range(10))
    ys = [1.0, 5.0, None, 2.0, 3.0, 9.0, 0.0, None, None, 4.0]
    assert downsample(xs, ys, max_points=4) == ([2, 5, 6, 7], [None, 9.0, 0.0, None])


def test_short_series_are_untouched():
    assert downsample([1, 2], [3.0, None]) == ([1, 2], [3.0, None])


def test_breaks_at_run_starts():
    ts = [100.0, 101.0, 105.0, 130.0, 131.0, 160.0]
    ys = [2.2, 2.3, 2.1, 1.9, 2.0, 2.4]
    # a restart at 110 (between 105 and 130); one at 131 (a line logged in the restart's own second is the
    # previous run's); one at 200, after the last point (nothing to break)
    bt, by = with_breaks(ts, ys, [110.0, 131.0, 200.0])
    assert bt == [100.0, 101.0, 105.0, 110.0, 130.0, 131.0, 131.0, 160.0]
    assert by == [2.2, 2.3, 2.1, None, 1.9, 2.0, None, 2.4]
    assert with_breaks(ts, ys, []) == (ts, ys)
    # a start before the first point breaks nothing
    assert with_breaks(ts, ys, [50.0]) == (ts, ys)


def test_a_break_survives_downsampling():
    ts = [float(i) for i in range(10_000)]
    ys = [2.0] * 5_000 + [1.0] * 5_000
    bt, by = with_breaks(ts, ys, [4_999.5])
    dx, dy = downsample(bt, by, max_points=500)
    assert None in dy and dx[dy.index(None)] == 4_999.5
    _assert_no_bridge(bt, by, dx, dy)


def test_restarts_are_marked_and_only_the_latest_is_labelled_with_its_time():
    import time

    from ui.charts import figure, mark_restarts

    base = time.mktime(time.strptime("2026-11-30 09:00:00", "%Y-%m-%d %H:%M:%S"))
    fig = figure("x")
    mark_restarts(fig, [base + 70, base + 10, base + 40])
    assert len(fig.layout.shapes) == 3 and all(s.line.dash == "dot" for s in fig.layout.shapes)
    texts = [a.text for a in fig.layout.annotations]
    assert texts == ["↻", "↻", "restart 09:01:10"]
    assert [a.hovertext for a in fig.layout.annotations][0] == "restart at 2026-11-30 09:00:10"


def test_restart_marks_in_one_update_equal_plotlys_own_vlines():
    """The marks go in with one layout update; they are the lines and labels plotly's add_vline and
    add_annotation give, on a one-plot chart and on each plot of a chart with subplots."""
    import json
    import time
    from datetime import datetime

    from plotly.subplots import make_subplots

    from ui.charts import figure, mark_restarts

    base = time.time() - 3600
    starts = [base + 70 * i for i in range(12)]

    def by_plotly(fig):
        for i, t in enumerate(starts):
            x = datetime.fromtimestamp(t)
            fig.add_vline(x=x, line_dash="dot", line_color="#9333ea", line_width=1)
            fig.add_annotation(x=x, y=1, yref="paper", yanchor="top", xanchor="left", showarrow=False,
                               text=f"restart {x:%H:%M:%S}" if i == len(starts) - 1 else "↻",
                               hovertext=f"restart at {x:%Y-%m-%d %H:%M:%S}",
                               font=dict(size=10, color="#9333ea"), bgcolor="rgba(255,255,255,0.7)")
        return json.loads(fig.to_json())["layout"]

    ours = figure("x")
    mark_restarts(ours, list(reversed(starts)))
    assert json.loads(ours.to_json())["layout"] == by_plotly(figure("x"))
    def grid():
        g = make_subplots(rows=2, cols=1)
        for row in (1, 2):
            g.add_scatter(x=[datetime.fromtimestamp(base), datetime.fromtimestamp(base + 900)], y=[1, 2], row=row, col=1)
        return g

    ours = grid()
    mark_restarts(ours, starts)
    assert len(ours.layout.shapes) == 2 * len(starts)  # a line on each plot
    assert json.loads(ours.to_json())["layout"] == by_plotly(grid())


def test_long_lines_in_time_order_take_the_numpy_path_to_the_same_points():
    """charts.points on a line longer than MAX_POINTS (a server's 20,000 decode lines) gives exactly what
    with_breaks and downsample give in Python: the same kept points, gaps and restart breaks."""
    import random

    from ui import charts

    def python(ts, ys, breaks, max_points):
        timed = [(t, y) for t, y in zip(ts, ys) if t is not None]
        return charts.downsample(*charts.with_breaks([t for t, _ in timed], [y for _, y in timed], breaks), max_points)

    rng = random.Random(7)
    took_numpy = 0
    for _ in range(120):
        n = rng.choice([2_001, 2_500, 7_777, 20_000])
        max_points = rng.choice([4, 10, 100, 2_000])
        t0 = 1.7e9
        ts = sorted(t0 + rng.random() * 1e4 for _ in range(n)) if rng.random() < 0.5 else [t0 + i for i in range(n)]
        p_none = rng.choice([0, 0.01, 0.3, 0.9, 1.0])
        ys = [None if rng.random() < p_none else rng.choice([float(rng.randint(0, 5)), rng.random(), rng.randint(0, 9)])
              for _ in range(n)]
        if rng.random() < 0.3:  # points without a time
            for i in rng.sample(range(n), n // 100):
                ts[i] = None
        breaks = [t0 + rng.random() * 1.2e4 - 1e3 for _ in range(rng.choice([0, 1, 3, 20]))]
        if ts[3] is not None and rng.random() < 0.3:
            breaks.append(ts[3])  # a restart at a point's own time
        fast = charts._points_np(ts, ys, breaks, max_points)
        assert fast is not None
        took_numpy += 1
        fast = (fast[0].tolist(), [None if v != v else v for v in fast[1].tolist()])  # NaN: missing
        xs, vals = python(ts, ys, breaks, max_points)
        assert fast == ([float(x) for x in xs], [None if v is None else float(v) for v in vals])
        assert charts.points(ts, ys, breaks, max_points) == fast
    assert took_numpy == 120
    # times out of order: the Python path, whose order-dependent breaks are the reference
    assert charts._points_np([3.0, 1.0, 2.0] * 1_000, [1.0] * 3_000, (), 100) is None


def test_a_long_line_goes_to_plotly_as_arrays_with_its_gaps_and_local_times():
    """add_series on 20,000 points: numpy arrays (no check per point), the same kept points as the Python path,
    a missing value NaN (a gap in plotly.js), the times in local time."""
    from datetime import datetime

    import numpy as np
    import plotly.graph_objects as go

    from ui import charts

    ts = [1.7e9 + i * 0.5 for i in range(20_000)]
    ys = [None if i % 500 == 0 else float(i % 97) for i in range(20_000)]
    fig = go.Figure()
    charts.add_series(fig, "x", ts, ys, breaks=[ts[9_999] + 0.1])
    trace = fig.data[0]
    xs, vals = charts.points(ts, ys, [ts[9_999] + 0.1])
    assert len(trace.y) == len(vals) <= charts.MAX_POINTS + 1_000
    assert [None if v != v else float(v) for v in np.asarray(trace.y).tolist()] == vals
    assert np.isnan(np.asarray(trace.y)).sum() == vals.count(None) > 20  # the gaps and the restart's break
    assert str(trace.x[1]).startswith(datetime.fromtimestamp(xs[1]).isoformat(timespec="milliseconds"))


def _plotly_layout(title, y_title, height, range_buttons, layout):
    """figure()'s layout as plotly builds and checks it, property by property."""
    import plotly.graph_objects as go

    from ui.charts import RANGE_BUTTONS

    fig = go.Figure()
    fig.update_layout(
        template="plotly_white",
        title=dict(text=title, font=dict(size=14), x=0, xanchor="left", xref="container", y=1, yanchor="top",
                   yref="container", pad=dict(t=8, l=10)) if title else None,
        height=height, margin=dict(l=10, r=10, t=(34 if title else 0) + (34 if range_buttons else 0) or 10, b=10),
        hovermode="x unified", legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="right", x=1),
        font=dict(family="Inter, system-ui, sans-serif", size=12), yaxis_title=y_title)
    if range_buttons:
        fig.update_xaxes(rangeselector=dict(buttons=RANGE_BUTTONS, x=0, xanchor="left", y=1.02, yanchor="bottom"),
                         type="date")
    if layout:
        fig.update_layout(**layout)
    return fig.layout.to_plotly_json()


def test_a_figures_layout_checked_once_per_kind_equals_plotlys_for_each_title_and_height():
    from ui.charts import figure

    cases = [("Loss", "loss", 300, True, {}), ("Accept length", "tokens", 260, True, {}), (None, None, 250, False, {}),
             ("tok/s <b>x</b>", None, 320, True, {"yaxis": {"rangemode": "tozero"}}),
             ("A", "B", 200, False, {"yaxis_title": "C", "margin": {"t": 5}}),
             ("A", "B", 200, True, {"yaxis_type": "log", "showlegend": False}),
             ("A", None, 180, True, {"yaxis": {"title": {"text": "Z"}}})]
    for title, y_title, height, buttons, layout in cases:
        got = figure(title, y_title=y_title, height=height, range_buttons=buttons, **layout).layout.to_plotly_json()
        assert got == _plotly_layout(title, y_title, height, buttons, layout), (title, layout)
    a, b = figure("Loss", y_title="loss"), figure("Loss", y_title="loss")
    a.update_layout(title_text="changed", yaxis_title="changed too")
    assert b.layout.title.text == "Loss" and b.layout.yaxis.title.text == "loss"  # each figure its own copy


def test_charts_of_one_kind_with_other_titles_are_checked_by_plotly_once():
    from ui.charts import _checked_layout, figure

    figure("one title", y_title="a", height=310, range_buttons=False, hovermode="closest")
    before = _checked_layout.cache_info().misses
    for k in range(5):
        figure(f"title {k}", y_title=f"y {k}", height=300 + k, range_buttons=False, hovermode="closest")
    assert _checked_layout.cache_info().misses == before
