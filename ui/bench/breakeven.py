"""The Benchmarks page's break-even panel: what a speculative round cost, and what accept_len pays for it.

The model is :mod:`backend.bench.breakeven`'s; this module picks the runs (one server, one load),
words the result for the page and draws the "what would accept_len X give" prediction.
"""

from __future__ import annotations

from pathlib import PurePath

import plotly.graph_objects as go
import streamlit as st

from backend.bench import breakeven as be
from backend.bench.demo_history import CSV_NAME as DEMO_CSV, REGENERATED_SAMPLES
from specdeck_types.bench import BenchResult
from ui import charts, fmt
from ui.bench.charts import BASELINE_COLOUR
from ui.bench.data import config_label, load_label, server_of, when


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def _acc(v: float) -> str:
    return f"{v:.2f}"


def _from_demo_history(r: BenchResult) -> bool:
    return bool(r.source_file) and PurePath(r.source_file).as_posix().endswith(DEMO_CSV)


def data_note(run: BenchResult) -> str:
    """Why more data makes a better draft, with the story's figure when the run is the story's."""
    if _from_demo_history(run):
        return f"that is why the seeds regenerated {fmt.count(REGENERATED_SAMPLES)} samples with the target"
    return "a regeneration has the target answer the training prompts again, and the draft learns from that"


def verdict(p: be.Pairing) -> str:
    """The model's result for one speculative run and its baseline, in the page's words (Markdown)."""
    m, run, base = p.model, p.run, p.baseline
    c = m.concurrency
    a, spec, plain = m.accept_len, m.spec_tok_s, m.baseline_tok_s
    if c == 1:
        round_expr, step_expr = f"{_acc(a)} / {spec:.1f} s", f"1 / {plain:.1f} s"
        per = ""
    else:
        round_expr, step_expr = f"{c} × {_acc(a)} / {spec:.1f} s", f"{c} / {plain:.1f} s"
        per = f" (each step and each round serves all {c} sequences in flight)"
    ratio, even = m.cost_ratio, m.break_even_accept_len
    head = (f"**{server_of(run)}, {load_label(run)}**: {config_label(run)} gave **{spec:.1f} tok/s** at "
            f"accept_len **{_acc(a)}**, against **{plain:.1f} tok/s** without speculation (run #{base.id}): "
            f"**{m.speedup:.2f}×** the baseline.")
    cost = (f"A speculative round (the draft proposing, the target verifying in one pass) took {round_expr} = "
            f"**{_ms(m.round_s)}**, while a plain decode step took {step_expr} = **{_ms(m.plain_step_s)}**{per}. "
            f"So one round cost as much as **{ratio:.1f} plain steps**")
    if m.pays:
        cost += (f", and it delivered {_acc(a)} tokens per sequence: accept_len {_acc(a)} pays for the round. "
                 f"Speculation breaks even at **accept_len {_acc(even)}**; below that it would be slower than "
                 f"not speculating, and a round may grow to {_ms(m.round_budget_s(a))} before it stops paying.")
        return f"{head}\n\n{cost}"
    cost += (f", but it delivered only {_acc(a)} tokens per sequence: accept_len {_acc(a)} could not pay for it. "
             f"Break-even was **accept_len {_acc(even)}** (the round's cost in plain steps).")
    reach = (f"Reaching it takes a **better draft**, one that guesses more of the target's tokens: above all "
             f"more training data in the target's own words ({data_note(run)}). Or a **cheaper round**: fewer "
             f"draft tokens or steps make the round shorter, which lowers the break-even point; at accept_len "
             f"{_acc(a)} a round would have to take under {_ms(m.round_budget_s(a))} to pay.")
    return f"{head}\n\n{cost}\n\n{reach}"


def model_text() -> str:
    """The model as breakeven.py states it (its docstring, up to the notes on the code)."""
    doc = be.__doc__ or ""
    body = doc.split("Pure functions")[0]
    return body.split("\n", 1)[1].strip() if "\n" in body else body.strip()


def what_if_figure(m: be.BreakEven, asked: float) -> go.Figure:
    """Predicted tok/s against accept_len for this round, the baseline and the measured run."""
    top = max(4.0, asked + 0.5, m.break_even_accept_len + 1.0)
    xs = [1.0 + (top - 1.0) * i / 60 for i in range(61)]
    fig = charts.figure("What accept_len would give, at this round's cost", y_title="output tok/s", height=320,
                        range_buttons=False, hovermode="closest")
    fig.add_trace(go.Scatter(x=xs, y=[m.predicted_tok_s(x) for x in xs], mode="lines", name="predicted",
                             line=dict(color=charts.colour_for("predicted tok/s")),
                             hovertemplate="accept_len %{x:.2f}: %{y:,.1f} tok/s<extra>predicted</extra>"))
    charts.add_baseline(fig, m.baseline_tok_s, "baseline tok/s")
    fig.add_trace(go.Scatter(x=[m.accept_len], y=[m.spec_tok_s], mode="markers", name="measured",
                             marker=dict(size=11, color="#111827"),
                             hovertemplate="measured: accept_len %{x:.2f}, %{y:,.1f} tok/s<extra></extra>"))
    fig.add_trace(go.Scatter(x=[asked], y=[m.predicted_tok_s(asked)], mode="markers", name=f"accept_len {asked:.2f}",
                             marker=dict(size=12, symbol="diamond", color=charts.colour_for("asked accept_len")),
                             hovertemplate="accept_len %{x:.2f}: %{y:,.1f} tok/s<extra></extra>"))
    fig.add_vline(x=m.break_even_accept_len, line_dash="dot", line_color=BASELINE_COLOUR,
                  annotation_text=f"break-even {m.break_even_accept_len:.2f}", annotation_position="bottom right")
    fig.update_xaxes(title="accept_len")
    fig.update_yaxes(rangemode="tozero")
    charts.legend_below(fig)
    return fig


