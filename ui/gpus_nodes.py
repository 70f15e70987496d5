"""The GPUs page's other nodes, read through Prometheus: one bordered group per node with its
health and age, its GPUs as tiles, who holds them, and the SGLang servers Prometheus scrapes there.

Pure helpers (:func:`node_summary`, :func:`holder_rows`, :func:`server_rows`) build what is drawn,
so tests can check the data without a browser; :func:`draw_node` draws one node."""

from __future__ import annotations

from typing import Callable

import pandas as pd
import streamlit as st

from ui import fmt

NA = fmt.NA
HEALTH = {
    "up": (":material/check_circle:", "up", "green"),
    "stale": (":material/schedule:", "stale", "orange"),
    "down": (":material/error:", "down", "red"),
    "gone": (":material/cancel:", "gone", "gray"),
    "unknown": (":material/help:", "age unknown", "violet"),
}
SOURCE_NAMES = {"dcgm": "DCGM exporter", "nvitop": "nvitop-exporter", "specdeck": "Specdeck exporter"}


def health_badge(node) -> str:
    icon, word, colour = HEALTH.get(node.health, HEALTH["unknown"])
    return f":{colour}[{icon} {word}]"


def node_summary(node) -> dict:
    """The node's key figures: GPUs, mean utilisation, memory, power (``None`` where no GPU says)."""
    utils = [g.util_gpu for g in node.gpus if g.util_gpu is not None]
    used = [g.mem_used for g in node.gpus if g.mem_used is not None]
    total = [g.mem_total for g in node.gpus if g.mem_used is not None and g.mem_total]
    power = [g.power_w for g in node.gpus if g.power_w is not None]
    return {
        "gpus": len(node.gpus),
        "util": sum(utils) / len(utils) if utils else None,
        "mem_used": sum(used) if used else None,
        "mem_total": sum(total) if total else None,
        "power_w": sum(power) if power else None,
    }


def node_title(node) -> str:
    srcs = ", ".join(SOURCE_NAMES.get(s, s) for s in node.sources) or "no GPU exporter"
    if node.age_s is None:
        scraped = "never scraped well" if node.health == "down" else f"scraped {NA}"
    else:
        scraped = f"{'last good scrape' if node.health == 'down' else 'scraped'} {fmt.age(node.age_s)}"
    return f"**Node {node.node}** · {len(node.gpus)} GPU{'s' if len(node.gpus) != 1 else ''} · {srcs} · " \
           f"{health_badge(node)} · {scraped}"


def holder_rows(nodes) -> list[dict]:
    rows = []
    for n in nodes:
        for h in sorted(n.holders, key=lambda h: (h.gpu_index, h.pid or 0)):
            job = h.job or h.workload or "— not managed —"
            rows.append({
                "node": n.node,
                "GPU": h.gpu_index,
                "pid": NA if h.pid is None else str(h.pid),
                "job": f"{job} ({h.kind})" if h.job and h.kind else job,
                "user": h.user or NA,
                "GPU memory": fmt.gib(h.used_memory),
                "found by": {"pid": "pid", "exporter": "exporter", "placement": "placement"}.get(h.how, h.how),
            })
    return rows


def server_rows(nodes) -> list[dict]:
    rows = []
    for n in nodes:
        for s in n.servers:
            rows.append({
                "node": n.node,
                "server": s.name,
                "model": s.model_name or NA,
                "tok/s": fmt.tok_s(s.gen_throughput),
                "accept_len": fmt.accept_len(s.spec_accept_length),
                "running": NA if s.num_running_reqs is None else f"{s.num_running_reqs:,.0f}",
                "queued": NA if s.num_queue_reqs is None else f"{s.num_queue_reqs:,.0f}",
                "KV use": fmt.pct(None if s.token_usage is None else s.token_usage * 100),
                "scraped": NA if s.age_s is None else fmt.age(s.age_s),
                "target": s.health,
            })
    return rows


def draw_node(node, tile: Callable, per_row: int) -> None:
    """One node's group: title with health and age, its problem, figures, GPU tiles."""
    with st.container(border=True):
        st.markdown(node_title(node), help=("Targets: " + ", ".join(node.targets)) if node.targets else
                    "No scrape target of Prometheus is known for this node")
        if node.problem:
            (st.error if node.health in ("down", "gone") else st.warning)(node.problem, icon=":material/warning:")
        s = node_summary(node)
        parts = [f"utilisation **{fmt.pct(s['util']) if s['util'] is not None else NA}**",
                 f"memory **{fmt.gib(s['mem_used']) if s['mem_used'] is not None else NA}**"
                 + (f" of {fmt.gib(s['mem_total'])}" if s["mem_total"] else ""),
                 "power **" + (NA if s["power_w"] is None else f"{s['power_w']:,.0f} W") + "**"]
        st.markdown(" · ".join(parts))
        if not node.gpus:
            st.caption("No GPU readings from this node (only its servers' metrics)." if node.servers
                       else "No GPU readings from this node.")
        gpus = list(node.gpus)
        for start in range(0, len(gpus), per_row):
            cols = st.columns(per_row)
            for col, g in zip(cols, gpus[start:start + per_row]):
                with col:
                    tile(g, node.who(g.index))


def target_rows(view) -> list[dict]:
    """The file_sd groups of Specdeck's targets file and Ray's, one row per target."""
    return [{"from": "Specdeck" if g.origin == "specdeck" else "Ray", "target": t,
             "labels": ", ".join(f"{k}={v}" for k, v in g.labels)}
            for g in view.groups for t in g.targets]
