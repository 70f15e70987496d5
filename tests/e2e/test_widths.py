"""Nothing a user needs is cut off at 1024 px or 1440 px: the Servers (with its relaunch
panel open), Processes and GPUs pages of the demo, in Chromium, at both widths.

An element is cut when its content is wider than its box (scrollWidth > clientWidth)
while the box hides the overflow (an ellipsis or a clip): button labels, metric labels,
values and deltas, table cells, select boxes, captions of the live blocks.  A chart's
legend is cut when it reaches past its chart."""

from __future__ import annotations

import pytest

from tests.e2e._dashboard import browser, open_page, settle

pytestmark = pytest.mark.browser

WIDTHS = (1024, 1440)

# elements whose text a user reads; the checker looks at each and at its descendants
SELECTORS = [
    "[data-testid='stMain'] button",
    "[data-testid='stMetricLabel']",
    "[data-testid='stMetricValue']",
    "[data-testid='stMetricDelta']",
    "[data-testid='stTable'] td",
    "[data-testid='stTable'] th",
    "[data-testid='stMain'] [data-testid='stSelectbox'] [data-baseweb='select'] div",
    "[data-testid='stMain'] [data-testid='stWidgetLabel']",
    "[data-testid='stMain'] [data-testid='stExpander'] summary",
    "[data-testid='stSidebar'] [data-testid='stMarkdownContainer']",
]

CUT_JS = """(selectors) => {
  const cut = [];
  const seen = new Set();
  const hides = (el) => {
    const cs = getComputedStyle(el);
    return cs.textOverflow === 'ellipsis' || ['hidden', 'clip'].includes(cs.overflowX);
  };
  for (const sel of selectors) {
    for (const root of document.querySelectorAll(sel)) {
      for (const el of [root, ...root.querySelectorAll('*')]) {
        if (seen.has(el) || !el.offsetParent) continue;
        seen.add(el);
        const text = (el.innerText || '').trim();
        if (!text || !hides(el)) continue;
        if (el.scrollWidth > el.clientWidth + 1) cut.push(sel + ' :: ' + text.slice(0, 80));
      }
    }
  }
  for (const table of document.querySelectorAll("[data-testid='stTable']")) {
    // a table wider than its place scrolls sideways: its right-hand columns are out of sight
    for (const el of [table, ...table.querySelectorAll('div')]) {
      if (el.offsetParent && el.scrollWidth > el.clientWidth + 1) {
        cut.push('table wider than the page :: ' + (table.querySelector('tr')?.innerText || '').slice(0, 80));
        break;
      }
    }
  }
  for (const plot of document.querySelectorAll('.js-plotly-plot')) {
    const box = plot.getBoundingClientRect();
    for (const legend of plot.querySelectorAll('g.legend')) {
      const r = legend.getBoundingClientRect();
      if (r.width && (r.right > box.right + 1 || r.left < box.left - 1))
        cut.push('chart legend :: ' + (legend.textContent || '').slice(0, 80));
    }
  }
  for (const chart of document.querySelectorAll('.sd-chart')) {  // uPlot's (ui/linechart.py)
    const box = chart.getBoundingClientRect();
    for (const legend of chart.querySelectorAll('.u-legend')) {
      const r = legend.getBoundingClientRect();
      if (r.width && (r.right > box.right + 1 || r.left < box.left - 1))
        cut.push('chart legend :: ' + (legend.textContent || '').slice(0, 80));
    }
  }
  return cut;
}"""


def _settle(page) -> None:
    """Wait until the page has drawn its live blocks (metrics or tables) and stopped running."""
    page.wait_for_selector("[data-testid='stMetric'], [data-testid='stTable']", timeout=120_000)
    settle(page, 30_000)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("width", WIDTHS)
def test_nothing_a_user_needs_is_cut_off(demo_dashboard, width):
    from playwright.sync_api import expect

    found: dict[str, list[str]] = {}
    with browser(width=width, height=900) as page:
        page.goto(demo_dashboard.page(), wait_until="domcontentloaded")
        expect(page.get_by_text("Workspace:").first).to_be_visible(timeout=120_000)
        for title in ("Servers", "Processes", "GPUs"):
            open_page(page, title)
            # the demo server runs: its live metrics and charts are drawn
            if title == "Servers":
                page.wait_for_selector("[data-testid='stMetricValue']", timeout=120_000)
                page.wait_for_selector(".sd-chart[data-drawn] .u-legend", timeout=90_000)
            _settle(page)
            found[title] = page.evaluate(CUT_JS, SELECTORS)
            if title == "Servers":  # and the relaunch panel with its preflight findings
                page.get_by_role("button", name="Relaunch…").or_(page.get_by_role("button", name="Start…")).first.click()
                page.get_by_role("button", name="Cancel").first.wait_for(timeout=30_000)
                _settle(page)
                found["Servers › relaunch panel"] = page.evaluate(CUT_JS, SELECTORS)
                page.get_by_role("button", name="Cancel").first.click()
    cut = {where: items for where, items in found.items() if items}
    assert not cut, f"cut off at {width} px: {cut}"
