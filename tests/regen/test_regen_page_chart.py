"""The speed chart: one panel and one y axis per unit (rows/s, tok/s), each fully titled, no axis
drawn over another, and this job's two series in two colours."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from tests.helpers import line_charts
from tests.regen.test_regen_page import REPO, _page, workspace, write_run  # noqa: F401 (fixture)

pytestmark = pytest.mark.timeout(120)


def test_speed_chart_has_one_axis_per_unit(workspace):
    write_run(workspace)
    at = _page(AppTest.from_file(str(REPO / "app.py"), default_timeout=30))
    spec = line_charts(at)[0]
    layout, traces = spec["layout"], spec["data"]
    axes = {k: v for k, v in layout.items() if k.startswith("yaxis")}
    titles = sorted(a["title"]["text"] for a in axes.values())
    assert titles == ["rows/s", "tok/s"]
    assert not any("overlaying" in a for a in axes.values())  # stacked panels, not two scales on one
    domains = [tuple(a["domain"]) for a in axes.values()]
    assert domains[0][1] <= domains[1][0] or domains[1][1] <= domains[0][0]  # they do not overlap
    by_name = {t["name"]: t for t in traces}
    rows, tok = by_name["rows/s (completed)"], by_name["answer tok/s (this job)"]
    assert rows.get("yaxis", "y") != tok.get("yaxis", "y")
    assert layout[rows.get("yaxis", "y").replace("y", "yaxis")]["title"]["text"] == "rows/s"
    assert layout[tok["yaxis"].replace("y", "yaxis")]["title"]["text"] == "tok/s"
    assert rows["line"]["color"] != tok["line"]["color"]
