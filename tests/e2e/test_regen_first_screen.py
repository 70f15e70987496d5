"""The Regeneration page's named use at first sight: at 1024x768, in Chromium, the run's Pause,
Resume and Stop buttons and its ETA lie within the first screen (their boxes end above 768 px)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.e2e._dashboard import browser, serve
from tests.regen.regen_fixtures import append, out_row, snap

pytestmark = pytest.mark.browser


def _workspace(root: Path) -> Path:
    """A run 30 min into 83,288 rows over three datasets and one server, with answers written."""
    root.mkdir(parents=True)
    (root / "specdeck.toml").write_text('[workspace]\nname = "regen-first-screen"\n')
    reg = root / "outputs" / "regen"
    reg.mkdir(parents=True)
    append(reg / "code.jsonl", *[out_row(f"s{i}", f"answer {i}", dataset="stack-v2") for i in range(5)])
    now, done, pts = time.time(), 0, []
    for k in range(60):
        done += 40 + (k % 3) * 20
        pts.append(snap(now - 1800 + 30 * k, done, total=83_288, failed=12, skipped=31, in_flight=64,
                        started_at=now - 1800, req_s=1.5 + (k % 3) * 0.3, tok_s=700.0 + (k % 5) * 60,
                        datasets={"stack-v2": {"total": 60_000, "done": done, "failed": 12, "skipped": 29},
                                  "humaneval-x": {"total": 23_257, "done": 0, "failed": 0, "skipped": 0},
                                  "tiny": {"total": 31, "done": 0, "failed": 0, "skipped": 2}},
                        servers={"http://127.0.0.1:30000": {"name": "demo", "state": "up", "in_flight": 64,
                                                            "done": done, "failed": 12, "retries": 3, "req_s": 1.6,
                                                            "tok_s": 760.0, "last_error": None}},
                        completion_tokens_hist={"edges": [0, 64, 128, 256], "counts": [50, 300, 400]}))
    pts[-1]["t"] = now - 1
    append(reg / "code.progress.jsonl", *pts)
    return root


@pytest.mark.timeout(300)
def test_controls_and_eta_are_in_the_first_screen_at_1024x768(tmp_path):
    from playwright.sync_api import expect

    ws = _workspace(tmp_path / "ws")
    with serve(tmp_path / "home", workspace=ws) as url, browser(width=1024, height=768) as page:
        page.goto(url.page("/regeneration"), wait_until="domcontentloaded")
        main = page.locator("[data-testid='stMain']")
        eta = main.locator("[data-testid='stMetric']").filter(has_text="ETA").first
        expect(eta).to_contain_text("point", timeout=120_000)  # the estimate is drawn, not N/A
        boxes = {}
        for name in ("Pause", "Resume", "Stop"):
            button = main.get_by_role("button", name=name, exact=True).first
            expect(button).to_be_visible(timeout=30_000)
            boxes[name] = button.bounding_box()
        boxes["ETA"] = eta.bounding_box()
        page.screenshot(path=str(tmp_path / "regen-1024x768.png"))
        for name, box in boxes.items():
            assert box is not None, name
            assert box["y"] >= 0 and box["y"] + box["height"] <= 768, (name, box)
        # nothing scrolled to get there: the page is at its top
        assert page.evaluate("() => document.querySelector(\"[data-testid='stMain']\").scrollTop") == 0


@pytest.mark.timeout(300)
def test_speed_and_lengths_are_drawn_by_uplot_without_plotly(tmp_path):
    """The speed chart is two uPlot panels (rows/s above, tok/s below) zoomed together, the answer lengths
    are bars over their bins, and the page never fetches plotly's code."""
    from playwright.sync_api import expect

    ws = _workspace(tmp_path / "ws")
    with serve(tmp_path / "home", workspace=ws) as url, browser(width=1440, height=900) as page:
        fetched = []
        page.on("request", lambda r: fetched.append(r.url))
        page.goto(url.page("/regeneration"), wait_until="domcontentloaded")
        speed = page.locator(".sd-chart[data-title='Speed'][data-drawn]")
        expect(speed).to_have_attribute("data-panels", "2", timeout=120_000)
        assert speed.locator("canvas").count() == 2
        # uPlot writes its axes on the canvas: their titles read from the charts
        axes = page.evaluate("el => el.specdeckChart.plots.map(p => p.axes[1].label)", speed.element_handle())
        assert axes == ["rows/s", "tok/s"]
        legends = speed.locator(".u-legend").all_inner_texts()
        assert "rows/s (completed)" in legends[0] and "answer tok/s (this job)" in legends[1], legends
        lengths = page.locator(".sd-chart[data-title='Answer lengths (tokens)'][data-drawn]")
        expect(lengths).to_have_attribute("data-drawn", "3", timeout=30_000)
        bins = page.evaluate("el => { const p = el.specdeckChart.plots[0]; return p.axes[0].values(p, [0, 1, 2]); }",
                             lengths.element_handle())
        assert bins == ["0-64", "64-128", "≥ 128"]
        # a drag across the upper panel zooms both: the x range narrows and the lower panel follows
        full = [float(v) for v in speed.get_attribute("data-xrange").split(",")]
        top = speed.locator(".u-over").first
        top.scroll_into_view_if_needed()
        box = top.bounding_box()
        page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] / 2)
        page.mouse.down()
        page.mouse.move(box["x"] + box["width"] * 0.9, box["y"] + box["height"] / 2, steps=8)
        page.mouse.up()
        page.wait_for_function(
            "([el, span]) => { const [a, b] = el.dataset.xrange.split(',').map(Number); return b - a < span / 2; }",
            arg=[speed.element_handle(), full[1] - full[0]], timeout=10_000)
        lower = page.evaluate("el => { const p = el.specdeckChart.plots[1]; return [p.scales.x.min, p.scales.x.max]; }",
                              speed.element_handle())
        upper = [float(v) for v in speed.get_attribute("data-xrange").split(",")]
        assert lower == pytest.approx(upper)
        speed.screenshot(path=str(tmp_path / "regen-speed-uplot.png"))
    assert not [u for u in fetched if "plotly" in u.lower()], [u for u in fetched if "plotly" in u.lower()]
