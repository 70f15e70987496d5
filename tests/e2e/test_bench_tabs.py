"""Benchmarks in a browser: only the open tab is built, and what was typed in the Run form is there again
after a visit to another tab (its fields are kept while the tab is not built)."""

from __future__ import annotations

import pytest

from tests.e2e._dashboard import browser, settle

pytestmark = pytest.mark.browser


@pytest.mark.timeout(300)
def test_the_run_forms_fields_come_back_after_another_tab_and_hidden_tabs_are_not_built(demo_dashboard):
    from playwright.sync_api import expect

    with browser(1024, 768) as page:
        page.goto(demo_dashboard.page("/benchmarks"), wait_until="domcontentloaded")
        expect(page.locator("[data-testid='stDataFrame']").first).to_be_visible(timeout=120_000)
        settle(page, 120_000)
        assert page.locator(".st-key-bench-f-conc").count() == 0  # the Run form is not built behind the table
        page.get_by_role("tab", name="Run a benchmark").click()
        conc = page.locator(".st-key-bench-f-conc input")
        conc.wait_for(timeout=60_000)
        conc.fill("1, 8")
        conc.press("Enter")
        settle(page, 60_000)
        prompts = page.locator(".st-key-bench-f-prompts input")
        prompts.fill("33")
        prompts.press("Enter")
        settle(page, 60_000)
        page.get_by_role("tab", name="Charts").click()
        expect(page.locator(".js-plotly-plot .main-svg").first).to_be_visible(timeout=60_000)
        settle(page, 60_000)
        assert page.locator(".st-key-bench-f-conc").count() == 0
        page.get_by_role("tab", name="Run a benchmark").click()
        conc = page.locator(".st-key-bench-f-conc input")
        conc.wait_for(timeout=60_000)
        settle(page, 60_000)
        assert conc.input_value() == "1, 8"
        assert page.locator(".st-key-bench-f-prompts input").input_value() == "33"
        assert "tab=Run+a+benchmark" in page.url
