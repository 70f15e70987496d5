"""The Benchmarks page's charts (plotly, through ui/charts.py's template and colours).

tok/s per configuration against concurrency with the baseline drawn at each concurrency;
speedup against the baseline at the same load; accept_len against tok/s; latency
percentiles; runs over time.  The figure builders are plain functions of the results; the
``*_block`` functions draw them with their captions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Iterable

import plotly.graph_objects as go
import streamlit as st

from backend.bench import baseline
from backend.bench.breakeven import pair_with_baselines
from specdeck_types.bench import BenchResult
from ui import charts, fmt
from ui.bench.data import (Verdict, config_label, lengths, load_label, series_label, server_of, verdict, verdict_text,
                           when)

BASELINE_COLOUR = "#6b7280"
MAX_BARS = 30  # speedup bars on screen (the newest runs)
MAX_TABLE = 25  # rows of a table shown whole; longer ones scroll
SLOWER, FASTER = "#dc2626", "#16a34a"


def _newest_first(results: Iterable[BenchResult]) -> list[BenchResult]:
    return sorted(results, key=lambda r: (when(r) or 0.0, r.id or 0), reverse=True)


def _line_key(r: BenchResult) -> str:
    """A line of the tok/s chart: one server's configuration at one pair of lengths."""
    return f"{series_label(r)} · {lengths(r)}" if lengths(r) != "lengths N/A" else series_label(r)


def _points(results: list[BenchResult]) -> dict[str, dict[int, BenchResult]]:
    """Per line, the newest run at each concurrency (with tok/s)."""
    lines: dict[str, dict[int, BenchResult]] = {}
    for r in _newest_first(results):
        if r.load.concurrency is None or r.results.output_tok_s is None:
            continue
        lines.setdefault(_line_key(r), {}).setdefault(r.load.concurrency, r)
    return lines


def _log_axis(fig: go.Figure, values: Iterable[int]) -> None:
    """Concurrency on a log axis, a tick at each measured value, room for the baseline dashes either side."""
    ticks = sorted(set(values))
    fig.update_xaxes(type="log", tickvals=ticks, ticktext=[str(t) for t in ticks], title="concurrency",
                     range=[math.log10(ticks[0] / 2), math.log10(ticks[-1] * 2)])


def colours(names: Iterable[str]) -> dict[str, str]:
    """Each name its stable colour (ui.charts.colour_for), unless another series of the same chart has it
    already: then the next free one of the palette, so series side by side never share a colour."""
    out: dict[str, str] = {}
    used: set[str] = set()
    for name in sorted(set(names)):
        c = charts.colour_for(name)
        if c in used:
            start = charts.PALETTE.index(c)
            free = [charts.PALETTE[(start + i) % len(charts.PALETTE)] for i in range(1, len(charts.PALETTE))]
            c = next((x for x in free if x not in used), c)
        out[name] = c
        used.add(c)
    return out


def wrap(name: str, limit: int = 80) -> str:
    """A long series name over several legend lines (at its `` · `` joins), so a legend is never cut."""
    lines: list[str] = []
    for part in name.split(" · "):
        if lines and len(lines[-1]) + 3 + len(part) <= limit:
            lines[-1] += " · " + part
        else:
            lines.append(part)
    return "<br>".join(lines)


def _headroom(fig: go.Figure) -> None:
    """y from 0 to a little above the highest point, so a marker at the top is drawn whole."""
    ys = [y for t in fig.data for y in (t.y or ()) if isinstance(y, (int, float))]
    fig.update_yaxes(range=[0, max(ys) * 1.15] if ys else None, rangemode="tozero")


def page_palette(results: Iterable[BenchResult]) -> dict[str, str]:
    """One colour per configuration (series_label) for every chart of the page; a lone baseline is grey."""
    results = list(results)
    bases = {series_label(r) for r in results if r.is_baseline}
    pal = colours(series_label(r) for r in results if len(bases) > 1 or not r.is_baseline)
    if len(bases) == 1:
        pal[bases.pop()] = BASELINE_COLOUR
    return pal


