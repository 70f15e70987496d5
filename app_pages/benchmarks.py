"""Benchmarks: every stored result, compared with the baseline at the same load; the break-even model;
running a benchmark of a managed server."""

from __future__ import annotations

import time
from dataclasses import replace

import streamlit as st

from ui import fmt
from ui.bench import run as bench_run
from ui.bench import imports as bench_import
from ui.bench import charts as bench_charts
from ui.bench import breakeven as bench_breakeven
from ui.bench import data as data
from ui.bench import cost as bench_cost
from ui.bench import stored as bench_stored
from ui.bench import datasets as bench_datasets
from ui.bench.sweep import sweep_panel
from ui.auth import live_fragment
from ui.components import page_header
from ui.overview_query import QueryState
from ui.context import runtime

LEVEL_COLOUR = {"good": "green", "warn": "orange", "bad": "red", "none": "gray"}
TAB_KEY = "bench-tab"

rt = runtime()

page_header("Benchmarks", "Does speculation pay on this server? Every benchmark run here or imported, each compared "
            "with the run without speculation at the same load, and the model that says why.")

shown_print = bench_stored.fingerprint(rt.store)  # what this run shows (see the end of the page)
stored = bench_stored.results(rt.store)
st.session_state[bench_run.SEEN] = [r.id for r in stored]
bench_run.space_alert(rt)
# A result measured across two server runs stays in the table, marked, and out of every comparison.
invalid = [r for r in stored if r.invalid]
results = [r for r in stored if not r.invalid]
if invalid:
    st.warning(fmt.data_markdown(
        f"**{len(invalid)} result(s) invalid**, left out of the figures, charts and break-even: "
        + "; ".join(f"#{r.id}: {r.invalid}" for r in invalid[-3:])
        + (f" (and {len(invalid) - 3} more)" if len(invalid) > 3 else "")), icon=":material/report:")

# -- key figures -----------------------------------------------------------------------------
# The workspace's servers and their configured single-stream baselines: the same answer as the Servers page's.
configured = {name: (rt.fleet.config(name).model_path, rt.fleet.config(name).served_model_name,
                     rt.fleet.config(name).baseline_tok_s) for name in rt.fleet.names()}
all_pairs = bench_charts.speedups(results, configured)
verdicts = bench_charts.verdicts(all_pairs)
pairs = [p for p in all_pairs if p.ratio is not None]
best = max(pairs, key=lambda p: p.ratio, default=None)
best_verdict = verdicts[best.run.id] if best else None
s = data.summary(results)
k = st.columns(4)
k[0].metric("results", fmt.count(s.runs), help="benchmark results stored in this workspace, run here or imported")
k[1].metric("servers", fmt.count(s.servers), help=", ".join(f"{n}: {c}" for n, c in sorted(s.by_server.items())))
k[2].metric("best speedup at the same load", f"{best.ratio:.2f}×" if best else fmt.NA,
            delta=f"{data.verdict_text(best_verdict)} · #{best.run.id} {data.server_of(best.run)}, concurrency "
                  f"{fmt.count(best.run.load.concurrency)}" if best else None,
            delta_color=LEVEL_COLOUR[best_verdict.level] if best else "off",
            delta_arrow=("up" if best.ratio >= 1 else "down") if best else "off",
            help="a speculative run's tok/s over the baseline's of the same server at the same concurrency and "
                 f"lengths ({best.baseline_text if best else ''}); {data.VERDICT_HELP}"
                 if best else "no run has a baseline at its load yet")
k[3].metric("newest result", fmt.age(time.time() - s.newest) if s.newest else fmt.NA,
            help="when the newest result ran (or, without a start time, was stored)")


# -- filters (the table and the charts), in the URL's query with the tab: ?dataset=sharegpt&tab=Charts ------------
query = QueryState("benchmarks")
opts = data.filter_options(results)
for label, key in data.FILTERS:
    query.take(key, f"bench-flt-{key}", opts[key], multi=True, what=f"{label.lower()} of these results")
cols = st.columns(len(data.FILTERS))
chosen = {key: col.multiselect(label, opts[key], key=f"bench-flt-{key}", placeholder="all")
          for col, (label, key) in zip(cols, data.FILTERS)}
for _label, key in data.FILTERS:
    query.put(key, chosen[key])
shown = data.apply_filters(results, chosen)


def _column_config() -> dict:
    cc = st.column_config
    out = {}
    for name, (dtype, f) in data.COLUMNS.items():
        h = data.HELP.get(name)
        if dtype.startswith("datetime"):
            out[name] = cc.DatetimeColumn(format=f, help=h)
        elif f is not None:
            out[name] = cc.NumberColumn(format=f, help=h)
        else:
            out[name] = cc.TextColumn(help=h, width=WIDE.get(name))
    out["id"] = cc.NumberColumn(format="%d", pinned=True, width=36)
    # text: a result through a router says why it has no accept_len ("N/A (through router NAME: why)")
    out["accept_len"] = cc.TextColumn(help=data.HELP.get("accept_len"))
    for name, label in LABELS.items():
        out[name]["label"] = label
    for name, width in LEAD_WIDTH.items():  # the answer's columns fit 1024 px beside the sidebar
        out[name]["width"] = width
    return out


LABELS = {"output tok/s": "tok/s"}
LEAD_WIDTH = {"configuration": 150, "load": 105, "output tok/s": 60, "accept_len": 78, "speedup": 66,
              "verdict": 165}


