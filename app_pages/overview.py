"""Overview: the answer at first sight — the pipeline (regenerate → train → deploy → benchmark, where each stage
stands), how far each regeneration is, whether speculation pays on each server (and a relaunch a click away),
the active alerts, the GPUs, the training run's step, loss and predicted accept length, the newest benchmark
verdict and what the jobs cost; every stage and tile opens its page.  Everything fits the first screen at
1024x768: more than three alerts show the two most severe and "+K more", more than two servers a compact
block each (those in trouble first) and "+K more" beyond three."""

from __future__ import annotations

import functools
import html
import logging
import re
import sqlite3
import time

import streamlit as st

from backend.bench import baseline
from ui import fmt
from ui import overview_data as data
from ui import overview_pipeline as pipe
from ui import overview_train as train
from ui.auth import control_lock, data_lock, live_fragment
from ui.bench import data as bench_data
from ui.bench import stored as bench_stored
from ui.components import page_header
from ui.context import runtime
from ui.regen.blocks import STATE_TEXT

log = logging.getLogger(__name__)
REFRESH_S = 2  # progress and servers
SLOW_REFRESH_S = 5  # alerts, GPUs, training, cost
LEVEL_COLOUR = {"good": "green", "par": "gray", "warn": "orange", "bad": "red", "none": "gray"}
SERVERS_PAGE, REGEN_PAGE = "app_pages/servers.py", "app_pages/regeneration.py"
TRAIN_PAGE, BENCH_PAGE = "app_pages/training.py", "app_pages/benchmarks.py"
PROCESSES_PAGE, GPUS_PAGE = "app_pages/processes.py", "app_pages/gpus.py"
# the tiles are dense: less room above the title than a page of details, smaller tile headings
COMPACT_CSS = """<style>
[data-testid="stMainBlockContainer"] { padding-top: 3.7rem !important; padding-bottom: 1rem !important; }
.st-key-ov-main h1 { font-size: 1.9rem; padding-top: 0; padding-bottom: 0; }
.st-key-ov-main [data-testid="stPageLink"] a { margin: 0; line-height: 1.35; }
.st-key-ov-main [data-testid="stVerticalBlock"] { gap: 0.45rem; }
.st-key-ov-main [data-testid="stMarkdownContainer"] p { margin-bottom: 0.1rem; }
.st-key-ov-main [data-testid="stPageLink"] p, .st-key-ov-cost-head p { font-weight: 600; font-size: 1rem; }
.st-key-ov-cost-head { padding: 0.15rem 0 0.1rem 0.1rem; }
.st-key-ov-regen, .st-key-ov-servers, .st-key-ov-alerts, .st-key-ov-gpus, .st-key-ov-training, .st-key-ov-bench,
.st-key-ov-cost { padding: 0.5rem 0.85rem 0.7rem 0.85rem !important; }
[class*="st-key-ov-srv-"], [class*="st-key-ov-srv-"] [data-testid="stVerticalBlock"] { gap: 0.1rem !important; }
[class*="st-key-ov-srv-"]:not(.st-key-ov-srv-0) { border-top: 1px solid rgba(128,128,128,0.2); padding-top: 0.35rem;
                                                 margin-top: 0.3rem; }
[class*="st-key-ov-row-"] { flex-wrap: nowrap !important; }
[class*="st-key-ov-row-"] > div:first-child { min-width: 0; flex: 1 1 0 !important; }
.st-key-ov-main [class*="st-key-ov-more-"] [data-testid="stPageLink"] p { font-weight: 400; font-size: 0.92rem;
  white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.ov-cost { font-size: 0.92rem; line-height: 1.5; }
.ov-cost .ov-why { text-decoration: underline dotted rgba(128,128,128,0.8); text-underline-offset: 3px; cursor: help; }
.ov-gpus { display: grid; grid-template-columns: repeat(4, minmax(46px, 64px)); gap: 4px; }
.ov-gpu { border-radius: 4px; padding: 1px 3px; font-size: 0.68rem; line-height: 1.1;
          border: 1px solid rgba(128,128,128,0.35); }
.ov-gpu b { font-size: 0.82rem; }
.ov-bar { height: 4px; background: rgba(128,128,128,0.25); border-radius: 2px; margin-top: 2px; }
.ov-bar span { display: block; height: 4px; border-radius: 2px; background: #2563eb; }
.st-key-ov-pipe { gap: 0 !important; flex-wrap: nowrap !important; }
[class*="st-key-ov-stage-"] { position: relative; flex: 1 1 0 !important; min-width: 0; margin-left: -9px;
  padding: 0.3rem 0.9rem 0.35rem 1.35rem !important; gap: 0 !important;
  clip-path: polygon(0 0, calc(100% - 14px) 0, 100% 50%, calc(100% - 14px) 100%, 0 100%, 14px 50%); }
.st-key-ov-stage-regen { margin-left: 0; padding-left: 0.75rem !important;
  clip-path: polygon(0 0, calc(100% - 14px) 0, 100% 50%, calc(100% - 14px) 100%, 0 100%); }
.st-key-ov-pipe [data-testid="stPageLink"] a { padding: 0; min-height: 0; position: static; }
.st-key-ov-pipe [data-testid="stTooltipHoverTarget"] a::after { content: ""; position: absolute; inset: 0; }
.st-key-ov-main .st-key-ov-pipe [data-testid="stPageLink"] p { font-size: 0.86rem; white-space: nowrap; }
.st-key-ov-pipe [data-testid="stElementContainer"], .st-key-ov-pipe [data-testid="stPageLink"],
.st-key-ov-pipe [data-testid="stPageLink"] > div, .st-key-ov-pipe [data-testid="stTooltipIcon"],
.st-key-ov-pipe [data-testid="stTooltipHoverTarget"] { position: static !important; }
.ov-stage-state { font-size: 0.8rem; font-weight: 600; line-height: 1.25; }
.ov-stage-fig { font-size: 0.76rem; line-height: 1.25; }
.ov-stage-state, .ov-stage-fig { white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.ov-stage-bar { height: 3px; background: rgba(128,128,128,0.25); border-radius: 2px; margin: 1px 0 1px 0; }
.ov-stage-bar span { display: block; height: 3px; border-radius: 2px; }
</style>"""