def target_key(r: BenchResult) -> str:
    """The target a result measured, as its baselines are paired: the model's name (no case, a path's last
    folder), else the server's name."""
    t = (r.config.target_model or "").strip().rstrip("/")
    return t.rsplit("/", 1)[-1].lower() if t else f"server {server_of(r)}"


def by_target(results: Iterable[BenchResult]) -> dict[str, list[BenchResult]]:
    """Results grouped by :func:`target_key`, named as the page shows them (the target, else the server)."""
    out: dict[str, list[BenchResult]] = {}
    names: dict[str, str] = {}
    for r in results:
        k = target_key(r)
        names.setdefault(k, r.config.target_model.strip().rstrip("/").rsplit("/", 1)[-1]
                         if r.config.target_model and r.config.target_model.strip() else server_of(r))
        out.setdefault(k, []).append(r)
    return {names[k]: v for k, v in sorted(out.items())}


def configured_levels(results: list[BenchResult], configured: Configured | None) -> dict[str, float]:
    """Server -> its configured single-stream baseline, for the servers among ``results`` with a speculative
    run at concurrency 1 and no stored baseline of their target (where the Servers page uses it too)."""
    out: dict[str, float] = {}
    for r in results:
        if not configured or r.server not in configured or r.is_baseline or r.load.concurrency != 1:
            continue
        model_path, served, tok = configured[r.server]
        choice = baseline.server_baseline(results, server=r.server, model_path=model_path,
                                          served_model_name=served, configured_tok_s=tok, running=1)
        if choice.configured_applies:
            out[r.server] = choice.configured_tok_s
    return out


def tok_s_figure(results: list[BenchResult], palette: dict[str, str] | None = None, title: str | None = None,
                 configured: Configured | None = None) -> go.Figure:
    """Output tok/s against concurrency, a line per configuration; each baseline a dashed bar at each
    concurrency it was measured at, labelled with its value.  Give it the results of ONE target
    (:func:`by_target`): a baseline is drawn only beside the runs it is compared with.  A configured
    single-stream baseline (no stored one) is a dashed bar at concurrency 1, named as configured."""
    fig = charts.figure("Output tok/s against concurrency" + (f": {title}" if title else ""),
                        y_title="output tok/s", height=380, range_buttons=False, hovermode="closest")
    concs: list[int] = []
    lines = _points(results)
    palette = palette or page_palette(results)
    dashes: dict[str, int] = {}  # a configuration at a second pair of lengths: same colour, another dash
    n_base = sum(1 for pts in lines.values() if next(iter(pts.values())).is_baseline)
    top_base: dict[int, float] = {}  # the highest baseline at each concurrency: its label above, the others below
    for pts in lines.values():
        for c, r in pts.items():
            if r.is_baseline:
                top_base[c] = max(top_base.get(c, 0.0), r.results.output_tok_s)
    for name, pts in sorted(lines.items()):
        xs = sorted(pts)
        concs += xs
        runs = [pts[c] for c in xs]
        if runs[0].is_baseline:
            # one baseline: grey; several (servers, lengths): each its own colour, named in its label
            colour = palette.get(series_label(runs[0])) or BASELINE_COLOUR
            who = "" if n_base == 1 else f"{server_of(runs[0])} "
            sx: list[float | None] = []
            sy: list[float | None] = []
            for c, r in zip(xs, runs):  # a short dashed level at each concurrency, not a slope between them
                sx += [c / 1.25, c * 1.25, None]
                sy += [r.results.output_tok_s, r.results.output_tok_s, None]
            fig.add_trace(go.Scatter(x=sx, y=sy, mode="lines", name=wrap(f"{name} (baseline)"),
                                     connectgaps=False,
                                     line=dict(color=colour, dash="dash", width=2), hoverinfo="skip"))
            fig.add_trace(go.Scatter(
                x=xs, y=[r.results.output_tok_s for r in runs], mode="markers+text", showlegend=False,
                text=[f"{who}baseline {r.results.output_tok_s:,.1f}" for r in runs], textposition=["top center" if r.results.output_tok_s >= top_base[c] else "bottom center"
                              for c, r in zip(xs, runs)],
                marker=dict(color=colour, symbol="line-ew-open", size=14),
                textfont=dict(color=colour, size=11), name=f"{name} (baseline)",
                customdata=[[r.id, load_label(r)] for r in runs],
                hovertemplate="%{y:,.1f} tok/s without speculation<br>run #%{customdata[0]}, %{customdata[1]}"
                              "<extra></extra>"))
        else:
            series = series_label(runs[0])
            colour = palette.get(series) or charts.colour_for(series)
            n = dashes[series] = dashes.get(series, -1) + 1
            fig.add_trace(go.Scatter(
                x=xs, y=[r.results.output_tok_s for r in runs], mode="lines+markers", name=wrap(name),
                line=dict(color=colour, dash=("solid", "dot", "dashdot", "longdash")[n % 4]), marker=dict(size=9),
                customdata=[[r.id, load_label(r), fmt.accept_len(r.accept_len)] for r in runs],
                hovertemplate=name + "<br>%{y:,.1f} tok/s<br>run #%{customdata[0]}, "
                              "%{customdata[1]}<br>accept_len %{customdata[2]}<extra></extra>"))
    levels = configured_levels(results, configured)
    for server, tok in sorted(levels.items()):
        who = "" if len(levels) == 1 else f"{server} "
        fig.add_trace(go.Scatter(
            x=[1 / 1.25, 1 * 1.25, None, 1], y=[tok, tok, None, tok], mode="lines+text",
            name=wrap(f"{server} · configured single-stream baseline_tok_s (none measured)"),
            line=dict(color=BASELINE_COLOUR, dash="dot", width=2),
            text=["", "", "", f"{who}configured baseline {tok:,.1f}"], textposition="bottom center",
            textfont=dict(color=BASELINE_COLOUR, size=11), hoverinfo="skip"))
        concs.append(1)
    if concs:
        _log_axis(fig, concs)
    top = max([r.results.output_tok_s for pts in lines.values() for r in pts.values()] + list(levels.values()),
              default=0.0)
    fig.update_yaxes(range=[0, top * 1.2 or 1])
    charts.legend_below(fig)
    return fig


