"""The Benchmarks page's Per dataset tab: for one server, accept_len and tok/s of each configuration and load
on each dataset its results record, side by side (backend.bench.per_dataset)."""

from __future__ import annotations

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from backend.bench import per_dataset
from ui import charts, fmt
from ui.bench import data

SERVER_KEY = "bench-ds-server"


def frame(t: per_dataset.Table) -> pd.DataFrame:
    """One row per configuration and load; per dataset an accept_len and a tok/s column (NaN: not measured)."""
    rows = []
    for row in t.rows:
        out = {"configuration": row.configuration, "load": row.load}
        for ds in t.datasets:
            cell = row.cells.get(ds)
            out[f"{ds} · accept_len"] = None if cell is None or row.baseline else cell.accept_len
            out[f"{ds} · tok/s"] = None if cell is None else cell.tok_s
        rows.append(out)
    cols = ["configuration", "load"] + [f"{ds} · {what}" for ds in t.datasets for what in ("accept_len", "tok/s")]
    df = pd.DataFrame(rows, columns=cols)
    for c in cols[2:]:
        df[c] = df[c].astype("float64")
    return df


def _chart(t: per_dataset.Table) -> go.Figure | None:
    spec = [row for row in t.rows if not row.baseline and any(c.accept_len is not None for c in row.cells.values())]
    if not spec:
        return None
    fig = charts.white_figure(barmode="group", height=320, margin=dict(l=10, r=10, t=40, b=10),
                              title=dict(text=f"accept_len per dataset · {t.server}", font=dict(size=14)),
                              yaxis_title="accept_len (tokens per step)", xaxis_title="dataset")
    for row in spec:
        name = f"{row.configuration} · {row.load}"
        ys = [row.cells[ds].accept_len if ds in row.cells else None for ds in t.datasets]
        fig.add_trace(go.Bar(x=list(t.datasets), y=ys, name=name, marker_color=charts.colour_for(name),
                             hovertemplate="%{x}: accept_len %{y:.2f}<extra>" + name.replace("<", "&lt;") + "</extra>"))
    fig.add_hline(y=1.0, line_dash="dot", line_color="#dc2626", annotation_text="1.0 = no draft token accepted",
                  annotation_position="bottom left")
    charts.legend_below(fig)
    return fig


def panel(results, query=None) -> None:
    servers = per_dataset.servers_with_datasets(results, data.server_of)
    if not servers:
        st.info("No result records the dataset its prompts came from. bench_serving's `--dataset-name`, a "
                "Specdeck benchmark's dataset or a CSV's dataset column give it; then each server's accept_len "
                "and tok/s show here per dataset, side by side.", icon=":material/info:")
        return
    if query is not None:
        query.take("server", SERVER_KEY, servers, what="server with per-dataset results")
    if st.session_state.get(SERVER_KEY) not in servers:
        st.session_state[SERVER_KEY] = servers[0]
    server = st.selectbox("Server", servers, key=SERVER_KEY, persist_state="session",
                          help="the servers whose results record a dataset, most datasets first")
    if query is not None:
        query.put("server", server, default=servers[0])
    t = per_dataset.table(results, server, server_of=data.server_of, config_of=data.config_label,
                          load_of=data.load_short, when=data.when)
    df = frame(t)
    cc = st.column_config
    config = {"configuration": cc.TextColumn(pinned=True, width="medium"), "load": cc.TextColumn(width="small")}
    for ds in t.datasets:
        config[f"{ds} · accept_len"] = cc.NumberColumn(format="%.2f", help=f"accept_len on {ds}: the newest result "
                                                                          "of this configuration and load")
        config[f"{ds} · tok/s"] = cc.NumberColumn(format="%.1f", help=f"output tok/s on {ds}")
    st.dataframe(df, hide_index=True, width="stretch", column_config=config, placeholder=fmt.NA,
                 key="bench-ds-table")
    st.caption(f"{fmt.count(len(t.rows))} configuration(s) and load(s) on {fmt.count(len(t.datasets))} dataset(s); "
               "each cell is the newest result of that configuration, load and dataset. N/A: not measured on that "
               "dataset (or a baseline's accept_len, which has no draft). Compare across a row: the same draft "
               "and load on different data.")
    fig = _chart(t)
    if fig is not None:
        st.plotly_chart(fig, width="stretch", key="bench-ds-chart")
    st.download_button("Download this table (CSV)", df.to_csv(index=False), f"per-dataset-{server}.csv",
                       mime="text/csv", key="bench-ds-csv")
