"""Small Streamlit widgets shared by the pages."""

from __future__ import annotations

import time

import streamlit as st

from ui import fmt


def page_header(title: str, purpose: str) -> None:
    st.title(title)
    st.caption(purpose)


def freshness(updated_at: float | None, interval_s: float, what: str = "updated") -> None:
    """'updated N s ago'; amber with a warning once older than three intervals."""
    if updated_at is None:
        st.caption(f":orange[{what}: no data yet]")
        return
    age = max(0.0, time.time() - updated_at)
    text = f"{what} {fmt.age(age)}"
    if age > 3 * interval_s:
        st.caption(f":orange[⚠ {text} — stale (expected every {interval_s:.0f} s)]")
    else:
        st.caption(text)


def state_badge(state: str | None, exit_code: int | None = None) -> None:
    st.markdown(fmt.state_badge(state, exit_code).markdown())


def confirm_box(key: str, question: str, *, confirm_label: str = "Confirm",
                danger: bool = True) -> bool | None:
    """Inline confirmation shown after a control button was pressed.

    Returns True when confirmed, False when cancelled, None while waiting.
    The caller arms it with ``st.session_state[key] = True``.
    """
    if not st.session_state.get(key):
        return None
    box = st.empty()
    with box.container(border=True):
        st.warning(question, icon=":material/warning:" if danger else ":material/info:")
        c1, c2, _ = st.columns([1, 1, 4])
        answer = None
        if c1.button(confirm_label, key=f"{key}-yes", type="primary"):
            answer = True
        elif c2.button("Cancel", key=f"{key}-no"):
            answer = False
    if answer is not None:  # answered: the question goes away at once
        st.session_state[key] = False
        box.empty()
    return answer