rt = runtime()

main = st.container(key="ov-main")
with main:
    page_header("Overview", "Progress, speculation on each server, alerts, GPUs and cost: each tile opens its page.")
    st.html(COMPACT_CSS)


@st.cache_resource(show_spinner=False)
def _stored_baselines(key: str, _store) -> baseline.StoredBaselines:
    return baseline.StoredBaselines(_store)


def _guarded(fn):
    """A tile that meets a damaged or unwritable state store says so in red, as the frame does for a page
    (a tile's refresh runs without the frame around it), never with a traceback."""
    @functools.wraps(fn)
    def tile(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except sqlite3.DatabaseError as exc:
            log.warning("the Overview could not read the state store: %s", exc)
            st.error(f"This page could not read the state store: {exc}" if not data_lock(rt) else
                     "This page could not read the state store; an operator can see why above.",
                     icon=":material/error:")
    return tile


def _help(text: str) -> str:
    """Text for a Markdown hover (a link title): no quotes or line breaks to end it."""
    return text.replace('"', "'").replace("\n", " ")


KEEP_BREAKS = re.compile(r"( · | (?=\())")  # where a kept text may still break: between its parts


def _keep(text: str) -> str:
    """``text``'s phrases each kept on one line (a figure and its unit, a state word): a line may break only
    between them, at ` · ` or before a parenthesis."""
    return "".join(p if p in (" · ", " ") else p.replace(" ", "\u00a0") for p in KEEP_BREAKS.split(text))


# -- regeneration --------------------------------------------------------------------------------------------


def _regen_line(t: data.RegenTile) -> None:
    if t.state == "no news":
        age = fmt.duration(time.time() - t.snapshot_t) if t.snapshot_t else fmt.NA
        state = f":orange[◐ no new snapshot for {age}] (a run followed by its files)"
    else:
        state = STATE_TEXT.get(t.state, t.state.upper() if t.ended else t.state)
    st.markdown(fmt.data_markdown(f"**{t.name}** · ") + state)
    if t.fraction is not None:
        text = (f"{fmt.count(t.asked)} / {fmt.count(t.to_ask)} rows ({fmt.pct(t.fraction * 100)})"
                + (f" · {fmt.count(t.failed)} failed" if t.failed else ""))
        st.progress(t.fraction, text=text)
    else:
        st.caption("counting the rows of the inputs…" if t.to_ask is None else "no rows to ask")
    if not t.ended:  # two lines, the same at any width: the ETA band with its point, then the rates
        rate = f"{t.rate:,.2f} rows/s" if t.rate is not None else f"rows/s {fmt.NA}"
        tok = fmt.tok_s(t.tok_s) if t.tok_s is not None else f"tok/s {fmt.NA}"
        st.markdown(f"**{_keep(data.eta_text(t.eta))}**", help=t.eta.basis if t.eta is not None else None)
        st.markdown(f"{_keep(rate)} · {_keep(tok)}")


@live_fragment(run_every=REFRESH_S)
@_guarded
def regen_tile() -> None:
    st.page_link(REGEN_PAGE, label="Regeneration", icon=":material/autorenew:",
                 help="the Regeneration page: the running job's controls, charts, failures and samples")
    tiles, last = data.regen_tiles(rt)
    if not tiles and last is None:
        st.caption("No regeneration yet: start one on the Regeneration page.")
        return
    for t in tiles[:3]:
        _regen_line(t)
    if len(tiles) > 3:
        st.caption(f"and {len(tiles) - 3} more running: see the Regeneration page")
    if not tiles and last is not None:
        st.caption("None running; the newest:")
        _regen_line(last)


# -- servers ---------------------------------------------------------------------------------------------------


def _server_line(i: int, t: data.ServerTile, lock: str) -> None:
    """One server, the same lines at any width: its name on one line (cut with an ellipsis, whole on hover)
    beside its Relaunch… link; then, one line each, its state · speculation, accept_len, tok/s against the
    baseline, and the verdict."""
    spec = t.algorithm or "no speculation"
    with st.container(key=f"ov-srv-{i}"):
        _name_row(t, lock)
        acc = fmt.accept_len(t.accept_len)
        acc_colour = LEVEL_COLOUR.get(t.accept_level, "gray")
        if t.accept_level in ("good", "warn", "bad"):
            acc = f":{acc_colour}[{acc}]"
        tok = fmt.NA if t.tok_s is None else f"{t.tok_s:,.1f}"
        base = fmt.NA if t.baseline_tok_s is None else f"{t.baseline_tok_s:,.1f}"
        v = t.verdict
        words = _keep(data.verdict_words(v))
        colour = LEVEL_COLOUR.get(v.level, "gray")
        verdict = f":{colour}[**{words}**]" if v.level in ("good", "warn", "bad") else f"**{words}**"
        state = _keep(t.badge.markdown()) + " · " + _keep(fmt.data_markdown(spec))
        st.markdown(f"{state}  \naccept_len **{acc}** {_keep(f'(lifetime {fmt.accept_len(t.lifetime)})')}  \n"
                    f"{_keep(t.tok_s_label)} **{tok}** {_keep(f'vs baseline {base}')}  \n{verdict}",
                    help=_help(data.verdict_help(v, t.baseline_text)))
        for note in t.notes:
            st.markdown(f":red[✕ {fmt.data_markdown(note)}]")


FULL_SERVERS = 2  # up to this many servers: each with its four lines
COMPACT_SERVERS = 3  # more: a compact block each for this many (those needing attention first), then "+K more"


def _attention(t: data.ServerTile) -> int:
    """0: in trouble (red, or its own alert), 1: running, 2: the rest; the order of the compact blocks."""
    if t.notes or t.badge.colour == "red":
        return 0
    return 1 if t.live else 2


def _compact_line(i: int, t: data.ServerTile, lock: str) -> None:
    """One server in two lines: its name beside its Relaunch… link, then its state, accept_len and verdict on one
    line (cut with an ellipsis at the tile's edge; the whole with the tok/s and baseline on hover)."""
    with st.container(key=f"ov-srv-{i}"):
        _name_row(t, lock)
        v = t.verdict
        short = v.badge.split(" · ")[0] if v.verdict != "none" else "no verdict"
        colour = LEVEL_COLOUR.get(v.level, "gray")
        verdict = f":{colour}[**{short}**]" if v.level in ("good", "warn", "bad") else f"**{short}**"
        acc = fmt.accept_len(t.accept_len)
        tok = fmt.NA if t.tok_s is None else f"{t.tok_s:,.1f}"
        base = fmt.NA if t.baseline_tok_s is None else f"{t.baseline_tok_s:,.1f}"
        hover = (f"{t.algorithm or 'no speculation'}; {t.tok_s_label} {tok} vs baseline {base}; "
                 + data.verdict_help(v, t.baseline_text) + "".join(f" ✕ {n}" for n in t.notes))
        st.markdown(f"{_keep(t.badge.markdown())} · accept_len **{acc}** · {verdict}", wrap=False, width="stretch",
                    help=_help(hover))


def _name_row(t: data.ServerTile, lock: str) -> None:
    """The server's name on one line (cut with an ellipsis, whole on hover) beside its Start…/Relaunch… link."""
    row = st.container(horizontal=True, vertical_alignment="center", gap="small", wrap=False,
                       key=f"ov-row-{t.name}")
    with row:
        st.markdown(f"**{fmt.data_markdown(t.name)}**", wrap=False, width="stretch")
        # a link to the Servers page on this server with its Start…/Relaunch… panel open (the page reads both from
        # its query, as from any link): the browser changes page as from the sidebar.  A button that called
        # st.switch_page from this live panel's run now and then made the browser drop the session as the
        # Servers page began ("Bad delta path index 7 (should be between [0, 1])").
        with st.container(key=f"ov-relaunch-{t.name}", width="content"):
            st.page_link(SERVERS_PAGE, label="Relaunch…" if t.live else "Start…", icon=":material/rocket_launch:",
                         query_params={"server": t.name, "panel": "relaunch"}, disabled=bool(lock),
                         help=lock or f"the Servers page on {t.name} with its {'relaunch' if t.live else 'start'} "
                                      "panel open (edit, preflight, confirm)")


@live_fragment(run_every=REFRESH_S)
@_guarded
def servers_tile() -> None:
    names = rt.fleet.names()
    st.page_link(SERVERS_PAGE, label=f"Servers ({len(names)})" if len(names) > FULL_SERVERS else "Servers",
                 icon=":material/dns:", help="the Servers page: live accept_len and tok/s, relaunch, preflight and log")
    if not names:
        st.caption("No server yet: add a `[[server]]` entry to the workspace file.")
        return
    stored = _stored_baselines(f"{rt.store.path}:{id(rt.store)}", rt.store)
    lock = control_lock(rt)
    now = time.time()
    tiles = [data.server_tile(rt, name, stored, now=now) for name in names]
    if len(tiles) <= FULL_SERVERS:
        for i, t in enumerate(tiles):
            _server_line(i, t, lock)
    else:  # those needing attention first, then the running ones, each in the workspace's order
        tiles = sorted(tiles, key=_attention)
        for i, t in enumerate(tiles[:COMPACT_SERVERS]):
            _compact_line(i, t, lock)
        hidden = tiles[COMPACT_SERVERS:]
        if hidden:
            with st.container(key="ov-more-servers"):
                st.page_link(SERVERS_PAGE, label=f"+{len(hidden)} more: " + ", ".join(t.name for t in hidden),
                             icon=":material/more_horiz:", help="the Servers page: every server's figures and controls")
    st.caption(f"updated {time.strftime('%H:%M:%S', time.localtime(now))} · every {REFRESH_S} s")


# -- alerts, GPUs, training, benchmarks, cost ---------------------------------------------------------------

ALERT_CHARS = 160  # a longer title is cut here (and by the tile's edge, with an ellipsis): the whole on hover
ALERTS_SHOWN = 3  # at most this many rows: the most severe first; beyond, two and a "+K more" link
OPEN_LINK = re.compile(r"\s*\(\[open\]\([^)]*\)\)\s*$")  # the alerts engine's own link: the tile is the link
ALERT_MARK = {"error": ":red[● error]", "warning": ":orange[▲ warning]", "info": ":blue[○ info]"}
SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}


