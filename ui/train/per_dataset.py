"""The Checkpoints section's accept_len per dataset: for a run's checkpoints, the benchmarks whose draft was
one of them, on held-out prompts of each dataset the results record, side by side (the grouping of
:mod:`backend.bench.per_dataset`, one row per checkpoint and load).  Where a checkpoint accepts less on one
kind of data than on the others is what the next draft's training data needs more of."""

from __future__ import annotations

from typing import Iterable

import streamlit as st

from backend.bench import per_dataset
from ui import fmt
from ui.bench.data import load_short, when
from ui.bench.datasets import frame
from ui.train.data import norm_path

NAME = "checkpoints"


def checkpoint_table(results: Iterable, checkpoints: Iterable) -> tuple[per_dataset.Table, dict[str, int]] | None:
    """The table (its rows' configuration is the checkpoint's name) and each checkpoint's place in the run, or
    None where no valid benchmark of these checkpoints records its dataset."""
    cks = list(checkpoints)
    by_path = {norm_path(c.path): c.name for c in cks}
    mine = [r for r in results if r.config.draft_model and norm_path(r.config.draft_model) in by_path]
    if not any(not r.invalid and (r.load.dataset or "").strip() for r in mine):
        return None
    t = per_dataset.table(mine, NAME, server_of=lambda r: NAME,
                          config_of=lambda r: by_path[norm_path(r.config.draft_model)], load_of=load_short, when=when)
    return t, {c.name: i for i, c in enumerate(cks)}


def panel(results: Iterable, checkpoints: Iterable, *, key: str) -> None:
    found = checkpoint_table(results, checkpoints)
    st.markdown("**accept_len per dataset**")
    if found is None:
        st.caption("N/A: no benchmark of these checkpoints records the dataset its prompts came from. A benchmark "
                   "on held-out prompts of each dataset of the mix (a Specdeck benchmark's dataset, or "
                   "bench_serving's `--dataset-name`) against a server whose draft is a checkpoint shows here.")
        return
    t, order = found
    df = frame(t).rename(columns={"configuration": "checkpoint"})
    df = df.iloc[sorted(range(len(df)), key=lambda i: (-order.get(df["checkpoint"].iloc[i], -1), df["load"].iloc[i]))]
    cc = st.column_config
    config = {"checkpoint": cc.TextColumn(pinned=True), "load": cc.TextColumn(width="small")}
    for ds in t.datasets:
        config[f"{ds} · accept_len"] = cc.NumberColumn(format="%.2f", help=f"accept_len on {ds}'s prompts: the newest "
                                                                          "benchmark of this checkpoint at this load")
        config[f"{ds} · tok/s"] = cc.NumberColumn(format="%.1f", help=f"output tok/s on {ds}'s prompts")
    st.dataframe(df, hide_index=True, width="stretch", column_config=config, placeholder=fmt.NA,
                 key=f"{key}-per-dataset")
    low = _lowest(t, order)
    st.caption(f"{fmt.count(len(t.rows))} checkpoint(s) and load(s) on {fmt.count(len(t.datasets))} dataset(s), newest "
               "first; N/A: not measured on that dataset." + (f" Lowest on the newest checkpoint measured: **{low}**, "
                                                            "the data the next draft needs more of." if low else ""))
    st.download_button("Download CSV", df.to_csv(index=False).encode(), file_name=f"{key}-accept-per-dataset.csv",
                       mime="text/csv", key=f"{key}-per-dataset-csv", icon=":material/download:")


def _lowest(t: per_dataset.Table, order: dict[str, int]) -> str | None:
    """The dataset with the lowest accept_len on the newest checkpoint measured on two datasets or more."""
    rows = [r for r in t.rows if not r.baseline and sum(c.accept_len is not None for c in r.cells.values()) >= 2]
    if not rows:
        return None
    row = max(rows, key=lambda r: order.get(r.configuration, -1))
    got = {ds: c.accept_len for ds, c in row.cells.items() if c.accept_len is not None}
    ds = min(got, key=lambda d: got[d])
    return f"{ds} ({got[ds]:.2f}, {row.configuration})"