@dataclass(frozen=True)
class Speedup:
    """A speculative run against the baseline of the same server at the same load (or why there is none).

    ``baseline`` is the stored run without speculation; where none of the target is stored, the server's
    configured single-stream ``baseline_tok_s`` stands in at concurrency 1 (``baseline`` None,
    ``baseline_tok_s`` set), the same answer as the Servers page's."""

    run: BenchResult
    baseline: BenchResult | None
    ratio: float | None
    why: str = ""
    baseline_tok_s: float | None = None

    @property
    def has_baseline(self) -> bool:
        return self.baseline_tok_s is not None

    @property
    def baseline_text(self) -> str:
        """``#1: 90.0 tok/s``, ``configured 90.0 tok/s (single stream)``, or N/A."""
        if self.baseline is not None:
            return f"#{self.baseline.id}: {fmt.tok_s(self.baseline_tok_s)}"
        if self.baseline_tok_s is not None:
            return f"configured {fmt.tok_s(self.baseline_tok_s)} (single stream)"
        return fmt.NA


# server name -> (model_path, served_model_name, configured baseline_tok_s): what the workspace file says
Configured = dict[str, tuple[str | None, str | None, float | None]]


def _configured(p, results: list[BenchResult], configured: Configured | None) -> Speedup | None:
    """The configured single-stream baseline for a run with no stored one at its load, where the Servers
    page would use it too (no baseline of the target stored) and the run is single-stream (concurrency 1)."""
    run = p.run
    if not configured or run.server not in configured:
        return None
    model_path, served, tok = configured[run.server]
    choice = baseline.server_baseline(results, server=run.server, model_path=model_path, served_model_name=served,
                                      configured_tok_s=tok, running=run.load.concurrency)
    if not choice.configured_applies:
        return None
    if run.load.concurrency != 1:
        return Speedup(run, None, None, f"{p.reason}; the configured baseline_tok_s "
                                        f"{fmt.tok_s(choice.configured_tok_s)} is single-stream (concurrency 1)")
    tok_s = run.results.output_tok_s
    if tok_s is None:
        return Speedup(run, None, None, "tok/s of this run was not recorded", choice.configured_tok_s)
    return Speedup(run, None, tok_s / choice.configured_tok_s, baseline_tok_s=choice.configured_tok_s)


