"""The Training page's curves in a browser: drawn by uPlot (ui/linechart.js) from the figures the page
builds, every chart at once, without Streamlit's plotly code; the loss curve reaches the log's last step, the
legend shows the value under the cursor in the chart's number format, the log-scale choice in the URL gives a
logarithmic y axis, and a wall-time axis has the range buttons."""

from __future__ import annotations

import re

import pytest

from tests.e2e._dashboard import browser, serve, settle
from tests.train.page_kit import gen2_log, run_workspace

pytestmark = pytest.mark.browser


CHARTS_JS = """() => [...document.querySelectorAll('.sd-chart')].map(b => ({
  title: b.dataset.title, drawn: Number(b.dataset.drawn || 0), last: b.dataset.last, scale: b.dataset.scale,
  canvas: !!b.querySelector('canvas')}))"""


def _charts(page, want: int = 4) -> list[dict]:
    page.wait_for_function(f"() => document.querySelectorAll('.sd-chart[data-drawn]').length >= {want}",
                           timeout=120_000)
    settle(page)
    return page.evaluate(CHARTS_JS)


@pytest.mark.timeout(300)
def test_the_curves_are_drawn_by_uplot_every_one_at_once(tmp_path):
    ws = run_workspace(tmp_path / "ws", gen2_log(20, total_steps=60), name="charts")
    asked: list[str] = []
    with serve(tmp_path / "home", workspace=ws) as url, browser(1440, 1800) as page:
        page.on("request", lambda r: asked.append(r.url))
        page.goto(url + "/training?token=" + url.token + "&run=run")
        charts = _charts(page)
        by_title = {c["title"]: c for c in charts}
        loss = by_title["Loss"]
        assert loss["canvas"] and loss["last"] == "20" and loss["scale"] == "linear", charts
        assert all(c["canvas"] and c["drawn"] > 0 for c in charts), charts
        assert "acc_i per TTT position" in by_title, charts
        # the legend follows the cursor: the loss under it, as the figure formats it (three decimals)
        over = page.locator(".sd-chart[data-title='Loss'] .u-over")
        box = over.bounding_box()
        page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.5)
        value = page.locator(".sd-chart[data-title='Loss'] .u-legend .u-series").nth(1).locator(".u-value")
        page.wait_for_function("(e) => /\\d/.test(e.textContent)", arg=value.element_handle(), timeout=10_000)
        assert re.fullmatch(r"\d\.\d{3}", value.text_content().strip()), value.text_content()
        page.screenshot(path=str(tmp_path / "training-charts.png"), full_page=True)
        # steps appended to the log are drawn, and each chart drawn again replaces the one before it: as many
        # uPlot charts alive in the tab as there are charts on the page
        for steps in (22, 24):
            with open(ws / "logs" / "run.log", "a", encoding="utf-8") as fh:
                fh.write(gen2_log(steps, 60)[len(gen2_log(steps - 2, 60)):])
            page.wait_for_function(f"() => document.querySelector(\".sd-chart[data-title='Loss']\")"
                                   f"?.dataset.last === '{steps}'", timeout=60_000)
        settle(page)
        alive = page.evaluate("() => [window.specdeckCharts, document.querySelectorAll('.sd-chart').length, "
                              "document.querySelectorAll('.uplot').length]")
        assert alive[0] == alive[1] == alive[2] == len(charts), (alive, len(charts))
        # the log-scale choice travels in the URL and reaches the chart
        page.goto(url + "/training?token=" + url.token + "&run=run&log=True")
        page.wait_for_function("() => document.querySelector(\".sd-chart[data-title='Loss'][data-scale='log']\")",
                               timeout=120_000)
        assert _charts(page)[0]["last"] == "24"
        # on the wall-time axis, the range buttons of the other pages' time charts
        page.goto(url + "/training?token=" + url.token + "&run=run&x=wall+time")
        buttons = page.locator(".sd-chart[data-title='Loss'] .sd-ranges button")
        buttons.first.wait_for(timeout=120_000)
        assert buttons.all_text_contents() == ["15 m", "1 h", "6 h", "24 h", "all"]
        # a drag across the chart zooms its time axis, "all" gives the whole run back
        loss_box = page.locator(".sd-chart[data-title='Loss']")
        page.wait_for_function("() => document.querySelector(\".sd-chart[data-title='Loss']\")?.dataset.xrange")

        def span() -> float:
            lo, hi = (float(v) for v in loss_box.get_attribute("data-xrange").split(","))
            return hi - lo

        whole = span()
        over = loss_box.locator(".u-over").bounding_box()
        y = over["y"] + over["height"] / 2
        page.mouse.move(over["x"] + over["width"] * 0.3, y)
        page.mouse.down()
        page.mouse.move(over["x"] + over["width"] * 0.6, y, steps=5)
        page.mouse.up()
        page.wait_for_function("(w) => { const r = document.querySelector(\".sd-chart[data-title='Loss']\")"
                               ".dataset.xrange.split(',').map(Number); return r[1] - r[0] < w * 0.5; }", arg=whole)
        buttons.last.click()
        page.wait_for_function("(w) => { const r = document.querySelector(\".sd-chart[data-title='Loss']\")"
                               ".dataset.xrange.split(',').map(Number); return r[1] - r[0] >= w * 0.99; }", arg=whole)
        assert abs(span() - whole) <= whole * 0.01, (span(), whole)
    assert any("/app/static/uplot/uPlot.iife.min.js" in u for u in asked), "uPlot was not loaded"
    assert not [u for u in asked if "/PlotlyChart." in u], "the Training page loaded plotly's code"


