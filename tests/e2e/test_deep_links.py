"""A deep link in a fresh browser: `/servers?server=<the demo's second server>&panel=relaunch` opens the Servers
page on that server with its relaunch panel open, and the URL keeps saying so."""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from tests.e2e._dashboard import browser, settle

pytestmark = pytest.mark.browser

SECOND = "demo-tiny-eagle3"  # the demo workspace's second [[server]] (tests/app/test_demo.py)
SHOTS = Path(os.environ.get("SPECDECK_SHOTS", "/tmp/shots"))


@pytest.mark.timeout(300)
def test_a_link_opens_the_servers_page_on_its_server_with_the_relaunch_panel(demo_dashboard):
    from playwright.sync_api import expect

    with browser(1440, 900) as page:  # a browser of its own: no session state, only the link
        page.goto(demo_dashboard.page("/servers") + f"&server={SECOND}&panel=relaunch", wait_until="domcontentloaded")
        main = page.locator("[data-testid='stMain']")
        expect(page.get_by_role("heading", name="Servers").first).to_be_visible(timeout=120_000)
        expect(main.get_by_role("combobox", name="Server", exact=True)).to_have_value(SECOND, timeout=60_000)
        # the relaunch panel is open, on that server
        expect(main.get_by_text(re.compile(rf"{re.escape(SECOND)}\s+— edit, check")).first).to_be_visible(
            timeout=60_000)
        settle(page, 120_000)
        expect(main.get_by_role("button", name="Cancel").first).to_be_visible(timeout=60_000)
        query = parse_qs(urlparse(page.url).query)
        assert query.get("server") == [SECOND] and query.get("panel") == ["relaunch"], page.url
        assert page.get_by_text("From the link").count() == 0  # nothing in the link was ignored
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / "deep-link-servers-relaunch-1440.png"))

        # a name that is no server here: the page opens on the first server, with an amber note
        page.goto(demo_dashboard.page("/servers") + "&server=no-such-server", wait_until="domcontentloaded")
        expect(page.get_by_text(re.compile(r"server=no-such-server.*is not a server here: ignored")).first) \
            .to_be_visible(timeout=120_000)
        settle(page, 120_000)
        expect(main.get_by_role("combobox", name="Server", exact=True)).to_have_value("demo-llama70b-eagle3",
                                                                                     timeout=60_000)
        expect(main.get_by_role("button", name="Cancel")).to_have_count(0, timeout=30_000)