def speedups(results: Iterable[BenchResult], configured: Configured | None = None) -> list[Speedup]:
    """Every speculative run, paired by :func:`pair_with_baselines` (same server or target, same
    concurrency and lengths, newest baseline); the ratio needs both tok/s, not the accept_len.  Without a
    stored baseline of its target, a single-stream run of a configured server is compared with the
    server's configured ``baseline_tok_s`` (:func:`backend.bench.baseline.server_baseline`)."""
    results = list(results)
    out = []
    for p in pair_with_baselines(results):
        tok = p.run.results.output_tok_s
        if p.baseline is None:
            out.append(_configured(p, results, configured) or Speedup(p.run, None, None, p.reason))
        elif tok is None:
            out.append(Speedup(p.run, p.baseline, None, "tok/s of this run was not recorded",
                               p.baseline.results.output_tok_s))
        else:
            base = p.baseline.results.output_tok_s
            out.append(Speedup(p.run, p.baseline, tok / base, baseline_tok_s=base))
    return out


def verdicts(pairs: Iterable[Speedup]) -> dict[int, Verdict | None]:
    """Each speculative run's verdict (by result id), for the Runs table and the key figures."""
    return {p.run.id: verdict(p.run, p.ratio, p.has_baseline) for p in pairs}


def _ratio_colour(ratio: float) -> str:
    """Coloured by how far from the baseline, not by the sign: near 1 is grey, far below red, far above green."""
    t = max(-1.0, min(1.0, math.log2(ratio) / 0.5))  # ±41 % reaches the full colour
    grey, end = (156, 163, 175), ((22, 163, 74) if t > 0 else (220, 38, 38))
    mix = [round(g + (e - g) * abs(t)) for g, e in zip(grey, end)]
    return f"rgb({mix[0]},{mix[1]},{mix[2]})"


def run_name(r: BenchResult) -> str:
    """A run in full (hover, tables)."""
    return f"#{r.id} {series_label(r)} @ {load_label(r)}"


def run_tag(r: BenchResult) -> str:
    """A run in a few characters, for a chart's axis: ``#3 glm5 c1``."""
    c = r.load.concurrency
    return f"#{r.id} {server_of(r)} c{c if c is not None else '?'}"


def speedup_figure(pairs: list[Speedup]) -> go.Figure | None:
    shown = [p for p in pairs if p.ratio is not None]
    if not shown:
        return None
    fig = charts.figure("Speedup against the baseline at the same load", height=120 + 38 * len(shown),
                        range_buttons=False)
    fig.add_trace(go.Bar(
        y=[run_tag(p.run) for p in shown], x=[p.ratio for p in shown], orientation="h",
        marker_color=[_ratio_colour(p.ratio) for p in shown],
        text=[f"{p.ratio:.2f}×" for p in shown], textposition="auto",
        customdata=[[p.run.results.output_tok_s, p.baseline_text, run_name(p.run)] for p in shown],
        hovertemplate="%{customdata[2]}<br>%{x:.2f}×: %{customdata[0]:,.1f} tok/s against baseline "
                      "%{customdata[1]}<extra></extra>", showlegend=False))
    fig.add_vline(x=1.0, line_dash="dash", line_color=BASELINE_COLOUR,
                  annotation_text="baseline 1.00×", annotation_position="top")
    fig.update_layout(hovermode="closest", yaxis=dict(autorange="reversed", automargin=True),
                      xaxis=dict(title="× baseline tok/s", rangemode="tozero"))
    return fig


