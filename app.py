"""Specdeck: the control room for a speculative-decoding pipeline.

Run with ``scripts/dashboard`` (or ``streamlit run app.py``).  The frame sets
up navigation and the sidebar; each page lives in ``pages/``.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from ui import fmt
from ui.auth import frame_gate, gate, live_fragment
from ui.components import store_banner
from ui.context import WANTED_PAGE, mark_frame, runtime

HERE = Path(__file__).resolve().parent

# The icon is served by the dashboard itself: a Material or emoji icon would be fetched by every
# viewer's browser from a font host on the internet (and fail offline).
st.set_page_config(page_title="Specdeck", page_icon=str(HERE / "ui" / "static" / "specdeck.png"), layout="wide")


def _pages() -> list:
    pages = []
    for file, title, icon in (
        ("pages/servers.py", "Servers", ":material/dns:"),
        ("pages/regeneration.py", "Regeneration", ":material/autorenew:"),
        ("pages/training.py", "Training", ":material/model_training:"),
        ("pages/benchmarks.py", "Benchmarks", ":material/speed:"),
        ("pages/processes.py", "Processes", ":material/terminal:"),
        ("pages/gpus.py", "GPUs", ":material/memory:"),
    ):
        if (HERE / file).exists():
            pages.append(st.Page(file, title=title, icon=icon))
    return pages


rt = runtime(gate=False)
# a session that may not view gets the sign-in page and nothing else: the run ends there
access = gate(rt, [page.url_path for page in _pages()])
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


with st.sidebar:
    st.markdown(f"### Specdeck\n**Workspace:** {rt.workspace.name}")
    if access.can_see_data:
        st.caption(str(rt.workspace.root))
    if rt.workspace.is_demo:
        st.info("Demo workspace: simulated GPUs and processes. Choose your own with "
                "`--workspace DIR`.", icon=":material/info:")
    _sidebar_status()

mark_frame()
store_banner(rt, show_paths=access.can_see_data)  # above every page while the state store is damaged or cannot be written
pages = _pages()
pages += frame_gate(rt, pages)  # the login gate: banner, account box, sign-in page
nav = st.navigation(pages)
wanted = st.session_state.pop(WANTED_PAGE, None)
if wanted is not None:  # a page's URL was opened before the frame had run: open it now
    for page in pages:
        if page.url_path == Path(wanted).stem:
            st.switch_page(page)
nav.run()