WIDE = {"label": "large", "server": "medium",
        "target": "medium", "draft": "medium", "dataset": "medium", "source": "medium"}


# -- sections ----------------------------------------------------------------------------------
def _marked(r):
    """``r`` for the table: an invalid result's label starts with INVALID and the reason."""
    return replace(r, label=f"INVALID: {r.invalid}" + (f" · {r.label}" if r.label else ""))


def _styled(df):
    """The verdict and the speedup coloured by the verdict's level (the word is in the cell too)."""
    def css(col):
        return [data.LEVEL_CSS[verdicts[i].level] if verdicts.get(i) is not None else "" for i in df["id"]]

    return df.style.apply(css, subset=["verdict", "speedup"])


def _runs() -> None:
    rows = shown + [_marked(r) for r in data.apply_filters(invalid, chosen)]
    df = data.with_accept_text(data.table(rows, verdicts, bench_cost.result_costs(rt, rows)), rows,
                               rt.fleet.router_names())
    every = st.toggle(f"All {len(data.COLUMNS)} columns", key="bench-all-columns", persist_state="session",
                      help="latencies, lengths, the draft's settings, source, dates and the rest")
    st.caption(f"{fmt.count(len(rows))} of {fmt.count(len(stored))} results · newest first · N/A: not recorded. "
               "Verdict and speedup against the baseline of the same server at the same load. "
               "The filters above apply here and to the charts; a baseline has no draft and stays whatever drafts "
               "are chosen, so each draft is seen beside it.")
    st.dataframe(_styled(df), hide_index=True, width="stretch", key="bench-table", placeholder=fmt.NA,
                 column_config=_column_config(), column_order=None if every else data.LEAD)
    st.download_button("Download these results (CSV)", df.to_csv(index=False), "benchmarks.csv", mime="text/csv",
                       key="bench-csv")
    bench_import.delete_panel(rt, rows)


def _charts() -> None:
    if not shown:
        st.caption("No result matches the filters.")
        return
    palette = bench_charts.page_palette(results)  # every configuration its colour, whatever the filters
    bench_charts.tok_s_block(shown, palette, configured)
    bench_charts.speedup_block(shown, configured)
    bench_charts.accept_block(shown, palette)  # full width: their legends name whole configurations
    bench_charts.over_time_block(shown, palette)
    bench_charts.latency_block(shown)


def _per_dataset() -> None:
    bench_datasets.panel(results, query)


def _breakeven() -> None:
    bench_breakeven.panel(results)


def _run() -> None:
    st.markdown("**Benchmark jobs**")
    bench_run.live_progress(rt)
    bench_run.run_form(rt)


def _sweep() -> None:
    sweep_panel(rt)


def _import() -> None:
    bench_import.import_panel(rt)


# One line per section: (tab label, the function that draws it).
SECTIONS = [
    ("Runs", _runs),
    ("Charts", _charts),
    ("Per dataset", _per_dataset),
    ("Break-even", _breakeven),
    ("Run a benchmark", _run),
    ("Sweep", _sweep),
    ("Import", _import),
]

if not stored:
    st.info("No benchmark result yet: run one (Run a benchmark, Sweep), or import files in the Import tab or with "
            "`python -m backend.cli bench import FILE...` (bench_serving's JSONL or console report, "
            "bench_one_batch_server, bench_speculative, SpecForge's output, or a CSV of hand-entered numbers).",
            icon=":material/info:")
labels = [label for label, _ in SECTIONS]
# the tab shown is in the URL too (switching tabs runs the page again to write it)
# the tab a link asks for goes into the tabs' state (a default that changed between runs would make them new ones)
query.take("tab", TAB_KEY, labels, what="tab")
query.show_notes()  # a link's values that were ignored, above the tabs
tabs = st.tabs(labels, key=TAB_KEY, on_change="rerun")
query.put("tab", st.session_state.get(TAB_KEY), default=labels[0])  # before the tabs' content, which may stop the run
# only the open tab is built (choosing a tab runs the page again): a visit to the Runs table does not build,
# send and draw the charts, forms and command previews hidden behind it.  The other tabs' fields keep what was
# typed in them while they are not built (persist_state="session"); a file chosen for import is dropped.
for tab, (label, draw) in zip(tabs, SECTIONS):
    if not tab.open:
        continue
    with tab:
        draw()


# A result stored anywhere shows on whichever tab is open: the table's fingerprint (one aggregate query) is read
# every few seconds and a change draws the page again (every 3 s while a benchmark or sweep job of this
# workspace runs, else every 10 s: a run or import from a terminal or another dashboard); while such a job runs,
# the Run and Sweep tabs' live parts draw the page again for each of its results at once instead.
_job_live = any(j.meta.get("kind") in (bench_run.JOB_KIND, "sweep") and (v := rt.supervisor.view(j.name)) is not None
                and v.live for j in rt.jobs())
_watch_s = bench_stored.watch_every(st.session_state.get(TAB_KEY) or labels[0], _job_live, ("Run a benchmark", "Sweep"))
if _watch_s is not None:
    @live_fragment(run_every=_watch_s)
    def _new_results() -> None:
        if bench_stored.fingerprint(rt.store) != shown_print:
            st.rerun(scope="app")

    _new_results()
