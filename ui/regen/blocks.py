"""The Regeneration page's blocks: progress, per-dataset bars, rate charts, lengths, errors, samples.

Each block draws one snapshot (a progress-log line of Specdeck's job, or what
``SpecForgeFollower.snapshot()`` gives for SpecForge's own script) and reads nothing itself.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import plotly.graph_objects as go
import streamlit as st

from backend.flows.cost import host_port
from backend.regen.follow import History
from backend.regen.samples import turns
from specdeck_types.eta import Eta
from ui import charts, fmt
from ui.components import text_block
from ui.linechart import line_chart

STATE_TEXT = {
    "starting": ":orange[◐ starting]", "running": ":green[● running]", "waiting": ":orange[◐ waiting for a server]",
    "pausing": ":orange[◐ pausing]", "paused": ":gray[○ paused]", "stopping": ":orange[◐ stopping]",
    "done": ":gray[○ done]", "failed": ":red[✕ failed]", "following": ":blue[● following]",
    "catching up": ":orange[◐ reading the files]",
}


def _num(v: Any) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def progress_block(snap: dict[str, Any], eta: Eta, *, now: float | None = None, ended: bool = False,
                   state_line: str | None = None, controls=None) -> None:
    """The state, the ETA band and the key figures, the big bar and the rate.

    ``ended``: the run is over (done, failed, paused or stopped): no ETA, rate or "done around" is
    shown for it.  ``state_line``: the one state to show (Markdown), instead of the snapshot's own,
    e.g. the supervisor's STOPPED for a job whose last snapshot still says stopping.  ``controls``:
    drawn right under the state line (the page's Pause / Resume / Stop), before the figures."""
    now = time.time() if now is None else now
    total = _num(snap.get("total"))
    done, failed, skipped = _num(snap.get("done")), _num(snap.get("failed")), _num(snap.get("skipped"))
    asked = (done or 0) + (failed or 0)  # skipped rows are never asked: they are not progress
    state = str(snap.get("state") or "")
    line = state_line if state_line is not None else STATE_TEXT.get(state, state)
    if snap.get("message"):
        line += f" · {snap['message']}"
    st.markdown(fmt.data_markdown(line))
    if controls is not None:
        controls()
    c = st.columns(3) + st.columns(3)  # two rows: nothing cut at 1024 px; the ETA first, where the eye lands
    if state == "done" or (eta.point_s == 0 and not ended):
        c[0].metric("ETA", "done", help=eta.basis)
    elif ended:
        c[0].metric("ETA", fmt.NA, help="the run has ended: nothing is being asked, so there is no time left "
                                        "to estimate (Resume starts it again)")
    else:
        mid = fmt.duration(eta.point_s) if eta.point_s is not None else fmt.NA
        c[0].metric("ETA", eta.range_text() or fmt.NA, delta=f"point {mid}" if eta.known else None,
                    delta_color="off", delta_arrow="off", help=eta.basis)
    c[1].metric("remaining", fmt.count(_num(snap.get("remaining"))), help="rows not finished yet (in flight included)")
    c[2].metric("done", fmt.count(done), help="rows answered and written to the output")
    c[3].metric("failed", fmt.count(failed), help="permanent failures, in the _error.jsonl file (requeue them "
                                                 "below once the cause is fixed)")
    c[4].metric("skipped", fmt.count(skipped), help="rows that were not asked (bad input, duplicates, filters), "
                                                   "in the _skipped.jsonl file; they are not progress")
    inflight = snap.get("in_flight")
    n_inflight = _num(inflight)
    if ended and n_inflight is not None:  # an ended run's last snapshot may predate its end
        n_inflight = 0
    c[5].metric("in flight", fmt.count(n_inflight),
                help="requests sent and not answered yet" if inflight is not None else
                "N/A: SpecForge's files do not say what it has in flight")
    if total:
        to_ask = max(0, total - (skipped or 0))
        frac = min(1.0, asked / to_ask) if to_ask else 0.0
        text = (f"**{fmt.count(asked)} of {fmt.count(to_ask)} rows** ({fmt.pct(frac * 100)}): done or failed"
                + (f" · {fmt.count(skipped)} skipped, not asked" if skipped else ""))
        st.progress(frac, text=text)
    else:
        st.progress(0.0, text="counting the rows of the inputs…" if total is None else "no rows in the inputs")
    bits = []
    if not ended:
        rate = snap.get("req_s")
        tok = snap.get("tok_s")
        started = snap.get("started_at")
        bits = [f"{rate:,.2f} rows/s" if isinstance(rate, (int, float)) else "rows/s N/A",
                fmt.tok_s(tok) if isinstance(tok, (int, float)) else "tok/s N/A"]
        if isinstance(started, (int, float)):
            bits.append(f"running for {fmt.duration(now - started)} since the last (re)start")
        if eta.known and eta.point_s:
            bits.append(f"done around {time.strftime('%a %H:%M', time.localtime(now + eta.point_s))}")
    replaced = _num(snap.get("replaced_chars"))
    if replaced:
        bits.append(f"{fmt.count(replaced)} character(s) that are not valid Unicode written as U+FFFD "
                    "(regen.replaced_chars marks their rows)")
    if bits:
        st.caption(" · ".join(bits))


ACCEPT_HELP = ("accept_len of a dataset: the tokens of its rows' answers over the server's draft+verify steps for "
               "them, from each answer's own figures (SGLang 0.5.23's sglext.spec_tokens_details), so it says which "
               "data the draft serves well and which the next draft needs.")
NO_FIGURES = ("the server's answers carried no speculative figures: it does not speculate, or its API gives none "
              "(SGLang before 0.5.23, another OpenAI server, or a router that drops the request's "
              "return_spec_tokens_details)")
NOT_RECORDED = "this run's progress log holds no per-request speculative figures (its job predates them)"


def accept_len_text(d: dict[str, Any]) -> str:
    """A dataset's accept_len as the bar shows it: the figure, or N/A."""
    a = d.get("accept_len")
    if isinstance(a, (int, float)) and not isinstance(a, bool):
        return f"accept_len {a:.2f}"
    return "accept_len N/A"


def _has_figure(d: dict[str, Any]) -> bool:
    a = d.get("accept_len")
    return isinstance(a, (int, float)) and not isinstance(a, bool)


def accept_len_note(snap: dict[str, Any]) -> str | None:
    """The sentence under the bars on an N/A (or partial) accept_len, or None when every dataset with
    done rows has its figure from all of them."""
    ds = snap.get("datasets") or {}
    if not snap.get("spec_recorded"):
        return f"accept_len N/A: {NOT_RECORDED}."
    done = {k: d for k, d in ds.items() if (_num(d.get("done")) or 0) > 0}
    if not done:
        return "accept_len N/A until a row is done."
    without = [k for k, d in done.items() if not _has_figure(d)]
    if len(without) == len(done):
        return f"accept_len N/A: {NO_FIGURES}."
    if without:
        return f"accept_len N/A for {', '.join(without)}: {NO_FIGURES}."
    partial = [k for k, d in done.items() if (_num(d.get("spec_rows")) or 0) < (_num(d.get("done")) or 0)]
    if partial:
        return f"accept_len of {', '.join(partial)} counts only the rows whose answers gave figures."
    return None


def dataset_bars(snap: dict[str, Any]) -> None:
    """One bar per dataset of the mix: its done and failed rows of those to ask (skipped rows are
    never asked, so they fill no bar), and its accept_len from the server's per-request figures."""
    ds = snap.get("datasets") or {}
    if not ds:
        return
    st.markdown("**Per dataset**", help=ACCEPT_HELP)
    any_figure = any(_has_figure(d) for d in ds.values())
    cols = st.columns(2)
    for i, (name, d) in enumerate(ds.items()):
        total = _num(d.get("total")) or 0
        done, failed, skipped = (_num(d.get(k)) or 0 for k in ("done", "failed", "skipped"))
        to_ask = max(0, total - skipped)
        frac = min(1.0, (done + failed) / to_ask) if to_ask else 0.0
        extra = []
        if failed:
            extra.append(f"{fmt.count(failed)} failed")
        if skipped:
            extra.append(f"{fmt.count(skipped)} skipped")
        text = f"{name}: {fmt.count(done)} / {fmt.count(total)}" + (f" ({', '.join(extra)})" if extra else "")
        if any_figure and (done or _has_figure(d)):  # none at all: one line under the bars says why
            text += f" · {accept_len_text(d)}"
        cols[i % 2].progress(frac, text=fmt.data_markdown(text))
    note = accept_len_note(snap)
    if note is not None:
        st.caption(fmt.data_markdown(note), help=ACCEPT_HELP)


def _server_named(url: str, fleet, names: list[str]) -> str | None:
    want = host_port(url)
    for n in names:
        cfg = fleet.config(n)
        if host_port(f"http://{cfg.host}:{cfg.port}") == want:
            return n
    return None


def server_series(snap: dict[str, Any], fleet) -> dict[str, tuple[list, list]]:
    """The servers' own gen throughput (their decode log lines), for the servers of the run; for a
    router, for each server behind it."""
    out: dict[str, tuple[list, list]] = {}
    if fleet is None:
        return out
    names = fleet.names()
    behind = snap.get("behind") or {}
    urls: list[tuple[str, str | None]] = []
    for url, s in (snap.get("servers") or {}).items():
        if url in behind:
            urls += [(w, None) for w in (behind[url].get("workers") or {})]
        else:
            urls.append((url, s.get("name")))
    for url, name in urls:
        match = name if name in names else _server_named(url, fleet, names)
        if match is None or match in out:
            continue
        try:
            dec = fleet.snapshot(match).decode
        except Exception:  # a server removed meanwhile: no series
            continue
        out[match] = (list(dec["ts"]), list(dec["gen_throughput"]))
    return out


def _series(fig: go.Figure, name: str, ts, ys, *, fmt: str, breaks=(), dash: str | None = None,
            row: int = 1, colour: str | None = None) -> None:
    """``charts.add_series`` with the points handed to plotly as numpy arrays: the same breaks,
    min/max downsampling and local time, without plotly checking 2,000 Python objects one by one
    (4 times faster for a 2,000-point trace, measured in perf/bench_regen_page.py's setting)."""
    timed = [(t, y) for t, y in zip(ts, ys) if t is not None]
    xs, vals = charts.downsample(*charts.with_breaks([t for t, _ in timed], [y for _, y in timed], breaks))
    offset = time.localtime().tm_gmtoff  # local wall-clock time, as charts.to_local gives
    x = ((np.asarray(xs, dtype=float) + offset) * 1000).astype("datetime64[ms]")
    y = np.asarray([np.nan if v is None else v for v in vals], dtype=float)
    fig.add_trace(go.Scatter(x=x, y=y, name=name, mode="lines", connectgaps=False,
                             line=dict(color=colour or charts.colour_for(name), dash=dash),
                             hovertemplate=f"%{{y:{fmt}}}<extra>{name}</extra>"), row=row, col=1)


ROWS_COLOUR, TOK_COLOUR = charts.PALETTE[0], charts.PALETTE[2]  # this job's two series: blue and orange


def speed_chart(history: History, servers: dict[str, tuple[list, list]], *, key: str) -> None:
    """rows/s above, tok/s below (this job's answer tokens and each server's own gen throughput):
    one panel and one y axis per unit, on a shared time axis.

    One figure with two panels rather than two figures: every plotly figure costs the page a fixed
    ~50 ms to build and validate, and this chart is redrawn every 2 s.  uPlot draws it
    (ui/linechart.py), a chart per panel, their x axes zoomed and hovered together."""
    if len(history) < 2:
        st.caption("The speed chart starts with the second progress snapshot.")
        return
    starts = history.run_starts()
    # SpecForge's files give no token counts: its chart is rows/s alone
    panels = 2 if servers or any(v is not None for v in history.values["tok_s"]) else 1
    fig = charts.figure("Speed", height=380 if panels == 2 else 300)
    fig.set_subplots(rows=panels, cols=1, shared_xaxes=True, vertical_spacing=0.1)
    _series(fig, "rows/s (completed)", history.t, history.values["req_s"], fmt=",.2f", breaks=starts,
            colour=ROWS_COLOUR)
    if panels == 1:
        servers = {}
    else:
        _series(fig, "answer tok/s (this job)", history.t, history.values["tok_s"], fmt=",.1f", breaks=starts,
                row=2, colour=TOK_COLOUR)
    lo = history.t[0]
    free = [c for c in charts.PALETTE if c not in (ROWS_COLOUR, TOK_COLOUR)]
    for i, (name, (ts, ys)) in enumerate(servers.items()):
        pts = [(t, y) for t, y in zip(ts, ys) if t is not None and t >= lo]
        if pts:
            label = f"{name} gen throughput (server log)"
            colour = charts.colour_for(label)
            if colour in (ROWS_COLOUR, TOK_COLOUR):  # never the colour of this job's own series
                colour = free[i % len(free)]
            _series(fig, label, [p[0] for p in pts], [p[1] for p in pts], fmt=",.1f", dash="dot", row=2,
                    colour=colour)
    # each axis its own unit, titled in full, with a few round ticks from zero
    fig.update_yaxes(title_text="rows/s", rangemode="tozero", nticks=4, row=1, col=1)
    if panels == 2:
        fig.update_yaxes(title_text="tok/s", rangemode="tozero", nticks=6, row=2, col=1)
    fig.update_layout(margin=dict(l=60))
    fig.update_xaxes(type="date")
    fig.update_xaxes(rangeselector=dict(buttons=charts.RANGE_BUTTONS, x=0, xanchor="left", y=1.02,
                                        yanchor="bottom"), row=1, col=1)
    charts.mark_restarts(fig, starts, label="resume")
    charts.legend_below(fig)
    fig.update_layout(legend=dict(y=-0.25), margin=dict(b=70))
    line_chart(fig, key=f"{key}-speed")


def length_histogram(hist: dict[str, Any] | None, *, unit: str, key: str) -> None:
    edges, counts = (hist or {}).get("edges") or [], (hist or {}).get("counts") or []
    if not counts or len(edges) != len(counts) + 1 or not sum(counts):
        st.caption(f"Answer lengths: none yet ({unit}).")
        return
    last = max(i for i, c in enumerate(counts) if c) + 1
    # the last bin also holds every answer above its upper edge (the job's histogram and SpecForge's)
    labels = [f"≥ {edges[i]:,}" if i == len(counts) - 1 else f"{edges[i]:,}-{edges[i + 1]:,}" for i in range(last)]
    # the layout checked once per unit (charts.white_figure), not on every refresh
    fig = charts.white_figure(height=300, margin=dict(l=10, r=10, t=40, b=10),
                              title=dict(text=f"Answer lengths ({unit})", font=dict(size=14)),
                              xaxis_title=unit, yaxis_title="rows", bargap=0.05)
    fig.add_trace(go.Bar(x=labels, y=counts[:last], marker_color=charts.colour_for("answer length"),
                         hovertemplate="%{x} " + unit + ": %{y:,} rows<extra></extra>"))
    line_chart(fig, key=f"{key}-hist")


def error_table(errors: dict[str, Any] | None, *, examples: bool = True) -> None:
    """Failures by class with their counts; ``examples``: the text of one failure each (it may quote a
    prompt or an answer, so only for a session that may see them)."""
    if not errors:
        st.caption("No failed row.")
        return
    rows = sorted(((k, v.get("count", 0), str(v.get("example") or "")) for k, v in errors.items()),
                  key=lambda r: -r[1])
    st.markdown("**What went wrong** (permanent failures by class)")
    if not examples:
        st.markdown(fmt.data_markdown("\n".join(f"- {cls}: {fmt.count(n)} row{'s' if n != 1 else ''}"
                                                 for cls, n, _ in rows)))
        return
    for cls, n, example in rows:
        with st.expander(fmt.data_markdown(f"{cls}: {fmt.count(n)} row{'s' if n != 1 else ''}")):
            text_block(example[:2000] or "no example kept")


SERVER_STATE = {"up": ":green[● up]", "waiting": ":orange[◐ waiting]", "down": ":red[✕ down]"}


def server_lines(snap: dict[str, Any], *, ended: bool = False, fleet=None) -> None:
    """One line per server of the run (lines wrap, so nothing is cut at 1024 px); for a run that has
    ended, its counts without a state, requests in flight or rates."""
    servers = snap.get("servers") or {}
    if not servers:
        return
    st.markdown("**Servers**")
    for url, s in servers.items():
        name = f"**{s['name']}** · {url}" if s.get("name") else f"**{url}**"
        state = SERVER_STATE.get(str(s.get("state")), str(s.get("state") or fmt.NA))
        rate = s.get("req_s")
        counts = [f"{fmt.count(_num(s.get('done')))} done", f"{fmt.count(_num(s.get('failed')))} failed",
                  f"{fmt.count(_num(s.get('retries')))} retries"]
        if ended:
            bits = [name, *counts]
        else:
            bits = [name, state, f"{fmt.count(_num(s.get('in_flight')))} in flight", *counts,
                    f"{rate:,.2f} rows/s" if isinstance(rate, (int, float)) else "rows/s N/A",
                    fmt.tok_s(s.get("tok_s"))]
        st.markdown(fmt.data_markdown(" · ".join(bits)))
        if s.get("last_error"):
            st.caption(fmt.data_markdown(f"last error: {s['last_error']}"))
        behind = (snap.get("behind") or {}).get(url)
        if behind:
            behind_lines(behind, ended=ended, fleet=fleet)


def behind_lines(behind: dict[str, Any], *, ended: bool = False, fleet=None) -> None:
    """Each server behind a router as the router counts it: completed and failed requests, its rate over
    the last 30 s and its health (``behind`` of the progress log, from the router's exporter)."""
    workers = behind.get("workers") or {}
    names = fleet.names() if fleet is not None else []
    for wurl, w in sorted(workers.items()):
        name = _server_named(wurl, fleet, names) if names else None
        label = f"**{name}** · {wurl}" if name else wurl
        health = {True: ":green[● healthy]", False: ":red[✕ unhealthy]"}.get(w.get("healthy"), "health N/A")
        rate = w.get("req_s")
        bits = [f"↳ {label}", *([] if ended else [health]), f"{fmt.count(_num(w.get('done')))} done",
                f"{fmt.count(_num(w.get('failed')))} failed"]
        if not ended:
            bits.append(f"{rate:,.2f} req/s" if isinstance(rate, (int, float)) else "req/s N/A")
        st.markdown(fmt.data_markdown(" · ".join(bits)))
    if behind.get("error"):
        st.caption(fmt.data_markdown(f"the router's counts could not be read: {behind['error']}"))
    elif workers:
        read = behind.get("read_at")
        st.caption("behind the router, as its exporter counts them (all requests it routed, this job's and "
                   "others')" + (f" · read {fmt.age(time.time() - read)}" if read else ""))


def _answer(record: dict[str, Any] | None) -> tuple[str | None, str | None]:
    """(the last assistant answer, its reasoning) of a record."""
    for t in reversed((record or {}).get("conversations") or []):
        if isinstance(t, dict) and t.get("role", t.get("from")) in ("assistant", "gpt"):
            c = t.get("content", t.get("value"))
            return (c if isinstance(c, str) else None), t.get("reasoning_content")
    return None, None


def _show(text: str, raw: bool, limit: int) -> None:
    if len(text) > limit:
        st.caption(f"first {limit:,} of {len(text):,} characters")
        text = text[:limit]
    if raw:
        text_block(text)
    else:
        st.markdown(fmt.data_markdown(text))  # an image in an answer is shown as text, never fetched


def sample_columns(row: dict[str, Any], original: dict[str, Any] | None, *, original_why: str = "",
                   raw: bool = False) -> None:
    """Prompt, original answer and regenerated answer side by side (as Markdown, or ``raw`` text)."""
    prompt = [t for t in turns(original or row) if t["role"] != "assistant"]
    regen = row.get("regen") or {}
    meta = [f"id `{row.get('id', fmt.NA)}`"]
    if regen.get("dataset"):
        meta.append(f"dataset {regen['dataset']}")
    if regen.get("server"):
        meta.append(f"server {regen['server']}")
    if regen.get("completion_tokens") is not None:
        meta.append(f"{fmt.count(regen.get('completion_tokens'))} answer tokens")
    if regen.get("finish_reason"):
        meta.append(f"finish: {regen['finish_reason']}")
    st.caption(fmt.data_markdown(" · ".join(meta)))
    heads = st.columns(3)
    for col, title in zip(heads, ("Prompt", "Original answer", "Regenerated answer")):
        col.markdown(f"**{title}**")
    # each text scrolls in its own box: a long answer does not push the page down
    c1, c2, c3 = (col.container(height=520, border=False) for col in st.columns(3))
    with c1:
        for t in prompt:
            st.caption(fmt.data_markdown(t["role"]))
            _show(t["content"], raw, 6000)
    with c2:
        ans, _ = _answer(original)
        if ans is None:
            st.caption(original_why or "The input record has no assistant answer (a prompt-only row).")
        else:
            _show(ans, raw, 12000)
    with c3:
        ans, reasoning = _answer(row)
        if reasoning:
            with st.expander("reasoning"):
                _show(str(reasoning), raw, 12000)
        if ans is None:
            st.caption(fmt.NA)
        else:
            _show(ans, raw, 12000)
