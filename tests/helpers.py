"""Small helpers shared by the tests."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]


def fresh_python(code: str, timeout: float = 120) -> str:
    """What ``code`` prints, run in a fresh interpreter from the repository (what a module import loads can
    only be seen in a process that has not loaded it yet); a failure with its stderr when it exits non-zero."""
    r = subprocess.run([sys.executable, "-c", code], cwd=str(REPO), capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr
    return r.stdout


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


def line_chart_json(at) -> list[str]:
    """The JSON text of the page's uPlot line charts' figures (plotly's own), in page order."""
    from ui.linechart import NAME  # noqa: PLC0415

    return [c.proto.bytes.decode() for c in at.get("bidi_component") if c.proto.component_name == NAME]


def line_charts(at) -> list[dict]:
    """The figures of the page's uPlot line charts (ui/linechart.py sends each as plotly's JSON), in page
    order, with numpy arrays written as typed arrays decoded to lists (NaN as None)."""
    import json  # noqa: PLC0415

    figs = [json.loads(text) for text in line_chart_json(at)]
    for fig in figs:
        for t in fig["data"]:
            for k in ("x", "y"):
                if k in t:
                    t[k] = decoded(t[k])
    return figs


def decoded(value):
    """A trace's array as a list: plotly writes numpy arrays as typed arrays (``{"dtype", "bdata"}``, base64);
    a missing value (NaN) is None, as in a list."""
    import base64  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415

    if isinstance(value, dict) and "bdata" in value:
        arr = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
        if "shape" in value:
            arr = arr.reshape([int(n) for n in str(value["shape"]).split(",")])
        return [None if isinstance(v, float) and v != v else v for v in arr.tolist()]
    return value