def _severity(alert) -> str:
    level = getattr(alert, "severity", "warning")
    return level if level in SEVERITY_ORDER else "warning"


@live_fragment(run_every=SLOW_REFRESH_S)
@_guarded
def alerts_tile() -> None:
    alerts = list(rt.active_alerts())
    st.page_link(PROCESSES_PAGE, label=f"Alerts ({len(alerts)})", icon=":material/notifications:",
                 help="the Processes page's Alerts section: acknowledge, mute, notification channels")
    if not alerts:
        st.caption(":green[✓ no active alert]")
        return
    alerts.sort(key=lambda a: SEVERITY_ORDER[_severity(a)])
    shown = alerts if len(alerts) <= ALERTS_SHOWN else alerts[:ALERTS_SHOWN - 1]
    for a in shown:
        level = _severity(a)
        title = OPEN_LINK.sub("", str(getattr(a, "title", a))).strip()
        short = title if len(title) <= ALERT_CHARS else title[:ALERT_CHARS - 1].rstrip() + "…"
        # one line each, cut at the tile's edge, so the tile keeps its height: the whole text on hover
        message = getattr(a, "message", None)
        extra = message if isinstance(message, str) and message and message != title else ""
        st.markdown(f"{ALERT_MARK.get(level, ALERT_MARK['warning'])} {fmt.data_markdown(short)}", wrap=False,
                    width="stretch", help=_help(title + (f" — {extra}" if extra else "")))
    if len(alerts) > len(shown):
        more = alerts[len(shown):]
        counts = [f"{n} {sev}{'s' if n > 1 else ''}" for sev in SEVERITY_ORDER
                  if (n := sum(_severity(a) == sev for a in more))]
        with st.container(key="ov-more-alerts"):
            st.page_link(PROCESSES_PAGE, label=f"+{len(more)} more ({', '.join(counts)})",
                         icon=":material/more_horiz:",
                         help="every active alert on the Processes page, with acknowledge and mute")


