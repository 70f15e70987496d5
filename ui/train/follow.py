"""Live parts that read a followed run's files check, at each redraw, that this session may still read
typed paths."""

from __future__ import annotations

import streamlit as st

from ui.auth import control_lock
from ui.train.data import RunRef


def recheck_followed(rt, refs: list[RunRef] | None = None) -> None:
    """In a live part that reads a followed run's files: once this session may no longer read typed
    paths (signed out, another role), the whole page runs again, and drops the run (one refusal audited)."""
    if (refs is None or any(r.source == "followed" for r in refs)) and control_lock(rt):
        st.rerun(scope="app")
