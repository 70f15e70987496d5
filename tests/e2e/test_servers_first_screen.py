"""The Servers page's named use at first sight, in Chromium at 1024×768: the Start/Stop/Relaunch controls
and the status line with the speculative settings are within the first screen, and after a relaunch the
view goes to the server's status and startup progress, not to the log below."""

from __future__ import annotations

import pytest

from tests.e2e._dashboard import browser, open_page

pytestmark = pytest.mark.browser

WIDTH, HEIGHT = 1024, 768

BOX_JS = """(sel) => { const el = document.querySelector(sel); if (!el) return null;
  const r = el.getBoundingClientRect(); return {top: r.top, bottom: r.bottom, left: r.left, right: r.right}; }"""


SCROLL_DOWN_JS = """() => { for (const el of [document.scrollingElement, ...document.querySelectorAll('*')])
  if (el && el.scrollHeight > el.clientHeight + 1 && ['auto', 'scroll'].includes(getComputedStyle(el).overflowY))
    el.scrollTop = el.scrollHeight; document.scrollingElement.scrollTop = document.scrollingElement.scrollHeight; }"""
SCROLL_TOP_JS = """() => { for (const el of [document.scrollingElement, ...document.querySelectorAll('*')])
  if (el && el.scrollTop) el.scrollTop = 0; }"""


def _control_buttons(page):
    main = page.locator("[data-testid='stMain']")
    launch = main.get_by_role("button", name="Relaunch…").or_(main.get_by_role("button", name="Start…")).first
    stop = main.get_by_role("button", name="Stop", exact=True).first
    return launch, stop


@pytest.mark.timeout(420)
def test_controls_and_status_are_in_the_first_screen_and_the_view_follows_a_relaunch(demo_dashboard):
    from playwright.sync_api import expect

    with browser(width=WIDTH, height=HEIGHT) as page:
        page.goto(demo_dashboard.page(), wait_until="domcontentloaded")
        expect(page.get_by_text("Workspace:").first).to_be_visible(timeout=120_000)
        open_page(page, "Servers")
        page.wait_for_selector(".st-key-srv-status", timeout=120_000)
        launch, stop = _control_buttons(page)
        launch.wait_for(state="visible", timeout=60_000)
        stop.wait_for(state="visible", timeout=60_000)
        page.evaluate(SCROLL_TOP_JS)

        # the controls, where the eye lands: their bounding box ends within the first 768 px
        boxes = [launch.bounding_box(), stop.bounding_box(),
                 page.get_by_role("button", name="Measure baseline…").first.bounding_box()]
        assert all(b is not None for b in boxes), boxes
        bottom = max(b["y"] + b["height"] for b in boxes)
        assert bottom <= HEIGHT, f"the Start/Stop/Relaunch controls end at {bottom:.0f} px, below the first screen"
        # the status line with the speculative settings is in the first screen as well
        status = page.locator(".st-key-srv-status")
        expect(status).to_contain_text("speculation:")
        expect(status).to_contain_text("steps")
        expect(status).to_contain_text("draft tokens")
        box = page.evaluate(BOX_JS, ".st-key-srv-status")
        assert box["bottom"] <= HEIGHT, box

        # relaunch from the panel: its button sits at the panel's foot, scrolled to
        launch.click()
        go = page.locator("[data-testid='stMain']").get_by_role("button", name="Stop and relaunch").or_(
            page.locator("[data-testid='stMain']").get_by_role("button", name="Start", exact=True)).first
        go.wait_for(state="visible", timeout=120_000)
        anyway = page.get_by_text("Launch anyway", exact=False)
        if anyway.count():
            anyway.first.click()
            expect(go).to_be_enabled(timeout=30_000)
        # the operator reads down to the log, then presses the button (a click that does not scroll)
        page.evaluate(SCROLL_DOWN_JS)
        go.evaluate("b => b.click()")
        # the panel closes and the view goes to the status and its startup progress
        go.wait_for(state="detached", timeout=60_000)
        page.wait_for_function(
            """() => { const el = document.querySelector('.st-key-srv-status'); if (!el) return false;
                       const r = el.getBoundingClientRect(); return r.top >= 0 && r.bottom <= window.innerHeight; }""",
            timeout=30_000)
        box = page.evaluate(BOX_JS, ".st-key-srv-status")
        assert 0 <= box["top"] and box["bottom"] <= HEIGHT, box