def _gpu_html(cells: list[data.GpuCell]) -> str:
    out = []
    for c in cells:
        util = "N/A" if c.util is None else f"{c.util:.0f}%"
        mem = c.mem_pct
        width = 0 if mem is None else max(0.0, min(100.0, mem))
        colour = "#dc2626" if mem is not None and mem >= 95 else "#2563eb"
        title = (f"GPU {c.index}: utilisation {util}, memory {fmt.gib(c.mem_used)} of {fmt.gib(c.mem_total)}, "
                 f"power {'N/A' if c.power_w is None else f'{c.power_w:.0f} W'}; {c.jobs}")
        if c.lost:
            title = f"GPU {c.index}: lost (fallen off the bus or not answering)"
        out.append(f'<div class="ov-gpu" title="{html.escape(title)}">GPU {c.index}<br><b>{util}</b>'
                   f'<div class="ov-bar"><span style="width:{width:.0f}%;background:{colour}"></span></div></div>')
    return '<div class="ov-gpus">' + "".join(out) + "</div>"  # a grid of rows of four


@live_fragment(run_every=SLOW_REFRESH_S)
@_guarded
def gpus_tile() -> None:
    st.page_link(GPUS_PAGE, label="GPUs", icon=":material/memory:",
                 help="the GPUs page: utilisation, memory, power, who holds each GPU. Here: each GPU's utilisation, "
                      "its bar the memory used (red from 95 %); hover a GPU for who holds it")
    cells, why, _t = data.gpu_cells(rt)
    if not cells:
        st.caption(f"No GPU reading: {why}")
        return
    st.html(_gpu_html(cells))


