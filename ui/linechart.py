"""Line charts drawn by uPlot: a plotly figure (built as every chart is, with ui/charts.py's template)
sent as plotly's JSON and drawn in the browser on a canvas by uPlot (``static/uplot/``, MIT, 51 KB).

Streamlit draws a plotly chart with plotly's own code, 4.7 MB that a browser fetches and loads before the
first line appears (1-1.5 s on one core of a loaded machine, more than the rest of a page's first visit).
The line charts over time or steps (the Training page's curves, the Servers page's live charts, the
Regeneration page's speed, the GPUs page's history) are lines and points over one x axis, what uPlot draws
in milliseconds; it reads what those pages use of the figure: the scatter traces (lines, points, colour,
dash, width, opacity, name, the hover's number format, hidden legend entries), the layout's title, axis
titles, a logarithmic y axis, a fixed y range or one from zero (``rangemode="tozero"``), vertical lines
(restarts) and horizontal lines (baselines) with their labels, and on a time axis the range buttons (15 m,
1 h, 6 h, 24 h, all).  Subplots stacked on a shared x axis (one y axis per panel, as ``set_subplots(rows=N)``
makes them) are a chart per panel, zoomed and hovered together; bars over categories (the answer lengths'
bins) are drawn as bars, each category at its place.  Drag across the chart zooms the x axis, a double click goes
back; the legend shows every series' value under the cursor (the unified hover of the other charts).  A live
page draws its charts again every second or two: a drawing with only new points is drawn into the chart
already there (uPlot's setData), and the x range the user chose (a dragged window, or a range button's
newest span, which follows the new points) is kept across every drawing.

The component's code is ``ui/linechart.js``; uPlot is served by the dashboard (``server.enableStaticServing``,
set in ``.streamlit/config.toml`` and by the launcher) and loaded once per browser tab."""

from __future__ import annotations

import functools
from pathlib import Path

import plotly.io as pio
import streamlit as st

HERE = Path(__file__).resolve().parent
NAME = "specdeck_linechart"
UPLOT_CSS = HERE.parent / "static" / "uplot" / "uPlot.min.css"
CSS = """
.sd-chart { width: 100%; font-family: "Source Sans", sans-serif; color: #31333f; }
.sd-chart .u-title { font-size: 15px; font-weight: 600; text-align: left; padding-left: 8px; }
.sd-chart .u-legend { font-size: 12px; }
.sd-chart .sd-ranges { display: flex; gap: 4px; justify-content: flex-end; margin: 0 8px -4px 0; }
.sd-chart .sd-ranges button { font-size: 12px; padding: 1px 8px; border: 1px solid #d1d5db; border-radius: 4px;
  background: #f9fafb; color: #31333f; cursor: pointer; }
.sd-chart .sd-ranges button:hover { border-color: #2563eb; color: #2563eb; }
.sd-chart .sd-one .u-legend .u-series:first-child ~ .u-series .u-marker { display: none; }
"""


@functools.cache
def _component():
    return st.components.v2.component(
        NAME, js=(HERE / "linechart.js").read_text(encoding="utf-8"),
        css=UPLOT_CSS.read_text(encoding="utf-8") + CSS, isolate_styles=False)


def spec(fig) -> str:
    """The figure's JSON as the component reads it (plotly's own, numpy arrays as typed arrays)."""
    return pio.to_json(fig, validate=False)


def line_chart(fig, *, key: str) -> None:
    """Draw ``fig`` (a plotly figure of scatter traces) with uPlot, as wide as its column."""
    # as bytes: the JSON travels as it is (in a string it would be escaped once more, about 15 % larger)
    _component()(data=spec(fig).encode(), key=key, height="content")
