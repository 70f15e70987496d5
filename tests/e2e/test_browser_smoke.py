"""Browser smoke test: `streamlit run app.py` headless, Debian's Chromium
loads every page, finds no exception element, and saves a screenshot of
each page under artifacts/screenshots/."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e._dashboard import browser as _browser
from tests.e2e._dashboard import open_page, settle
from tests.e2e._dashboard import serve as _serve

REPO = Path(__file__).resolve().parents[2]
SHOTS = REPO / "artifacts" / "screenshots"
PAGES = [("overview", "Overview"), ("servers", "Servers"), ("regeneration", "Regeneration"), ("training", "Training"), ("benchmarks", "Benchmarks"), ("processes", "Processes"),
         ("gpus", "GPUs")]

pytestmark = pytest.mark.browser


@pytest.mark.timeout(240)
def test_every_page_loads_without_exception(demo_dashboard):
    from playwright.sync_api import expect

    url = demo_dashboard
    SHOTS.mkdir(parents=True, exist_ok=True)
    present = [(slug, title) for slug, title in PAGES if (REPO / "app_pages" / f"{slug}.py").exists()]
    assert present, "no pages found"
    with _browser() as page:
        # the frame runs first, so st.navigation defines the pages
        page.goto(url.page(), wait_until="domcontentloaded")
        page.wait_for_selector("[data-testid='stAppViewContainer']", timeout=30_000)
        expect(page.get_by_text("Workspace:").first).to_be_visible(timeout=30_000)
        for slug, title in present:
            open_page(page, title)
            settle(page)  # the page's run and its first live fragments have drawn
            page.screenshot(path=str(SHOTS / f"{slug}.png"), full_page=True)
            expect(page.get_by_text("Workspace:").first).to_be_visible()
            exc = page.locator("[data-testid='stException']")
            assert exc.count() == 0, f"{slug}: exception shown: {exc.first.inner_text()[:2000]}"


@pytest.mark.timeout(240)
def test_a_page_url_opened_first_gets_the_frame(tmp_path):
    """The first request of a fresh server straight to a page's URL still shows the frame."""
    from playwright.sync_api import expect

    with _serve(tmp_path, warm=False) as url, _browser() as page:  # this visit is the server's first
        page.goto(url.page("/gpus"), wait_until="domcontentloaded")
        expect(page.get_by_role("heading", name="GPUs").first).to_be_visible(timeout=120_000)
        expect(page.get_by_text("Workspace:").first).to_be_visible(timeout=30_000)
        nav = page.locator("[data-testid='stSidebarNav'] a")
        titles = [nav.nth(i).inner_text().strip().splitlines()[-1].strip() for i in range(nav.count())]
        assert titles == ["Overview", "Servers", "Regeneration", "Training", "Benchmarks", "Processes", "GPUs"], titles  # the pages. titles, not their file names
        assert page.locator("[data-testid='stException']").count() == 0
