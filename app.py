"""Specdeck: the control room for a speculative-decoding pipeline.

Run with ``scripts/dashboard`` (or ``streamlit run app.py``).  The frame sets
up navigation and the sidebar; each page lives in ``pages/``.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from ui import fmt
from ui.auth import frame_gate
from ui.context import WANTED_PAGE, mark_frame, runtime

st.set_page_config(page_title="Specdeck", page_icon=":material/rocket_launch:", layout="wide")

HERE = Path(__file__).resolve().parent


def _pages() -> list:
    pages = []
    for file, title, icon in (
        ("pages/servers.py", "Servers", ":material/dns:"),
        ("pages/regeneration.py", "Regeneration", ":material/autorenew:"),
        ("pages/processes.py", "Processes", ":material/terminal:"),
        ("pages/gpus.py", "GPUs", ":material/memory:"),
    ):
        if (HERE / file).exists():
            pages.append(st.Page(file, title=title, icon=icon))
    return pages


rt = runtime(show_config_error=True)


@st.fragment(run_every=5)
def _sidebar_status() -> None:
    views = rt.supervisor.views()
    counts: dict[str, int] = {}
    for v in views:
        label = fmt.state_badge(v.state.value, v.exit_code).label
        counts[label] = counts.get(label, 0) + 1
    st.markdown("**Processes**")
    if not views:
        st.caption("none configured")
    for v in views:
        if v.kind.value == "server":
            badge = fmt.state_badge(v.state.value, v.exit_code)
            st.markdown(f"{badge.markdown()} {v.name}")
    summary = " · ".join(f"{n} {label.lower()}" for label, n in sorted(counts.items()))
    if summary:
        st.caption(summary)
    alerts = getattr(rt, "active_alerts", None)
    for alert in (alerts() if callable(alerts) else []):
        level = getattr(alert, "severity", "warning")
        text = getattr(alert, "title", str(alert))
        (st.error if level == "error" else st.warning if level == "warning" else st.info)(text)


with st.sidebar:
    st.markdown(f"### Specdeck\n**Workspace:** {rt.workspace.name}")
    st.caption(str(rt.workspace.root))
    if rt.workspace.is_demo:
        st.info("Demo workspace: simulated GPUs and processes. Choose your own with "
                "`--workspace DIR`.", icon=":material/info:")
    _sidebar_status()

mark_frame()
pages = _pages()
pages += frame_gate(rt, pages)  # the login gate: banner, account box, sign-in page
nav = st.navigation(pages)
wanted = st.session_state.pop(WANTED_PAGE, None)
if wanted is not None:  # a page's URL was opened before the frame had run: open it now
    for page in pages:
        if page.url_path == Path(wanted).stem:
            st.switch_page(page)
nav.run()
