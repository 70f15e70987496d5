"""The "Earlier lines" expander of a log tail (ui.components.log_block), as the Servers and Processes pages
draw it: while closed it holds nothing (nothing is sent to the browser on a visit or at a
refresh of the log); opened, it shows the lines before the latest ones, and it stays open (or closed) as the
log grows and the count in its label changes."""

from __future__ import annotations

from streamlit.testing.v1 import AppTest

from tests.helpers import shown_text


def _script() -> None:
    import streamlit as st

    from ui.components import log_block

    n = st.session_state.get("n-lines", 60)
    log_block([f"line {i}" for i in range(n)], newest_age_s=1.0, toggle_key="t-probes")


def _codes(at) -> list[str]:
    return shown_text(at)


def _earlier(at):
    [box] = [e for e in at.expander if e.label.startswith("Earlier lines")]
    return box


def test_closed_it_holds_no_code_and_opened_it_shows_the_earlier_lines():
    at = AppTest.from_function(_script, default_timeout=30).run()
    assert not at.exception
    assert _earlier(at).label == "Earlier lines (45)"
    codes = _codes(at)
    assert codes == ["\n".join(f"line {i}" for i in range(45, 60))]  # only the latest 15 lines are sent
    assert not _earlier(at).children

    at.session_state["t-probes-earlier"] = True  # what opening it does (the fragment or page runs again)
    at.run()
    assert not at.exception
    earlier = "\n".join(f"line {i}" for i in range(45))
    assert earlier in _codes(at)
    assert shown_text(_earlier(at)) == [earlier]


def test_it_stays_open_when_the_log_grows():
    at = AppTest.from_function(_script, default_timeout=30).run()
    at.session_state["t-probes-earlier"] = True
    at.run()
    at.session_state["n-lines"] = 70  # new lines arrived: the label's count changes
    at.run()
    assert not at.exception
    assert _earlier(at).label == "Earlier lines (55)"
    assert shown_text(_earlier(at)) == ["\n".join(f"line {i}" for i in range(55))]
    at.session_state["t-probes-earlier"] = False  # closed again: it stays closed as the log grows
    at.run()
    at.session_state["n-lines"] = 80
    at.run()
    assert not at.exception
    assert _earlier(at).label == "Earlier lines (65)"
    assert not _earlier(at).children
    assert len(_codes(at)) == 1


def test_a_caller_given_key_keeps_two_blocks_apart():
    def two() -> None:
        from ui.components import log_block

        log_block([f"a {i}" for i in range(30)], newest_age_s=None, toggle_key="a-probes", earlier_key="a-old")
        log_block([f"b {i}" for i in range(30)], newest_age_s=None, toggle_key="b-probes")

    at = AppTest.from_function(two, default_timeout=30).run()
    assert not at.exception
    at.session_state["a-old"] = True
    at.run()
    assert not at.exception
    a_box, b_box = [e for e in at.expander if e.label.startswith("Earlier lines")]
    assert shown_text(a_box) == ["\n".join(f"a {i}" for i in range(15))]
    assert not b_box.children
