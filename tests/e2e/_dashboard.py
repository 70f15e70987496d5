"""Drive the dashboard in a real browser: `streamlit run app.py` headless on a free
127.0.0.1 port with the demo workspace, and Debian's Chromium through playwright."""

from __future__ import annotations

import atexit
import collections
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.e2e import chromium
from tests.helpers import free_port

REPO = Path(__file__).resolve().parents[2]
# The demo dashboard's environment for the browser tests: its simulated servers load in under a second
# (SPECDECK_SIM_SPEED only scales the startup sequence's pauses; the lines, the HTTP API and the decode
# speeds stay as they are), so a page shows the 70B demo server running rather than loading for 20 s.
DEMO_ENV = {"SPECDECK_SIM_SPEED": "50"}


class DashboardURL(str):
    """The dashboard's base URL; :meth:`page` gives a page's URL with the loopback token, as the
    URL printed at start carries it (a browser on this host without it gets the token page)."""

    token: str = ""
    home: Path | None = None

    def page(self, path: str = "") -> str:
        return f"{self}{path}?token={self.token}"


def _first_run(port: int, token: str, *, timeout_s: float) -> None:
    """One script run of the dashboard's first page over a raw websocket session, as a browser's first
    visit does it; raises when the run shows an exception."""
    import socket

    from websockets.sync.client import connect

    from tests.e2e.netns_ws_client import Session

    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_s)
    with connect(f"ws://127.0.0.1:{port}/_stcore/stream", sock=sock, subprotocols=["streamlit"],
                 open_timeout=timeout_s, max_size=None) as ws:
        s = Session(ws)
        s.query = f"token={token}"
        run = s.run()
    if run["exceptions"]:
        raise RuntimeError(f"the dashboard's first run raised: {run['exceptions'][:3]}")


