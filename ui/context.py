"""How a page gets the backend: the runtime of the selected workspace (:func:`runtime`, which also
gates the page), who asks (:func:`actor`), and the frame every page runs in."""

from __future__ import annotations

from pathlib import Path

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from ui.auth import FRAME_SEEN, PENDING_TOKEN_KEY, actor, runtime

__all__ = ["FRAME_SEEN", "WANTED_PAGE", "actor", "mark_frame", "require_frame", "runtime"]

WANTED_PAGE = "_specdeck_wanted_page"


def mark_frame() -> None:
    """Called by the frame (app.py) on every run, before its page runs."""
    st.session_state[FRAME_SEEN] = True


def require_frame(page_file: str) -> None:
    """Send a page that Streamlit ran without the frame through it.

    The first request to a page's URL on a freshly started server is run by
    Streamlit's older ``pages/`` folder mechanism, without app.py (no sidebar,
    no wide layout).  Such a session goes to app.py, which then opens the page
    that was asked for.  A page run as the main script (a test of one page)
    is left alone.
    """
    if st.session_state.get(FRAME_SEEN):
        return
    ctx = get_script_run_ctx()
    if ctx is None or Path(ctx.main_script_path).name != "app.py":
        return
    st.session_state[WANTED_PAGE] = page_file
    token = st.query_params.get("token")
    if token:  # switching pages drops the query string: keep the loopback token for the frame's gate
        st.session_state[PENDING_TOKEN_KEY] = token
    st.switch_page("app.py")