LOSS = ".sd-chart[data-title='Loss']"


def _xrange(page) -> tuple[float, float]:
    lo, hi = page.evaluate(f"() => document.querySelector(\"{LOSS}\").dataset.xrange.split(',').map(Number)")
    return lo, hi


@pytest.mark.timeout(300)
def test_a_zoom_outlives_the_live_redraws_and_the_chart_is_drawn_in_place(tmp_path):
    """A live page draws its charts again every second or two: the window a user dragged stays while steps
    are appended (the same uPlot chart takes the new points), a double click gives the whole run back, and
    from then on the chart follows the new steps again."""
    # (the made-up log's loss reaches 0 at step 50: every step here is below it)
    ws = run_workspace(tmp_path / "ws", gen2_log(24, total_steps=200), name="zoom")

    def append(steps: int, before: int) -> None:
        with open(ws / "logs" / "run.log", "a", encoding="utf-8") as fh:
            fh.write(gen2_log(steps, 200)[len(gen2_log(before, 200)):])
        page.wait_for_function(f"() => document.querySelector(\"{LOSS}\")?.dataset.last === '{steps}'",
                               timeout=60_000)

    with serve(tmp_path / "home", workspace=ws) as url, browser(1440, 1800) as page:
        page.goto(url + "/training?token=" + url.token + "&run=run")
        _charts(page)
        page.wait_for_function(f"() => document.querySelector(\"{LOSS}\")?.dataset.xrange")
        lo, hi = _xrange(page)
        assert hi == 24
        page.evaluate(f"() => {{ document.querySelector(\"{LOSS}\").specdeckChart.plots[0].specdeckMark = 1; }}")
        over = page.locator(f"{LOSS} .u-over").bounding_box()
        y = over["y"] + over["height"] / 2
        page.mouse.move(over["x"] + over["width"] * 0.25, y)
        page.mouse.down()
        page.mouse.move(over["x"] + over["width"] * 0.5, y, steps=5)
        page.mouse.up()
        page.wait_for_function(f"() => document.querySelector(\"{LOSS}\").dataset.view === 'fixed'")
        zoomed = _xrange(page)
        assert zoomed[1] - zoomed[0] < (hi - lo) / 2, (zoomed, lo, hi)
        for steps, before in ((28, 24), (32, 28)):
            append(steps, before)
            settle(page)
            assert _xrange(page) == pytest.approx(zoomed), (steps, _xrange(page), zoomed)
        # drawn in place: the chart the mark was put on is the one shown, and no other is alive
        assert page.evaluate(f"() => document.querySelector(\"{LOSS}\").specdeckChart.plots[0].specdeckMark") == 1
        assert page.evaluate("() => [window.specdeckCharts, document.querySelectorAll('.uplot').length]") == \
            [len(_charts(page)), len(_charts(page))]
        # a double click: the whole run, and the new steps are in view as they come
        page.mouse.dblclick(over["x"] + over["width"] * 0.5, y)
        page.wait_for_function(f"() => document.querySelector(\"{LOSS}\").dataset.view === 'all'")
        append(36, 32)
        settle(page)
        assert _xrange(page)[1] == 36
        # a window chosen on the step axis means nothing on the wall-time axis: that one is shown whole
        page.mouse.move(over["x"] + over["width"] * 0.25, y)
        page.mouse.down()
        page.mouse.move(over["x"] + over["width"] * 0.5, y, steps=5)
        page.mouse.up()
        page.wait_for_function(f"() => document.querySelector(\"{LOSS}\").dataset.view === 'fixed'")
        page.locator("[data-testid='stButtonGroup'] button").filter(has_text="wall time").first.click()
        page.wait_for_function(f"() => Number(document.querySelector(\"{LOSS}\")?.dataset.last) > 1e9",
                               timeout=60_000)
        settle(page)
        last = float(page.evaluate(f"() => document.querySelector(\"{LOSS}\").dataset.last"))
        lo, hi = _xrange(page)
        assert page.evaluate(f"() => document.querySelector(\"{LOSS}\").dataset.view") == "all"
        assert hi == pytest.approx(last) and hi - lo > 30, (lo, hi, last)  # 36 steps a second apart
        # a range button's span follows the new points: the newest 15 minutes take the appended step
        page.locator(f"{LOSS} .sd-ranges button").filter(has_text="15 m").click()
        page.wait_for_function(f"() => document.querySelector(\"{LOSS}\").dataset.view === 'span'")
        with open(ws / "logs" / "run.log", "a", encoding="utf-8") as fh:
            fh.write(gen2_log(40, 200)[len(gen2_log(36, 200)):])
        page.wait_for_function(f"() => Number(document.querySelector(\"{LOSS}\").dataset.last) > {last}",
                               timeout=60_000)
        settle(page)
        newest = float(page.evaluate(f"() => document.querySelector(\"{LOSS}\").dataset.last"))
        assert _xrange(page)[1] == pytest.approx(newest) and newest > last