def _newest_verdict() -> pipe.NewestVerdict:
    """The newest speculative result's verdict, computed again only when the stored results change."""
    results = bench_stored.results(rt.store)
    key = (len(results), results[0].id if results else None)
    cached = st.session_state.get("ov-bench-verdict")
    if cached is None or cached[0] != key:
        cached = (key, pipe.newest_verdict(rt, results))
        st.session_state["ov-bench-verdict"] = cached
    return cached[1]


def _bench_lines() -> None:
    nv = _newest_verdict()
    if not nv.results:
        st.caption("No result yet: run one on the Benchmarks page.")
        return
    newest, v = nv.newest, nv.verdict
    if newest is None:
        st.markdown(f"{fmt.count(nv.results)} results, all without speculation")
        return
    word = bench_data.verdict_text(v) or f"no verdict ({fmt.NA})"
    colour = LEVEL_COLOUR.get(v.level, "gray") if v is not None else "gray"
    ratio = f"{v.ratio:.2f}× · " if v is not None and v.ratio is not None else ""
    # two lines: which run and load, then its verdict
    st.markdown("Newest " + fmt.data_markdown(f"**#{newest.id}** {bench_data.server_of(newest)} · ")
                + _keep(fmt.data_markdown(bench_data.load_short(newest))))
    st.markdown(f":{colour}[**{_keep(ratio + word)}**]", help=_help("Verdict " + bench_data.VERDICT_HELP))