def speedup_rows(pairs: list[Speedup]) -> list[dict]:
    rows = []
    for p in pairs:
        rows.append({
            "run": f"#{p.run.id}", "server": server_of(p.run), "configuration": config_label(p.run),
            "load": load_label(p.run), "tok/s": fmt.tok_s(p.run.results.output_tok_s),
            "baseline": p.baseline_text,
            "speedup": f"{p.ratio:.2f}×" if p.ratio is not None else f"{fmt.NA}: {p.why}",
            "verdict": verdict_text(verdict(p.run, p.ratio, p.has_baseline)),
        })
    return rows


def accept_figure(results: list[BenchResult], palette: dict[str, str] | None = None) -> tuple[go.Figure, int]:
    """tok/s against accept_len, a colour per configuration; baselines at accept_len 1 (a plain step
    yields one token).  Returns the figure and how many runs could not be placed."""
    fig = charts.figure("tok/s against accept_len", y_title="output tok/s", height=380, range_buttons=False,
                        hovermode="closest")
    groups: dict[str, list[tuple[float, BenchResult, bool]]] = {}
    no_tok: list[tuple[float, BenchResult, bool]] = []  # accept_len without tok/s: on the x axis, named
    missing = 0
    for r in results:
        tok = r.results.output_tok_s
        acc, lifetime = r.results.accept_len, False
        if acc is None and r.results.accept_len_lifetime is not None:
            acc, lifetime = r.results.accept_len_lifetime, True
        if r.is_baseline:
            acc = 1.0
        if tok is None and acc is not None and not r.is_baseline:
            no_tok.append((acc, r, lifetime))
            continue
        if tok is None or acc is None:
            missing += 1
            continue
        groups.setdefault(series_label(r), []).append((acc, r, lifetime))
    palette = palette or page_palette(results)
    for name, pts in sorted(groups.items()):
        base = pts[0][1].is_baseline
        colour = palette.get(name) or charts.colour_for(name)
        fig.add_trace(go.Scatter(
            x=[a for a, _, _ in pts], y=[r.results.output_tok_s for _, r, _ in pts], mode="markers",
            name=wrap(name + (" · accept_len 1: one token per step" if base else "")),
            marker=dict(color=colour, size=11, symbol=["x" if base else ("circle-open" if lt else "circle")
                                                        for _, _, lt in pts]),
            customdata=[[r.id, load_label(r), "server lifetime" if lt else "this run"] for _, r, lt in pts],
            hovertemplate="accept_len %{x:.2f} (%{customdata[2]}), %{y:,.1f} tok/s<br>run #%{customdata[0]}, "
                          "%{customdata[1]}<extra></extra>"))
    if no_tok:
        fig.add_trace(go.Scatter(
            x=[a for a, _, _ in no_tok], y=[0.0] * len(no_tok), mode="markers+text", cliponaxis=False,
            name="accept_len recorded, tok/s not (on the axis, not 0 tok/s)",
            marker=dict(color=SLOWER, size=14, symbol="triangle-up-open", line=dict(width=2)),
            text=[f"#{r.id} {server_of(r)}: accept_len {a:.2f}, tok/s N/A" for a, r, _ in no_tok],
            textposition="top right", textfont=dict(color=SLOWER, size=11),
            customdata=[[r.id, load_label(r), config_label(r), "server lifetime" if lt else "this run"]
                        for _, r, lt in no_tok],
            hovertemplate="accept_len %{x:.2f} (%{customdata[3]}), tok/s not recorded<br>run #%{customdata[0]}, "
                          "%{customdata[2]}, %{customdata[1]}<extra></extra>"))
    fig.update_xaxes(title="accept_len")
    _headroom(fig)
    if no_tok:
        xs = [t for tr in fig.data for t in (tr.x or ()) if isinstance(t, (int, float))]
        fig.update_xaxes(range=[min(0.9, min(xs) - 0.1), max(xs) + 0.4])
    charts.legend_below(fig)
    return fig, missing


