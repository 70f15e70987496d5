"""How a page gets the backend: the runtime of the selected workspace."""

from __future__ import annotations

import logging
from pathlib import Path

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from backend.auth import Caller
from backend.runtime import Runtime, get_runtime
from backend.workspace import ConfigError

log = logging.getLogger("specdeck")

FRAME_SEEN = "_specdeck_frame"
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
        from ui.auth import PENDING_TOKEN_KEY

        st.session_state[PENDING_TOKEN_KEY] = token
    st.switch_page("app.py")


def _may_see_startup_error() -> bool:
    """Whether a backend that could not start may say why to this session: the text names files of
    the workspace, so only to a browser on this host that carries the dashboard's token (nobody
    can sign in without a backend)."""
    import hmac
    import os

    from ui.auth import LOCAL_TOKEN_KEY, caller

    c = caller()
    if c.exposed:
        return False
    want = os.environ.get("SPECDECK_ACCESS_TOKEN") or ""
    if c.peer == "" or not want:
        return c.peer == ""
    got = st.session_state.get(LOCAL_TOKEN_KEY) or st.query_params.get("token") or ""
    return hmac.compare_digest(str(got).encode(), want.encode())


def runtime(*, show_config_error: bool = False, gate: bool = True) -> Runtime:
    """The runtime, or a clear error on the page (and st.stop) when it cannot start.

    The frame (app.py) passes ``show_config_error`` so a broken edit of the
    workspace file is shown once per page, above the page.  With ``gate`` (every
    page), a session that may not view stops here: the frame has drawn the
    sign-in page instead (this holds a page that runs without the frame too).
    """
    try:
        rt = get_runtime()
    except ConfigError as exc:
        log.error("the workspace config has problems:\n%s", exc)
        if not _may_see_startup_error():
            st.error("**The dashboard cannot start**: its workspace config has problems. They are listed "
                     "in the terminal that runs the dashboard.")
            st.stop()
        st.error("**The workspace config has problems**, so nothing was started:")
        st.code(str(exc), language=None)
        st.caption("Fix the file and reload the page. Each line names the file, line and key.")
        st.stop()
        raise  # unreachable; keeps type checkers happy
    except Exception as exc:  # a locked or damaged state file, a full disk, ...
        log.exception("the dashboard's backend could not start")
        if not _may_see_startup_error():
            st.error("**The dashboard's backend could not start.** The reason is in the terminal that runs it.")
            st.stop()
        st.error(f"**The dashboard's backend could not start**: {type(exc).__name__}: {exc}")
        st.caption("Likely causes: the state file is locked by another program or damaged, or the disk "
                   "is full. The full traceback is in the terminal that runs the dashboard.")
        st.stop()
        raise
    if gate or show_config_error:
        from ui.auth import access

        acc = access(rt)
        if gate and not acc.can_view:
            ctx = get_script_run_ctx()
            if ctx is not None and Path(ctx.main_script_path).name == "app.py":
                # a page run without the frame (Streamlit's pages/ folder): the frame draws the sign-in page
                from ui.auth import NOTICE_KEY, TOKEN_KEY

                if acc.notice:  # the frame's own check would only find the session gone
                    st.session_state.pop(TOKEN_KEY, None)
                    st.session_state[NOTICE_KEY] = acc.notice
                st.session_state.pop(FRAME_SEEN, None)
                st.switch_page("app.py")
            st.stop()
        show_config_error = show_config_error and acc.can_see_data
    if show_config_error and rt.config_error is not None:
        st.warning("**The workspace file was edited and has problems**; the dashboard keeps using the "
                   "last good config until they are fixed:", icon=":material/warning:")
        st.code(str(rt.config_error), language=None)
    return rt


def actor() -> Caller:
    """Who asks, for the runtime's control methods: they decide whether this session may act
    and whom the audit names (the signed-in user, or ``local`` on loopback)."""
    from ui.auth import caller

    return caller()