def _train_figures() -> train.TrainFigures | None:
    name = train.focus_run(rt)
    if name is None:
        return None
    try:
        return train.train_figures(rt, name)
    except OSError as exc:  # the log cannot be read: the run is shown without figures
        log.warning("the Overview could not read the training log of %s: %s", name, exc)
        return None


def _train_lines(figs: train.TrainFigures | None, runs: int) -> None:
    """The current (else latest) run: its name and state, then its step and loss, then the predicted accept
    length, as the Training page's key figures give them."""
    if figs is None:
        st.caption("No training run in this workspace: add one on the Training page." if not runs
                   else "The run's log cannot be read: see the Training page.")
        return
    others = f" (+{runs - 1} more)" if runs > 1 else ""
    st.markdown(fmt.data_markdown(f"**{figs.name}**{others} · ") + _keep(figs.badge.markdown()))
    if not figs.started:
        st.caption(f"no figures yet: {fmt.NA} ({figs.why.split(':')[0]})", help=_help(figs.why))
        return
    steps, pred = train.figures_text(figs)
    reading = f" · reading the log {fmt.pct(figs.reading * 100)}" if figs.reading is not None else ""
    st.markdown(_keep(steps) + reading, help=_help(figs.why) if figs.why else None)
    st.markdown(_keep(pred), help=_help(
        f"1 + a0 + a0·a1 + … with a_i = acc_i (greedy serving) of step {fmt.count(figs.predicted_step)}, over the "
        f"first {train.DEFAULT_STEPS} draft positions, as the Training page shows it by default: a prediction from "
        "training metrics, "
        "not a measurement" if figs.predicted is not None else f"N/A: {figs.why}"))


COST_HELP = ("GPU-hours = the job's GPUs × its hours (a regeneration job: its servers' GPUs; a benchmark: its "
             "server's); energy (kWh) from NVML's energy counter over that time, else the GPUs' power readings, where "
             "they cover it (the whole GPUs' draw). N/A: not known; hover a dotted figure for why.")


