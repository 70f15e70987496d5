"""Chromium from the network namespace against the exposed dashboard.

Run by tests/e2e/test_exposed_netns.py inside ``ip netns exec``:

    SPECDECK_E2E_PASSWORD=... python tests/e2e/netns_browser.py URL OUTDIR USER

Checks the sign-in banner on every page and the locked Stop button, saves
OUTDIR/login.png, signs in (a wrong password first), stops the process on
the Processes page, signs out, and prints one JSON object of what it saw.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

CHROMIUM = "/usr/bin/chromium"
PAGES = ("Servers", "Processes", "GPUs")
BANNER = "Sign in to start, stop or relaunch"


def _open(page, title: str) -> None:
    page.locator("[data-testid='stSidebarNav'] a").filter(has_text=title).first.click()
    expect(page.get_by_role("heading", name=title).first).to_be_visible(timeout=30_000)


def main(argv: list[str]) -> int:
    url, outdir, user = argv[1], Path(argv[2]), argv[3]
    password = os.environ["SPECDECK_E2E_PASSWORD"]
    outdir.mkdir(parents=True, exist_ok=True)
    seen: dict = {"banner": {}, "exceptions": 0}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                     args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                                           "--disable-component-update", "--no-first-run"])
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.goto(url, wait_until="domcontentloaded")
            expect(page.get_by_text("Workspace:").first).to_be_visible(timeout=60_000)
            for title in PAGES:
                _open(page, title)
                banner = page.get_by_text(BANNER).first
                expect(banner).to_be_visible(timeout=30_000)
                seen["banner"][title] = banner.inner_text()
            _open(page, "Processes")
            stop = page.get_by_role("button", name="Stop", exact=True)
            expect(stop).to_be_visible(timeout=30_000)
            seen["stop_disabled_unsigned"] = stop.is_disabled()

            _open(page, "Sign in")
            page.get_by_label("User name").fill(user)
            page.wait_for_timeout(300)  # let the field settle before the screenshot
            page.screenshot(path=str(outdir / "login.png"))
            page.get_by_label("Password", exact=True).fill("not-the-password")
            page.get_by_role("button", name="Sign in").click()
            err = page.get_by_text("Unknown user name or wrong password.")
            expect(err).to_be_visible(timeout=30_000)
            seen["wrong_password"] = err.inner_text()
            page.get_by_label("Password", exact=True).fill(password)
            page.get_by_role("button", name="Sign in").click()
            expect(page.get_by_role("heading", name="Servers").first).to_be_visible(timeout=30_000)
            signed = page.get_by_text(f"Signed in as {user}")
            expect(signed).to_be_visible(timeout=30_000)
            seen["signed_in"] = signed.inner_text()
            seen["banner_after_sign_in"] = page.get_by_text(BANNER).count()

            _open(page, "Processes")
            stop = page.get_by_role("button", name="Stop", exact=True)
            expect(stop).to_be_enabled(timeout=30_000)
            stop.click()
            page.get_by_role("button", name="Yes, stop").click()
            expect(page.get_by_text("Stop requested for ticker")).to_be_visible(timeout=30_000)
            seen["stopped"] = True
            page.screenshot(path=str(outdir / "processes-signed-in.png"), full_page=True)
            seen["exceptions"] = page.locator("[data-testid='stException']").count()

            page.get_by_role("button", name="Sign out").click()
            expect(page.get_by_text(BANNER).first).to_be_visible(timeout=30_000)
            seen["signed_out"] = True
        finally:
            browser.close()
    print(json.dumps(seen), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