LATENCIES = (("TTFT", "ttft_ms"), ("TPOT", "tpot_ms"), ("ITL", "itl_ms"))


def latency_figures(results: list[BenchResult], limit: int = 12) -> tuple[go.Figure | None, go.Figure | None, int]:
    """TTFT (one chart) and TPOT / ITL (another: they are 100× smaller) p50 and p99 of the newest
    ``limit`` runs that have them; and how many runs have none."""
    have = [r for r in _newest_first(results)
            if any(getattr(r.results, f).median is not None or getattr(r.results, f).p99 is not None
                   for _, f in LATENCIES)]
    missing = len(results) - len(have)
    have = have[:limit]
    if not have:
        return None, None, missing
    names = [run_tag(r) for r in have]
    full = [run_name(r) for r in have]
    palette = colours(f"{label} {pct}" for label, _ in LATENCIES for pct in ("p50", "p99"))
    figs = []
    for title, which in (("Time to first token", ("TTFT",)), ("Time per output token and inter-token latency",
                                                              ("TPOT", "ITL"))):
        fig = charts.figure(title, height=150 + 40 * len(have), range_buttons=False, hovermode="closest",
                            barmode="group", yaxis=dict(autorange="reversed", automargin=True),
                            xaxis=dict(title="ms", rangemode="tozero"))
        for label, f in LATENCIES:
            if label not in which:
                continue
            for stat, pct in (("median", "p50"), ("p99", "p99")):
                vals = [getattr(getattr(r.results, f), stat) for r in have]
                fig.add_trace(go.Bar(y=names, x=vals, orientation="h", name=f"{label} {pct}", customdata=full,
                                     marker_color=palette[f"{label} {pct}"],
                                     opacity=1.0 if pct == "p50" else 0.6,
                                     hovertemplate=f"%{{customdata}}<br>{label} {pct} %{{x:,.2f}} ms<extra></extra>"))
        charts.legend_below(fig)
        figs.append(fig)
    return figs[0], figs[1], missing


def over_time_figure(results: list[BenchResult], palette: dict[str, str] | None = None) -> go.Figure:
    """tok/s of each run at the time it ran (hand-entered results: when they were stored)."""
    fig = charts.figure("Runs over time", y_title="output tok/s", height=340, hovermode="closest")
    groups: dict[str, list[BenchResult]] = {}
    for r in sorted(results, key=lambda r: (when(r) or 0.0, r.id or 0)):
        if r.results.output_tok_s is not None and when(r) is not None:
            groups.setdefault(series_label(r), []).append(r)
    palette = palette or page_palette(results)
    for name, runs in sorted(groups.items()):
        base = runs[0].is_baseline
        fig.add_trace(go.Scatter(
            x=[datetime.fromtimestamp(when(r)) for r in runs], y=[r.results.output_tok_s for r in runs],
            mode="markers", name=wrap(name),
            marker=dict(size=10, symbol="x" if base else "circle",
                        color=palette.get(name) or charts.colour_for(name)),
            customdata=[[r.id, load_label(r), "started" if r.started_at is not None else "stored"] for r in runs],
            hovertemplate="%{y:,.1f} tok/s, %{customdata[2]} %{x|%Y-%m-%d %H:%M}<br>run #%{customdata[0]}, "
                          "%{customdata[1]}<extra></extra>"))
    times = [when(r) for runs in groups.values() for r in runs]
    if times and max(times) - min(times) < 3600:  # runs close together (or stored at once): an hour around them
        mid = (max(times) + min(times)) / 2
        fig.update_xaxes(range=[datetime.fromtimestamp(mid - 1800), datetime.fromtimestamp(mid + 1800)])
    _headroom(fig)
    charts.legend_below(fig)
    return fig


# -- drawing ------------------------------------------------------------------------------