def _cost_lines() -> list[data.CostLine]:
    now = time.time()
    lines = [data.cost_line("Regeneration", data.regen_costs(rt, now=now), none="no run yet"),
             data.cost_line("Training", list(data.train_costs(rt, now=now).values()), none="no run in the workspace")]
    results = bench_stored.results(rt.store)
    key = (len(results), results[0].id if results else None)
    cached = st.session_state.get("ov-bench-cost")
    if cached is None or cached[0] != key:  # each result's cost reads its power history once
        cached = (key, data.cost_line("Benchmarks", list(data.bench_costs(rt, results).values()),
                                      none="no result yet"))
        st.session_state["ov-bench-cost"] = cached
    lines.append(cached[1])
    return lines


@live_fragment(run_every=SLOW_REFRESH_S)
@_guarded
def training_tile() -> None:
    figs = _train_figures()
    focus = figs.name if figs is not None else None
    st.page_link(TRAIN_PAGE, label="Training", icon=":material/model_training:",
                 query_params={"run": focus} if focus else None,
                 help="the Training page" + (f" on {focus}" if focus else "") + ": curves, checkpoints, deploy")
    _train_lines(figs, len(rt.train.names()))


@live_fragment(run_every=SLOW_REFRESH_S)
@_guarded
def bench_tile() -> None:
    st.page_link(BENCH_PAGE, label="Benchmarks", icon=":material/speed:",
                 help="the Benchmarks page: every result against its baseline at the same load")
    _bench_lines()


@live_fragment(run_every=SLOW_REFRESH_S)
@_guarded
def cost_tile() -> None:
    with st.container(key="ov-cost-head"):
        st.markdown(":material/bolt: Cost", help=_help(COST_HELP))
    st.html(_cost_html(_cost_lines()))


def _cost_html(lines: list[data.CostLine]) -> str:
    """One row per kind of job, one line each at 1024 px: its figures, or N/A and why in a few words; the whole
    reason on hover of the dotted part (a help icon would not fit beside it)."""
    rows = []
    for ln in lines:
        text, why = data.cost_parts(ln)
        shown = html.escape(_keep(text))
        shown = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", shown)
        if why:
            shown = f'<span class="ov-why" title="{html.escape(why)}">{shown}</span>'
        rows.append(f"<div><b>{html.escape(ln.what)}</b> {shown}</div>")
    return '<div class="ov-cost">' + "".join(rows) + "</div>"


# -- the pipeline ----------------------------------------------------------------------------------------------


def _stages() -> list[pipe.Stage]:
    tiles, last = data.regen_tiles(rt)
    return [pipe.regen_stage(tiles, last), pipe.train_stage(_train_figures()),
            pipe.deploy_stage(rt, list(rt.train.names())), pipe.bench_stage(pipe.running_bench(rt), _newest_verdict())]


@live_fragment(run_every=SLOW_REFRESH_S)
@_guarded
def pipeline_strip() -> None:
    """Regenerate → train → deploy → benchmark: four connected stages, each with where it stands and its figure;
    a stage opens its page on its job, run or tab."""
    stages = _stages()
    st.html("<style>" + "".join(f".st-key-ov-stage-{s.key} {{ background: {pipe.fill(s)}; }}" for s in stages)
            + "</style>")
    with st.container(horizontal=True, gap=None, key="ov-pipe"):
        for i, s in enumerate(stages):
            with st.container(key=f"ov-stage-{s.key}", gap=None):
                st.page_link(s.page, label=f"{i + 1} · {s.title}", query_params=s.query or None,
                             help=f"{s.title}: {s.hover}")
                st.html(pipe.stage_html(s))


with main:
    pipeline_strip()
    left, right = st.columns([11, 9], gap="medium")  # the right column's lines fit one line each at 1024 px
    with left:
        with st.container(border=True, key="ov-regen"):
            regen_tile()
        with st.container(border=True, key="ov-servers"):
            servers_tile()
    with right:
        with st.container(border=True, key="ov-alerts"):
            alerts_tile()
        with st.container(border=True, key="ov-gpus"):
            gpus_tile()
        with st.container(border=True, key="ov-training"):
            training_tile()
        with st.container(border=True, key="ov-bench"):
            bench_tile()
        with st.container(border=True, key="ov-cost"):
            cost_tile()
