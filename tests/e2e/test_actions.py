"""An action shows in the Processes page's state history and audit log at once, in the
browser, without a reload (the buttons live in a fragment; the tables below it must follow)."""

from __future__ import annotations

import pytest

from tests.e2e._dashboard import browser, open_page

pytestmark = pytest.mark.browser


@pytest.mark.timeout(240)
def test_stop_shows_in_history_and_audit_without_a_reload(demo_dashboard):
    from playwright.sync_api import expect

    with browser(width=1440, height=1400) as page:
        page.goto(demo_dashboard.page(), wait_until="domcontentloaded")
        expect(page.get_by_text("Workspace:").first).to_be_visible(timeout=120_000)
        open_page(page, "Processes")
        page.locator("[data-testid='stSelectbox']").filter(has_text="Process").first.click()
        page.get_by_role("option", name="demo-ticker").click()
        stop = page.locator("[data-testid='stMain']").get_by_role("button", name="Stop", exact=True)
        expect(stop).to_be_enabled(timeout=120_000)  # the ticker is running
        audit = page.locator("[data-testid='stTable']").filter(has_text="outcome")
        history = page.locator("[data-testid='stTable']").filter(has_text="from").filter(has_text="to").last
        expect(history.locator("tbody tr").first).to_contain_text("RUNNING", timeout=30_000)
        expect(audit.locator("tbody tr").first).to_be_visible(timeout=30_000)
        # nothing has stopped the ticker yet (the dashboard is shared, but no other test stops it)
        assert not [row for row in audit.locator("tbody tr").all_inner_texts()
                    if {"stop", "demo-ticker"} <= set(row.split())]
        stop.click()
        page.get_by_role("button", name="Yes, stop").click()
        # the page is not reloaded; the audit table and the history's newest row appear by themselves
        audit_row = audit.locator("tbody tr").first
        expect(audit_row).to_contain_text("stop", timeout=10_000)
        expect(audit_row).to_contain_text("demo-ticker")
        expect(history.locator("tbody tr").first).to_contain_text("STOPPING", timeout=10_000)
