"""Small helpers shared by the tests."""

from __future__ import annotations

import socket
import time
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]


def open_page(page: str, timeout: float = 60, *, tab: str | None = None):
    """The dashboard under AppTest, switched to ``page`` (e.g. "app_pages/benchmarks.py"), without an exception;
    ``tab``: the Benchmarks tab chosen first (only the open tab is built)."""
    from streamlit.testing.v1 import AppTest  # noqa: PLC0415 (only the page tests need it)

    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=timeout)
    at.run()
    at.switch_page(page)
    if tab is not None:
        at.session_state["bench-tab"] = tab  # what choosing the tab does (the page runs again)
    at.run()
    assert not at.exception, at.exception
    return at


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(cond, timeout: float, what: str, every: float = 0.05):
    """``cond()``'s first true value, asked every ``every`` seconds; an AssertionError naming
    ``what`` when ``timeout`` seconds pass without one."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = cond()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def close_runtime(root: Path, *, source: str = "test") -> None:
    """The end of a test that ran the dashboard's runtime on the workspace ``root``: every process
    it still runs (or waits to restart) is stopped, then every runtime is closed."""
    from backend import runtime as runtime_mod  # noqa: PLC0415 (only the page tests need it)

    rt = runtime_mod._runtimes.get(Path(root).resolve())
    if rt is not None:
        for v in rt.supervisor.views():
            if v.live:
                rt.supervisor.stop(v.name, actor="test", source=source, wait=True)
    runtime_mod.close_all()


def printed(log: Path, line: str) -> int:
    """How many lines of ``log`` are exactly ``line``: what the process printed, never the
    run's header, which quotes the command (and so any marker in ``python -c`` code)."""
    try:
        text = Path(log).read_text(errors="replace")
    except FileNotFoundError:
        return 0
    return sum(1 for t in text.splitlines() if t.strip() == line)


def shown_text(at) -> list[str]:
    """The text of every code block (st.code) and then of every text block (ui.components.text_block) on the
    page under AppTest."""
    import html
    import re

    out = [c.value for c in at.code]
    for h in at.get("html"):
        m = re.fullmatch(r'<pre class="specdeck-text"[^>]*>(.*)</pre>', h.value, re.S)
        if m:
            out.append(html.unescape(m.group(1)))
    return out


class LocalHTTPServer:
    """A ``ThreadingHTTPServer`` on 127.0.0.1 and a free port, serving ``handler`` (a
    ``BaseHTTPRequestHandler`` class) in a daemon thread while used as a context manager."""

    def __init__(self, handler):
        import threading
        from http.server import ThreadingHTTPServer

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)