def tok_s_block(results: list[BenchResult], palette: dict[str, str], configured: Configured | None = None) -> None:
    drawn = [r for r in results if r.load.concurrency is not None and r.results.output_tok_s is not None]
    if not drawn:
        st.caption("tok/s against concurrency: no run with both a concurrency and a tok/s yet.")
        return
    groups = by_target(drawn)
    for i, (name, group) in enumerate(groups.items()):
        st.plotly_chart(tok_s_figure(group, palette, name if len(groups) > 1 else None, configured),
                        width="stretch", key=f"bench-tok-chart-{i}")
    left_out = len(results) - len(drawn)
    st.caption("One chart per target model: a baseline is drawn only beside the runs of its own target. Each line "
               "is one server's configuration at one pair of input/output lengths, the newest run at each "
               "concurrency; the dashes are the runs without speculation at the concurrency they were measured at "
               "(dotted: the server's configured single-stream baseline_tok_s, where none is stored)."
               + (f" {left_out} run(s) without a concurrency or a tok/s are not drawn." if left_out else ""))


def speedup_block(results: list[BenchResult], configured: Configured | None = None) -> None:
    pairs = speedups(results, configured)
    if not pairs:
        st.caption("Speedup: no speculative run among these results.")
        return
    newest = sorted(pairs, key=lambda p: (when(p.run) or 0.0, p.run.id or 0), reverse=True)
    fig = speedup_figure(newest[:MAX_BARS])
    if fig is not None:
        st.plotly_chart(fig, width="stretch", key="bench-speedup-chart")
    shown = sum(p.ratio is not None for p in newest[:MAX_BARS])
    more = sum(p.ratio is not None for p in newest) - shown
    st.caption("A run is compared only with a baseline of the same server (or target) at the same concurrency "
               "and input/output lengths: the newest such run without speculation."
               + (f" The chart shows the newest {shown}; the table has all {shown + more}." if more else ""))
    rows = speedup_rows(newest)
    if len(rows) <= MAX_TABLE:
        st.table(rows, hide_index=True)  # wraps the reasons instead of cutting them
    else:
        st.dataframe(rows, hide_index=True, width="stretch", key="bench-speedup-table")
    lacking = sorted({(server_of(p.run), p.run.load.concurrency) for p in pairs if not p.has_baseline},
                     key=lambda x: (x[0], x[1] or 0))
    if lacking:
        st.info("No baseline for " + "; ".join(f"**{s}** at concurrency {fmt.count(c)}" for s, c in lacking)
                + ". Measure one: relaunch the server without speculation and run a benchmark at that load "
                  "(tab **Run a benchmark**).", icon=":material/info:")


def accept_block(results: list[BenchResult], palette: dict[str, str]) -> None:
    fig, missing = accept_figure(results, palette)
    if not fig.data:
        st.caption("accept_len against tok/s: no run with both figures yet.")
        return
    st.plotly_chart(fig, width="stretch", key="bench-accept-chart")
    st.caption("Filled dots: the run's own accept_len; open dots: only the server's lifetime average was recorded; "
               "red triangles on the axis: an accept_len without a recorded tok/s (at 1.00 the draft is never "
               "accepted, so speculation cannot pay)."
               + (f" {missing} run(s) lack accept_len or tok/s and are not drawn." if missing else ""))


def latency_block(results: list[BenchResult]) -> None:
    ttft, tpot, missing = latency_figures(results)
    if ttft is None:
        st.caption("Latency percentiles: none of these runs recorded latencies"
                   + (" (hand-entered numbers rarely have them)." if missing else "."))
        return
    left, right = st.columns(2)
    left.plotly_chart(ttft, width="stretch", key="bench-ttft-chart")
    right.plotly_chart(tpot, width="stretch", key="bench-tpot-chart")
    if missing:
        st.caption(f"{missing} run(s) without latency figures are not drawn.")


def over_time_block(results: list[BenchResult], palette: dict[str, str]) -> None:
    st.plotly_chart(over_time_figure(results, palette), width="stretch", key="bench-time-chart")
    st.caption("A run at the time it started; a hand-entered or imported result without a start time at the "
               "time it was stored.")
