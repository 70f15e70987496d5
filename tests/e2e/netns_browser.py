"""Chromium from the network namespace against the exposed dashboard.

Run by tests/e2e/test_exposed_netns.py inside ``ip netns exec``:

    SPECDECK_E2E_PASSWORD=... python tests/e2e/netns_browser.py URL OUTDIR USER

Checks that an anonymous browser gets the sign-in page and nothing else (no
navigation, no sidebar, no workspace), also at a page's own URL, saves
OUTDIR/anonymous.png, signs in (a wrong password first), stops the process on
the Processes page, signs out, and prints one JSON object of what it saw,
including every host the page made its browser contact.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from playwright.sync_api import expect, sync_playwright

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # run as a script: its own folder is on the path, the repository is not
    sys.path.insert(0, str(REPO))

from tests.e2e import chromium  # noqa: E402

BANNER = "Sign in to start, stop or relaunch"


def _open(page, title: str) -> None:
    page.locator("[data-testid='stSidebarNav'] a").filter(has_text=title).first.click()
    expect(page.get_by_role("heading", name=title).first).to_be_visible(timeout=30_000)


def _nothing_but_sign_in(page) -> dict:
    expect(page.get_by_role("heading", name="Sign in").first).to_be_visible(timeout=120_000)
    # the run is over, so anything else it drew is on the page by now
    page.wait_for_function("() => document.querySelector(\"[data-testid='stApp']\")"
                           "?.getAttribute('data-test-script-state') === 'notRunning'", timeout=60_000)
    return {"nav": page.locator("[data-testid='stSidebarNav']").count(),
            # a sidebar drawn earlier in the tab may stay as an empty frame with its collapse control
            "sidebar": " ".join(page.locator("[data-testid='stSidebarUserContent']").all_inner_texts()).strip(),
            "text": page.locator("[data-testid='stApp']").inner_text()}


def main(argv: list[str]) -> int:
    from urllib.parse import urlsplit

    url, outdir, user = argv[1], Path(argv[2]), argv[3]
    password = os.environ["SPECDECK_E2E_PASSWORD"]
    outdir.mkdir(parents=True, exist_ok=True)
    seen: dict = {"exceptions": 0, "hosts": []}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(chromium.executable()), headless=True, args=chromium.ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.on("request", lambda r: seen["hosts"].append(urlsplit(r.url).hostname or r.url[:40]))
            page.goto(url + "/processes", wait_until="domcontentloaded")
            seen["anonymous_page_url"] = _nothing_but_sign_in(page)
            page.goto(url, wait_until="domcontentloaded")
            seen["anonymous"] = _nothing_but_sign_in(page)
            page.get_by_label("User name").fill(user)
            page.wait_for_timeout(300)  # let the field settle before the screenshot
            page.screenshot(path=str(outdir / "anonymous.png"))
            page.get_by_label("Password", exact=True).fill("not-the-password")
            page.get_by_role("button", name="Sign in").click()
            err = page.get_by_text("Unknown user name or wrong password.")
            expect(err).to_be_visible(timeout=30_000)
            seen["wrong_password"] = err.inner_text()
            page.get_by_label("Password", exact=True).fill(password)
            page.get_by_role("button", name="Sign in").click()
            expect(page.get_by_role("heading", name="Overview").first).to_be_visible(timeout=30_000)  # the page at /
            signed = page.get_by_text(f"Signed in as {user}")
            expect(signed).to_be_visible(timeout=30_000)
            seen["signed_in"] = signed.inner_text()
            seen["banner_after_sign_in"] = page.get_by_text(BANNER).count()

            _open(page, "Processes")
            # in the page, not the header's Stop that shows while a run is going on
            stop = page.locator("[data-testid='stMain']").get_by_role("button", name="Stop", exact=True)
            expect(stop).to_be_enabled(timeout=30_000)
            stop.click()
            page.get_by_role("button", name="Yes, stop").click()
            expect(page.get_by_text("Stop requested for ticker")).to_be_visible(timeout=30_000)
            seen["stopped"] = True
            page.screenshot(path=str(outdir / "processes-signed-in.png"), full_page=True)
            seen["exceptions"] = page.locator("[data-testid='stException']").count()

            page.get_by_role("button", name="Sign out").click()
            seen["signed_out"] = _nothing_but_sign_in(page)
        finally:
            browser.close()
    seen["hosts"] = sorted(set(seen["hosts"]))
    print(json.dumps(seen), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
