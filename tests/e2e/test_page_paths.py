"""Every page at its own URL in a browser: a fresh dashboard opened straight at a page's path keeps that
path and shows the page names (not the file names of the pages) while the workspace opens, and every
page's path opens that page, /servers included, and / opens the Overview, the first page, keeping the query."""

from __future__ import annotations

import re
import time

import pytest

from tests.e2e._dashboard import browser as _browser
from tests.e2e._dashboard import serve as _serve
from tests.e2e._dashboard import settle

pytestmark = pytest.mark.browser

TITLES = ["Overview", "Servers", "Regeneration", "Training", "Benchmarks", "Processes", "GPUs"]
FILE_NAMES = {"app", "login", "overview", "servers", "regeneration", "training", "benchmarks", "processes", "gpus"}


def _nav_texts(page) -> list[str]:
    return [t.strip().splitlines()[-1] for t in page.locator("[data-testid='stSidebarNav'] a").all_inner_texts()]


@pytest.mark.timeout(300)
def test_a_fresh_dashboard_opened_at_a_page_keeps_its_path_and_names(tmp_path):
    from playwright.sync_api import expect

    with _serve(tmp_path, warm=False) as url, _browser(1024, 768) as page:  # this visit is the server's first
        t0 = time.time()
        # a shared link: the page and its view's state (the history's range) in the query
        page.goto(url.page("/gpus") + "&range=6+h", wait_until="domcontentloaded")
        # the frame while the workspace opens: the page names and a line, not a blank page of file names
        expect(page.locator("[data-testid='stSidebarNav'] a").filter(has_text=re.compile("Regeneration")).first) \
            .to_be_visible(timeout=30_000)
        seen_names = time.time() - t0
        expect(page.get_by_role("heading", name="GPUs").first).to_be_visible(timeout=120_000)
        expect(page.get_by_text("Workspace:").first).to_be_visible(timeout=30_000)
        settle(page)
        expect(page).to_have_url(re.compile(r"/gpus\?(.*&)?range=6(\+|%20)h"))  # the link's view kept
        names = _nav_texts(page)
        assert names[:len(TITLES)] == TITLES, names
        assert not FILE_NAMES & {n.lower() for n in names if n not in TITLES}, names
        assert seen_names < 30, seen_names


@pytest.mark.timeout(300)
def test_every_page_opens_at_its_own_path(demo_dashboard):
    from playwright.sync_api import expect

    url = demo_dashboard
    with _browser(1440, 900) as page:
        for path, title in (("gpus", "GPUs"), ("processes", "Processes"), ("training", "Training"),
                            ("benchmarks", "Benchmarks"), ("regeneration", "Regeneration"), ("servers", "Servers")):
            page.goto(url.page(f"/{path}"), wait_until="domcontentloaded")
            expect(page.get_by_role("heading", name=title).first).to_be_visible(timeout=60_000)
            settle(page)  # a page that is not found says so at the start of the run
            expect(page).to_have_url(re.compile(rf"/{path}(\?|$)"))
            assert page.get_by_text("Page not found").count() == 0, path
            active = page.locator("[data-testid='stSidebarNav'] a[aria-current='page']")
            if active.count():
                assert title in active.first.inner_text(), (path, active.first.inner_text())
        page.goto(url.page("") + "&server=demo-tiny-eagle3", wait_until="domcontentloaded")
        expect(page.get_by_role("heading", name="Overview").first).to_be_visible(timeout=60_000)
        settle(page)
        # / is the Overview, the view's query kept (the token is taken by the sign-in gate)
        expect(page).to_have_url(re.compile(r"/\?(.*&)?server=demo-tiny-eagle3"))
        assert page.get_by_text("Page not found").count() == 0
