"""Specdeck: the control room for a speculative-decoding pipeline.

Run with ``scripts/dashboard`` (or ``streamlit run app.py``).  The frame sets
up navigation and the sidebar; each page lives in ``app_pages/``.  Not ``pages/``: Streamlit runs a page
of a folder by that name without this frame when its URL is the first one a fresh server is asked for,
and the session would then be sent through the frame, two script runs more before its page is drawn.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import streamlit as st

from ui import fmt
from ui.auth import frame_gate, gate, live_fragment
from ui.components import store_banner
from ui.context import freeze_startup, limit_malloc_arenas, runtime, serve_static_files_whole

limit_malloc_arenas()  # once per process, before the runtime's threads start (ui.context says why)
serve_static_files_whole()  # the browser's code comes whole while a script runs (ui.context says why)

HERE = Path(__file__).resolve().parent

# The icon is served by the dashboard itself: a Material or emoji icon would be fetched by every
# viewer's browser from a font host on the internet (and fail offline).
st.set_page_config(page_title="Specdeck", page_icon=str(HERE / "ui" / "static" / "specdeck.png"), layout="wide")


# (file, title, icon, URL path): every page has its own path, /servers included
PAGES = (
    ("app_pages/servers.py", "Servers", ":material/dns:", "servers"),
    ("app_pages/regeneration.py", "Regeneration", ":material/autorenew:", "regeneration"),
    ("app_pages/training.py", "Training", ":material/model_training:", "training"),
    ("app_pages/benchmarks.py", "Benchmarks", ":material/speed:", "benchmarks"),
    ("app_pages/processes.py", "Processes", ":material/terminal:", "processes"),
    ("app_pages/gpus.py", "GPUs", ":material/memory:", "gpus"),
)


def _pages() -> list:
    return [st.Page(file, title=title, icon=icon, url_path=path)
            for file, title, icon, path in PAGES if (HERE / file).exists()]


def _overview():
    """The Overview at /: the three answers users come for, each tile linking to its page.  Streamlit answers
    the default page only at /, so it is kept out of :data:`PAGES` (every page there has its own path)."""
    return st.Page("app_pages/overview.py", title="Overview", icon=":material/dashboard:", url_path="overview",
                   default=True)


def _early_frame() -> tuple:
    """The frame before the workspace is open (the first run of a fresh dashboard opens it for several
    seconds): the page names in the sidebar and a line saying what is happening, in place of a blank
    page."""
    pages = _pages()
    hidden = [st.Page("app_pages/login.py", title="Sign in", url_path="login", visibility="hidden")]
    overview = _overview()
    st.navigation([overview, *pages, *hidden])  # the names at once; the navigation below replaces it
    head = st.sidebar.empty()
    head.markdown("### Specdeck")
    opening = st.empty()
    opening.caption("Opening the workspace…")
    return head, opening


_head, _opening = _early_frame()
rt = runtime(gate=False)
_opening.empty()
_head.empty()  # a session that is not signed in sees nothing of the frame
# a session that may not view gets the sign-in page and nothing else: the run ends there
access = gate(rt, ["overview", *(page.url_path for page in _pages())])
rt = runtime(show_config_error=True)


@live_fragment(run_every=5)
def _sidebar_status() -> None:
    views = rt.supervisor.views()
    servers = [v for v in views if v.kind.value == "server"]
    st.markdown(f"**Servers** ({len(servers)})")
    if not servers:
        st.caption("none configured")
    for v in servers:
        st.markdown(f"{fmt.view_badge(v).markdown()} {v.name}")
    counts: dict[str, int] = {}
    for v in views:
        label = fmt.view_badge(v).label.lower()
        counts[label] = counts.get(label, 0) + 1
    st.markdown(f"**Managed processes** ({len(views)}, servers included)")
    if counts:
        st.caption(" · ".join(f"{n} {label}" for label, n in sorted(counts.items())))
    else:
        st.caption("none configured")
    alerts = getattr(rt, "active_alerts", None)
    for alert in (alerts() if callable(alerts) else []):
        level = getattr(alert, "severity", "warning")
        text = getattr(alert, "title", str(alert))
        (st.error if level == "error" else st.warning if level == "warning" else st.info)(text)


_head.markdown(f"### Specdeck\n**Workspace:** {rt.workspace.name}")
with st.sidebar:
    if access.can_see_data:
        st.caption(str(rt.workspace.root))
    if rt.workspace.is_demo:
        st.info("Demo workspace: simulated GPUs and processes. Choose your own with "
                "`--workspace DIR`.", icon=":material/info:")
    _sidebar_status()

store_banner(rt, show_paths=access.can_see_data)  # above every page while the state store is damaged or cannot be written
pages = [_overview(), *_pages()]
pages += frame_gate(rt, pages)  # the login gate: banner, account box, sign-in page
nav = st.navigation(pages)
try:
    nav.run()
except sqlite3.DatabaseError as exc:  # a page that met a damaged or unwritable store says so, never a traceback
    st.error(f"This page could not read the state store: {exc}" if access.can_see_data else
             "This page could not read the state store; an operator can see why above.", icon=":material/error:")
freeze_startup()  # once per process: the collection after each run no longer walks start-up's objects
