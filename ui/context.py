"""How a page gets the backend: the runtime of the selected workspace."""

from __future__ import annotations

import streamlit as st

from backend.runtime import Runtime, current_actor, get_runtime
from backend.workspace import ConfigError


def runtime() -> Runtime:
    """The runtime, or a clear error on the page (and st.stop) if the config is bad."""
    try:
        return get_runtime()
    except ConfigError as exc:
        st.error("**The workspace config has problems**, so nothing was started:")
        st.code(str(exc), language=None)
        st.caption("Fix the file and reload the page. Each line names the file, line and key.")
        st.stop()
        raise  # unreachable; keeps type checkers happy


def actor() -> str:
    user = getattr(st, "user", None)
    name = None
    try:
        name = user.get("email") if user is not None and user.get("is_logged_in") else None
    except Exception:
        name = None
    return name or current_actor()