def _newest(pairs: list[be.Pairing]) -> be.Pairing:
    return max(pairs, key=lambda p: (when(p.run) or 0.0, p.run.id or 0))


def panel(results: list[BenchResult]) -> None:
    st.markdown("From one server at one load, the run without speculation and a speculative run give the cost of "
                "a speculative round in plain decode steps, and so the accept_len it needs.")
    pairs = be.pair_with_baselines(results)
    modelled = [p for p in pairs if p.model is not None]
    unknown = [r for r in results if r.speculative is None]
    if not modelled:
        st.info("No target has both a run without speculation and a speculative run (with its accept_len) on the "
                "same dataset at the same load yet. Run a benchmark of each at the same concurrency and lengths"
                + (f"; {len(unknown)} stored result{'s do' if len(unknown) != 1 else ' does'} not record whether "
                   "it speculated: import it again with Speculation set (none for a baseline)" if unknown else "")
                + ".", icon=":material/info:")
        _unmodelled(pairs)
        return
    servers = sorted({server_of(p.run) for p in modelled})
    newest = _newest(modelled)
    a, b, c = st.columns([1, 2, 3])
    server = a.selectbox("Server", servers, index=servers.index(server_of(newest.run)), key="bench-be-server", persist_state="session")
    of_server = [p for p in modelled if server_of(p.run) == server]
    loads = sorted({p.run.load.key() for p in of_server}, key=lambda k: tuple(x or 0 for x in k))
    load_names = {k: load_label(next(p.run for p in of_server if p.run.load.key() == k)) for k in loads}
    default_load = _newest(of_server).run.load.key()
    load = b.selectbox("Load", loads, index=loads.index(default_load), format_func=load_names.get,
                       key="bench-be-load", persist_state="session")
    at_load = sorted([p for p in of_server if p.run.load.key() == load],
                     key=lambda p: (when(p.run) or 0.0, p.run.id or 0), reverse=True)
    by_id = {p.run.id: p for p in at_load}  # options are run ids: another server's runs are other options
    datasets = {p.run.load.dataset for p in at_load}
    chosen = c.selectbox("Speculative run", list(by_id), key="bench-be-run", persist_state="session",
                         format_func=lambda i: f"#{i} {config_label(by_id[i].run)}" + (
                             f" · {by_id[i].run.load.dataset or 'dataset not recorded'}" if len(datasets) > 1 else ""))
    p = by_id.get(chosen, at_load[0])
    m = p.model
    k = st.columns(5)
    k[0].metric("speculative round", _ms(m.round_s), help="concurrency × accept_len / speculative tok/s")
    k[1].metric("plain decode step", _ms(m.plain_step_s), help="concurrency / baseline tok/s")
    k[2].metric("round cost", f"{m.cost_ratio:.1f} plain steps")
    k[3].metric("break-even accept_len", _acc(m.break_even_accept_len),
                delta=f"measured {_acc(m.accept_len)}", delta_color="off", delta_arrow="off")
    k[4].metric("speedup", f"{m.speedup:.2f}×", delta=f"{(m.speedup - 1) * 100:+.0f}% vs baseline",
                delta_color="normal")
    st.markdown(fmt.data_markdown(verdict(p)))  # it names the run's server and draft, as imported
    _what_if(m)
    with st.expander("The model and its assumptions", icon=":material/functions:"):
        st.markdown(model_text())
        st.markdown("**Assumptions**\n\n" + "\n".join(f"- {x}" for x in be.ASSUMPTIONS))
    _unmodelled(pairs)


def _what_if(m: be.BreakEven) -> None:
    left, right = st.columns([1, 2])
    default = round(max(m.break_even_accept_len + 0.5, m.accept_len + 0.5), 1)
    asked = left.number_input("What would accept_len X give?", min_value=1.0, max_value=64.0, value=default,
                              step=0.1, format="%.2f", key="bench-be-asked", persist_state="session",
                              help="tok/s this round would give at that accept_len (same draft configuration, "
                                   "same load)")
    got = m.predicted_tok_s(float(asked))
    left.metric(f"predicted at accept_len {asked:.2f}", fmt.tok_s(got),
                delta=f"{(got / m.baseline_tok_s - 1) * 100:+.0f}% vs {m.baseline_tok_s:.1f} tok/s baseline")
    left.caption(f"At this round's cost ({_ms(m.round_s)}), each 0.1 of accept_len is worth "
                 f"{m.predicted_tok_s(1.1) - m.predicted_tok_s(1.0):.1f} tok/s.")
    right.plotly_chart(what_if_figure(m, float(asked)), width="stretch", key="bench-be-chart")


def _unmodelled(pairs: list[be.Pairing]) -> None:
    missing = [p for p in pairs if p.model is None]
    if not missing:
        return
    with st.expander(f"Speculative runs the model cannot explain ({len(missing)})", icon=":material/help:"):
        st.table([{"run": f"#{p.run.id}", "server": server_of(p.run), "configuration": config_label(p.run),
                   "load": load_label(p.run), "why": p.reason} for p in missing], hide_index=True)
