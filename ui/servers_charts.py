"""The Servers page's live charts: accept_len, per-request and aggregate tok/s, requests, over every run in
a server's log history."""

from __future__ import annotations

import streamlit as st

from backend.bench import baseline
from ui import charts
from ui.linechart import line_chart


def live_charts(snap, choice: baseline.BaselineChoice) -> None:
    """Every run in the series; each restart breaks the lines and is marked.  Each chart goes to the page as
    soon as it is built: the first is on screen while the others are built."""
    dec = snap.decode
    ts, starts = dec["ts"], snap.run_starts
    top_left, top_right = st.columns(2)
    low_left, low_right = st.columns(2)
    fig = charts.figure("accept_len", y_title="tokens per step", height=260)
    charts.add_series(fig, "accept_len", ts, dec["accept_len"], fmt=".2f", breaks=starts)
    fig.add_hline(y=1.0, line_dash="dot", line_color="#dc2626",
                  annotation_text="1.0 = no draft token accepted", annotation_position="bottom left")
    charts.mark_restarts(fig, starts)
    with top_left:
        line_chart(fig, key="srv-acc-chart")
    fig2 = charts.figure("Per-request decode (tok/s)", y_title="tok/s per request", height=260)
    per_req = [None if t is None or not r else t / r for t, r in zip(dec["gen_throughput"], dec["running_req"])]
    charts.add_series(fig2, "per request", ts, per_req, fmt=",.1f", breaks=starts)
    fig3 = charts.figure("Aggregate tok/s (all requests)", y_title="tok/s", height=260)
    charts.add_series(fig3, "aggregate tok/s", ts, dec["gen_throughput"], fmt=",.1f", breaks=starts)
    if choice.stored:  # measured: it meets the aggregate, at the concurrency it was measured at
        if choice.tok_s is not None:
            charts.add_baseline(fig3, choice.tok_s, f"baseline at concurrency {choice.concurrency}")
    else:
        charts.add_baseline(fig2, snap.baseline_tok_s, "configured single-stream baseline")
    charts.mark_restarts(fig2, starts)
    with top_right:
        line_chart(fig2, key="srv-tput-chart")
    charts.mark_restarts(fig3, starts)
    with low_left:
        line_chart(fig3, key="srv-agg-chart")
    fig4 = charts.figure("Requests", y_title="requests", height=260)
    charts.add_series(fig4, "running", ts, dec["running_req"], fmt=".0f", breaks=starts)
    charts.add_series(fig4, "queued", ts, dec["queue_req"], fmt=".0f", breaks=starts)
    charts.legend_below(fig4)
    charts.mark_restarts(fig4, starts)
    with low_right:
        line_chart(fig4, key="srv-req-chart")
    if starts:
        st.caption(f"{len(starts)} restart(s) in this history, marked by dotted lines: each run's line starts afresh.")
    if snap.accept_rate_meaning != "none":
        st.caption(f"accept rate in this log means {snap.accept_rate_description}; compare accept_len "
                   "across versions, not accept rate.")
