"""The Servers page's log, with a running simulated server: a visit sends the latest lines only (the
"Earlier lines" expander is closed and empty); opened, with the dashboard's own probe requests shown, the
earlier lines are there, those requests among them."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from backend import runtime as runtime_mod
from tests.sglang.test_servers_page import PAGE, make_ws  # noqa: F401 - the fixture
from tests.helpers import shown_text

PROBE = '"GET /health HTTP/1.1" 200'


def _earlier(at):
    boxes = [e for e in at.expander if e.label.startswith("Earlier lines")]
    assert len(boxes) == 1, [e.label for e in at.expander]
    return boxes[0]


@pytest.mark.timeout(120)
def test_servers_log_sends_the_earlier_lines_only_while_open(make_ws):  # noqa: F811 - the fixture
    make_ws("EAGLE3")
    rt = runtime_mod.get_runtime()
    rt.start("sim", actor="tester", source="test", force=True)
    log = Path(rt.fleet.log_path("sim"))
    deadline = time.time() + 60
    while time.time() < deadline:  # enough lines for the expander, the probes' among them
        text = log.read_text(errors="replace") if log.exists() else ""
        if text.count(PROBE) >= 2 and len(text.splitlines()) > 40:
            break
        time.sleep(0.2)
    at = AppTest.from_file(PAGE, default_timeout=30).run()
    assert not at.exception, at.exception
    at.toggle(key="srv-log-probes").set_value(True).run()
    assert not at.exception, at.exception
    assert not _earlier(at).children  # closed: nothing behind it is sent
    log_codes = [t for t in shown_text(at) if "\n" in t]
    assert len(log_codes) == 1, "only the latest lines' block while the expander is closed"

    at.session_state["srv-log-probes-earlier"] = True  # what opening it does (the log's fragment runs again)
    at.run()
    assert not at.exception, at.exception
    [earlier] = shown_text(_earlier(at))
    assert earlier.count("\n") >= 20
    assert PROBE in "\n".join(shown_text(at))
