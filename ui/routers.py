"""The Servers page's routers: each ``[[router]]`` with its state, policy and address, and its workers
side by side: the server behind each, its state, whether the router has it and finds it healthy, the
router's load on it, and the server's own accept_len and tok/s (its latest decode line, as the page
reads them for one server)."""

from __future__ import annotations

import time
from typing import Any

import pandas as pd
import streamlit as st

from ui import fmt

MEMBERSHIP = {"healthy": "● healthy", "unhealthy": "✕ unhealthy", "pending": "◐ joining",
              "draining": "◑ draining", "out": "○ not joined"}


def _latest(series: list) -> Any:
    for v in reversed(series):
        if v is not None:
            return v
    return None


def membership(w) -> str:
    if w.draining:
        return MEMBERSHIP["draining"]
    if w.listed:
        return MEMBERSHIP["healthy" if w.healthy else "unhealthy"]
    return MEMBERSHIP["pending" if w.pending else "out"]


def worker_rows(view, fleet) -> list[dict[str, Any]]:
    """One row per worker of router ``view`` (a backend.flows.router_sync.RouterView)."""
    rows = []
    for w in view.workers:
        acc = tok = None
        if w.server is not None:
            try:
                snap = fleet.snapshot(w.server)
            except Exception:  # a server removed by an edit meanwhile: no figures
                snap = None
            if snap is not None and snap.run_live:
                dec = snap.run_decode if snap.run_decode is not None else snap.decode
                acc, tok = _latest(dec["accept_len"]), _latest(dec["gen_throughput"])
        rows.append({"server": w.server or "(not a server of the workspace)", "state": w.server_state or fmt.NA,
                     "in router": membership(w), "router load": w.load,
                     "accept_len": None if acc is None else round(float(acc), 2),
                     "tok/s": None if tok is None else round(float(tok), 1), "url": w.url})
    return rows


def router_headline(view) -> str:
    listed = sum(1 for w in view.workers if w.listed)
    colour = "green" if view.state == "RUNNING" else "gray"
    return (f"**{view.name}** · :{colour}[{view.state}] · {view.policy} · {view.url} · "
            f"{view.healthy_workers}/{listed} workers healthy")


def router_block(view, fleet) -> None:
    with st.container(border=True, key=f"srv-router-{view.name}"):
        st.markdown(fmt.data_markdown(router_headline(view)))
        rows = worker_rows(view, fleet)
        if rows:
            st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch",
                         column_config={
                             "router load": st.column_config.NumberColumn(
                                 help="requests the router has in flight to this server"),
                             "accept_len": st.column_config.NumberColumn(
                                 format="%.2f", help="the server's latest decode line (its current run)"),
                             "tok/s": st.column_config.NumberColumn(
                                 format="%.1f", help="gen throughput of the server's latest decode line"),
                         })
        if view.error:
            st.warning(fmt.data_markdown(view.error), icon=":material/warning:")
        if view.state != "RUNNING":
            st.caption("The router is not running: servers join it through its /workers API once it is "
                       "RUNNING and they are.")
        elif view.checked_at is not None:
            st.caption(f"workers as the router listed them {fmt.age(time.time() - view.checked_at)}; servers join "
                       "when RUNNING and leave when they stop, a relaunch drains one first")


def routers_section(rt) -> None:
    """Every router of the workspace (nothing when there is none)."""
    sync = getattr(rt, "router_sync", None)
    if sync is None or not rt.fleet.router_names():
        return
    st.subheader("Routers")
    for view in sync.views():
        router_block(view, rt.fleet)