def stop_group(proc: subprocess.Popen, grace_s: float = 15.0) -> None:
    """End the process group ``proc`` leads (started with ``start_new_session``): SIGTERM, ``grace_s``, then
    SIGKILL.  Used by the browser tests and the perf scripts that start a dashboard or a server."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


@contextmanager
def serve(home: Path, env_extra: dict[str, str] | None = None, *, workspace: Path | None = None,
          timeout_s: float = 60.0, address: str = "127.0.0.1", args: tuple[str, ...] = (),
          token: str | None = None, warm: bool = True, netns: str | None = None, end_processes: bool = True):
    """The dashboard as scripts/dashboard starts it (``python -m ui.launch [ARGS]``: `streamlit run app.py` with
    its start-up work begun as soon as it listens) on ``address`` and a free port, with ``workspace``, or else the
    demo workspace under ``home``, and the loopback ``token`` (a fresh one when None); yields its URL
    (a :class:`DashboardURL`) once ``/_stcore/health`` answers.  At the end the dashboard is stopped
    and so is every process of that workspace (``end_processes=False``: the processes are left to a real
    workspace's owner).  Used by the browser tests, the loopback tests, ``perf/bench_sessions.py`` and
    ``scripts/screenshots.py``.

    ``warm``: one script run of the first page as a local session with the token before the URL is
    yielded, so that the dashboard's first run (its runtime, the demo workspace written, the
    managed processes started) is done before a browser's timed waits begin; only on loopback.

    ``netns``: run it in that network namespace (``ip netns exec``), where ``address`` is; its health is
    asked from inside it too."""
    port = free_port()
    home.mkdir(parents=True, exist_ok=True)
    token = token or secrets.token_urlsafe(24)
    env = dict(os.environ, SPECDECK_HOME=str(home), PYTHONUNBUFFERED="1", SPECDECK_ACCESS_TOKEN=token)
    for name in ("SPECDECK_WORKSPACE", "FORWARDED_ALLOW_IPS"):  # never the caller's
        env.pop(name, None)
    if workspace is not None:
        env["SPECDECK_WORKSPACE"] = str(workspace)
    env.update(env_extra or {})
    ws = workspace or home / "demo"
    log = open(home / "streamlit.log", "wb")
    inside = ["ip", "netns", "exec", netns] if netns else []  # it execs the command: the pid is streamlit's

    def start(port: int) -> tuple[subprocess.Popen, DashboardURL]:
        proc = subprocess.Popen(
            [*inside, sys.executable, "-m", "ui.launch", "--server.address", address, "--server.port", str(port),
             "--server.headless", "true", "--global.developmentMode", "false", *args],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        url = DashboardURL(f"http://{address}:{port}")
        url.token = token
        url.home = home  # its log and, for the demo, its workspace (tests/e2e/conftest.py reads them on a failure)
        return proc, url

    proc, url = start(port)
    starts = 1
    try:
        deadline = time.time() + timeout_s
        while True:
            if _healthy(url, netns):
                break
            if proc.poll() is not None and starts < PORT_TRIES and _port_refused(home) >= starts:
                # the free port was taken between free_port() and the dashboard's bind (an outgoing connection
                # of a busy machine gets its local port from the same range): another port
                starts += 1
                port = free_port()
                proc, url = start(port)
                continue
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("streamlit did not become healthy: "
                                   + (home / "streamlit.log").read_text(errors="replace")[-2000:])
            time.sleep(0.5)
        if warm and address == "127.0.0.1":
            _first_run(port, token, timeout_s=max(timeout_s, 240.0))
        try:
            yield url
        except Exception as e:  # a failed wait: what the dashboard wrote goes with the failure
            try:
                tail = (home / "streamlit.log").read_text(errors="replace")[-3000:]
            except OSError as exc:
                tail = f"(cannot read it: {exc})"
            raise AssertionError(f"{e}\n--- the dashboard's log (its end):\n{tail}") from e
    finally:
        stop_group(proc)
        log.close()
        # end the workspace's managed processes too
        if end_processes and (ws / "specdeck.toml").exists():
            subprocess.run([sys.executable, "-m", "backend.cli", "--workspace", str(ws),
                            "processes", "stop-all"], cwd=REPO, env=env, timeout=60,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


PORT_TRIES = 3  # dashboards started on a fresh free port when the one before was taken before the bind


def _port_refused(home: Path) -> int:
    """How many starts logged that their port was not available."""
    try:
        return (home / "streamlit.log").read_text(errors="replace").count(" is not available")
    except OSError:
        return 0


def _healthy(url: str, netns: str | None) -> bool:
    """Whether the dashboard answers ``/_stcore/health`` with ok (asked from inside ``netns``)."""
    if netns is None:
        try:
            with urllib.request.urlopen(url + "/_stcore/health", timeout=2) as r:
                return r.read().strip() == b"ok"
        except OSError:
            return False
    code = ("import sys, urllib.request\n"
            "try:\n"
            "    print(urllib.request.urlopen(sys.argv[1] + '/_stcore/health', timeout=2).read().decode())\n"
            "except OSError:\n"
            "    pass\n")
    try:
        r = subprocess.run(["ip", "netns", "exec", netns, sys.executable, "-c", code, url], capture_output=True,
                           text=True, timeout=20)
    except subprocess.TimeoutExpired:
        return False
    return r.stdout.strip() == "ok"


# The test process's one Chromium (and playwright's driver), started at the first browser() and ended when the
# process ends: each browser() is a fresh context of it (its own cookies, storage and cache, as a new browser's),
# so a test pays for a context (a few hundred ms of CPU) rather than for starting Chromium (about a second).
_SHARED: dict = {}


def _close_chromium() -> None:
    for name, end in (("browser", "close"), ("playwright", "stop")):
        thing = _SHARED.pop(name, None)
        if thing is not None:
            try:
                getattr(thing, end)()
            except Exception:  # already gone (a crashed browser, a driver that ended)
                pass


def _chromium():
    """The shared Chromium, started again when it is gone (a crash, a test that closed it)."""
    shared = _SHARED.get("browser")
    if shared is not None and shared.is_connected():
        return shared
    if "playwright" not in _SHARED:
        from playwright.sync_api import sync_playwright

        _SHARED["playwright"] = sync_playwright().start()
        atexit.register(_close_chromium)
    shared = _SHARED["browser"] = _SHARED["playwright"].chromium.launch(
        executable_path=str(chromium.executable()), headless=True, args=chromium.ARGS,
    )
    return shared


@contextmanager
def browser(width: int = 1600, height: int = 1200):
    """A page in a fresh browser context of the process's Chromium, ``width`` x ``height``; a failed wait inside
    comes out with what the browser saw (its URL, the app's state, its last console lines and requests)."""
    why = chromium.missing()
    if why:
        pytest.fail(why)
    context = _chromium().new_context(viewport={"width": width, "height": height})
    try:
        page = context.new_page()
        seen = _watch(page)
        try:
            yield page
        except Exception as e:  # a failed wait: what the browser saw goes with the failure
            raise AssertionError(f"{e}\n--- the browser at {page.url}: {_app_state(page)}\n"
                                 + "\n".join(seen)) from e
    finally:
        try:
            context.close()
        except Exception:  # the browser went away with the test's failure: the next browser() starts another
            pass


class _Seen:
    """The browser's last events, a line repeated at once kept as one with its count (a live part's timer
    repeats the same console error every second while the page is disconnected: it must not push out the
    websocket's close or the request that failed before it)."""

    def __init__(self, keep: int = 40) -> None:
        self._lines: collections.deque[list] = collections.deque(maxlen=keep)

    def append(self, line: str) -> None:
        if self._lines and self._lines[-1][0] == line:
            self._lines[-1][1] += 1
        else:
            self._lines.append([line, 1])

    def __iter__(self):
        return iter([line if n == 1 else f"{line} (x{n})" for line, n in self._lines])


def _watch(page) -> _Seen:
    """The browser's last console lines, failed requests, error answers and websockets, for a failure's message."""
    seen = _Seen()
    page.on("console", lambda m: seen.append(f"console {m.type}: {m.text[:300]}"))
    page.on("requestfailed", lambda r: seen.append(f"failed {r.method} {r.url[:150]}: {r.failure}"))
    page.on("response", lambda r: seen.append(f"HTTP {r.status} {r.url[:150]}") if r.status >= 400 else None)
    page.on("framenavigated", lambda f: seen.append(f"navigated to {f.url[:150]}") if f == page.main_frame else None)

    def ws(w) -> None:
        seen.append(f"websocket opened {w.url[:150]}")
        w.on("close", lambda _w: seen.append(f"websocket closed {w.url[:150]}"))
        w.on("socketerror", lambda err: seen.append(f"websocket error {w.url[:150]}: {err}"))

    page.on("websocket", ws)
    return seen


def _app_state(page) -> str:
    """The app's connection and script states, or the start of the body where the app is not there."""
    try:
        page.set_default_timeout(5_000)  # a page that hangs must not hold the failure's report for 30 s
        return str(page.evaluate(
            "() => { const a = document.querySelector(\"[data-testid='stApp']\"); return a ? "
            "'connection ' + a.getAttribute('data-test-connection-state') + ', script ' + "
            "a.getAttribute('data-test-script-state') : 'no app; body: ' + document.body.innerHTML.slice(0, 400) }"))
    except Exception as exc:  # the page itself is gone or hangs
        return f"(cannot read the page: {exc})"


def open_page(page, title: str) -> None:
    """Open a page from the sidebar.  A click that lands while the sidebar's own timed refresh
    redraws it can be lost (the page stays where it was, with no error): click once more then."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import expect

    heading = page.get_by_role("heading", name=title).first
    for attempt in range(2):
        page.locator("[data-testid='stSidebarNav'] a").filter(has_text=title).first.click()
        page.wait_for_selector("[data-testid='stApp'][data-test-connection-state='CONNECTED']", timeout=30_000)
        try:
            heading.wait_for(state="visible", timeout=20_000 if attempt == 0 else 30_000)
            break
        except PlaywrightTimeout:
            if attempt:
                raise
    expect(heading).to_be_visible()


def settle(page, timeout_ms: float = 60_000) -> None:
    """Wait until the page's script run is over (the app's ``data-test-script-state`` is ``notRunning``):
    what the run draws, its live fragments' first runs included, is on the page."""
    page.wait_for_function("() => document.querySelector(\"[data-testid='stApp']\")"
                           "?.getAttribute('data-test-script-state') === 'notRunning'", timeout=timeout_ms)
