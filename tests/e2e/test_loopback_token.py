"""A browser on this host needs the token the dashboard printed at start (as Jupyter's).

Another local user, a page on another localhost port or a TCP forwarder reaches
127.0.0.1 too: without the token it gets a page that asks for it (or a sign-in)
and nothing else.  Also: the pages fetch nothing from any other host (the page
icon is served by the dashboard), and sessions from one address are limited.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.e2e._dashboard import browser, serve, settle

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.browser


def _workspace(root: Path, access: str = "") -> Path:
    ws = root / "ws"
    ws.mkdir()
    (ws / "specdeck.toml").write_text(f"""
[workspace]
name = "tokened"

[telemetry]
source = "fake"

[access]
{access}

[[process]]
name = "ticker"
argv = ["{sys.executable}", "-m", "backend.demo", "ticker", "--interval", "0.5"]
cwd = "{REPO}"
""")
    return ws


def _ws_session(url: str, query: str = ""):
    from websockets.sync.client import connect

    from tests.e2e.netns_ws_client import Session

    host, port = urlsplit(url).hostname, urlsplit(url).port
    sock = socket.create_connection((host, port), timeout=60)
    ws = connect(f"ws://{host}:{port}/_stcore/stream", sock=sock, subprotocols=["streamlit"], open_timeout=60,
                 max_size=None)
    s = Session(ws)
    s.query = query
    return ws, s


@pytest.mark.timeout(300)
def test_a_local_browser_without_the_token_sees_only_the_token_page(tmp_path):
    from playwright.sync_api import expect

    ws = _workspace(tmp_path)
    hosts: set[str] = set()
    with serve(tmp_path / "home", workspace=ws, timeout_s=90) as url, browser(1440, 900) as page:
        page.on("request", lambda r: hosts.add(urlsplit(r.url).hostname or r.url[:40]))
        for target in (url, url + "/processes"):
            page.goto(target, wait_until="domcontentloaded")
            expect(page.get_by_role("heading", name="Open Specdeck")).to_be_visible(timeout=120_000)
            settle(page)  # the run is over: what it drew is all there is
            text = page.locator("[data-testid='stApp']").inner_text()
            assert "Workspace:" not in text and "tokened" not in text and "ticker" not in text
            assert page.locator("[data-testid='stSidebarNav']").count() == 0
        page.get_by_test_id("stTextInputField").fill("not-the-token")
        page.get_by_role("button", name="Open").click()
        expect(page.get_by_text("That is not this dashboard's token.")).to_be_visible(timeout=30_000)
        page.get_by_test_id("stTextInputField").fill(url.token)
        page.get_by_role("button", name="Open").click()
        expect(page.get_by_text("Workspace:").first).to_be_visible(timeout=120_000)
        # the URL printed at start opens the dashboard directly, and the token leaves the address bar
        page.goto(url.page("/processes"), wait_until="domcontentloaded")
        expect(page.get_by_role("heading", name="Processes").first).to_be_visible(timeout=120_000)
        expect(page.get_by_text("Workspace:").first).to_be_visible(timeout=30_000)
        settle(page)
        assert "token=" not in page.url
        assert page.locator("[data-testid='stException']").count() == 0
    assert hosts == {"127.0.0.1"}, hosts  # the icon, fonts and scripts all come from the dashboard


@pytest.mark.timeout(300)
def test_the_workspace_can_turn_the_token_off(tmp_path):
    from playwright.sync_api import expect

    ws = _workspace(tmp_path, "loopback_token = false")
    with serve(tmp_path / "home", workspace=ws, timeout_s=90) as url, browser(1440, 900) as page:
        page.goto(url, wait_until="domcontentloaded")
        expect(page.get_by_text("Workspace:").first).to_be_visible(timeout=120_000)


@pytest.mark.timeout(300)
def test_sessions_beyond_the_limit_from_one_address_are_refused(tmp_path):
    ws = _workspace(tmp_path, "sessions_per_address = 3")
    with serve(tmp_path / "home", workspace=ws, timeout_s=90) as url:
        opened = [_ws_session(url) for _ in range(5)]
        try:
            runs = [s.run() for _ws, s in opened]
        finally:
            for w, _s in opened:
                w.close()
        refused = ["Too many open dashboard sessions" in " ".join(r["alerts"]) for r in runs]
        assert refused == [False, False, False, True, True], refused
        assert all("tokened" not in "\n".join(r["text"]) for r in runs[3:])
        # the first sessions closed, a new one is served again
        w, s = _ws_session(url)
        try:
            again = s.run()
        finally:
            w.close()
        assert not any("Too many" in a for a in again["alerts"]) and again["headings"][:1] == ["Open Specdeck"]
