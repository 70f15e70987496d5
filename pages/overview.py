"""Overview: the answer at first sight — how far each regeneration is, whether speculation pays on each server
(and a relaunch a click away), the active alerts, the GPUs and what the jobs cost; every tile opens its page."""

from __future__ import annotations

from ui.context import require_frame  # first: a page run without the frame goes to it before the imports below

require_frame(__file__)

import functools  # noqa: E402
import html  # noqa: E402
import logging  # noqa: E402
import re  # noqa: E402
import sqlite3  # noqa: E402
import time  # noqa: E402

import streamlit as st  # noqa: E402

from backend.bench import baseline  # noqa: E402
from state.bench import BenchStore  # noqa: E402
from ui import fmt  # noqa: E402
from ui import overview_data as data  # noqa: E402
from ui.auth import control_lock, data_lock, live_fragment  # noqa: E402
from ui.bench import charts as bench_charts  # noqa: E402
from ui.bench import data as bench_data  # noqa: E402
from ui.components import page_header  # noqa: E402
from ui.context import runtime  # noqa: E402
from ui.regen.blocks import STATE_TEXT  # noqa: E402

log = logging.getLogger(__name__)
REFRESH_S = 2  # progress and servers
SLOW_REFRESH_S = 5  # alerts, GPUs, training, cost
LEVEL_COLOUR = {"good": "green", "par": "gray", "warn": "orange", "bad": "red", "none": "gray"}
VERDICT_WORD = {"faster": "faster", "on par": "on par", "slower": "slower", "none": "no verdict"}
SERVERS_PAGE, REGEN_PAGE = "pages/servers.py", "pages/regeneration.py"
TRAIN_PAGE, BENCH_PAGE = "pages/training.py", "pages/benchmarks.py"
PROCESSES_PAGE, GPUS_PAGE = "pages/processes.py", "pages/gpus.py"
# the tiles are dense: less room above the title than a page of details, smaller tile headings
COMPACT_CSS = """<style>
[data-testid="stMainBlockContainer"] { padding-top: 3.2rem !important; padding-bottom: 1rem !important; }
.st-key-ov-main h1 { font-size: 1.9rem; padding-bottom: 0.1rem; }
.st-key-ov-main [data-testid="stVerticalBlock"] { gap: 0.45rem; }
.st-key-ov-main [data-testid="stMarkdownContainer"] p { margin-bottom: 0.1rem; }
.st-key-ov-main [data-testid="stPageLink"] p { font-weight: 600; font-size: 1.05rem; }
.ov-gpus { display: flex; flex-wrap: wrap; gap: 4px; }
.ov-gpu { width: 46px; border-radius: 4px; padding: 1px 3px; font-size: 0.68rem; line-height: 1.1;
          border: 1px solid rgba(128,128,128,0.35); }
.ov-gpu b { font-size: 0.82rem; }
.ov-bar { height: 4px; background: rgba(128,128,128,0.25); border-radius: 2px; margin-top: 2px; }
.ov-bar span { display: block; height: 4px; border-radius: 2px; background: #2563eb; }
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
    if not t.ended:
        rate = f"{t.rate:,.2f} rows/s" if t.rate is not None else "rows/s N/A"
        tok = fmt.tok_s(t.tok_s) if t.tok_s is not None else "tok/s N/A"
        st.markdown(f"**{data.eta_text(t.eta)}** · {rate} · {tok}",
                    help=t.eta.basis if t.eta is not None else None)


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


def _relaunch(name: str) -> None:
    """Open the Servers page on ``name`` with its Relaunch panel open."""
    st.session_state["srv-selected"] = name
    st.session_state["srv-launch-open"] = True
    st.switch_page(SERVERS_PAGE, query_params={"server": name})


def _server_line(t: data.ServerTile, lock: str) -> None:
    spec = t.algorithm or "no speculation"
    head, button = st.columns([3, 2], vertical_alignment="center")
    head.markdown(fmt.data_markdown(f"**{t.name}** · ") + t.badge.markdown() + fmt.data_markdown(f" · {spec}"))
    if button.button("Relaunch…" if t.live else "Start…", key=f"ov-relaunch-{t.name}", disabled=bool(lock),
                     help=lock or f"the Servers page on {t.name} with its relaunch panel open (edit, preflight, "
                                  "confirm)", icon=":material/rocket_launch:"):
        _relaunch(t.name)
    acc = fmt.accept_len(t.accept_len)
    acc_colour = LEVEL_COLOUR.get(t.accept_level, "gray")
    if t.accept_level in ("good", "warn", "bad"):
        acc = f":{acc_colour}[{acc}]"
    tok = fmt.NA if t.tok_s is None else f"{t.tok_s:,.1f}"
    base = fmt.NA if t.baseline_tok_s is None else f"{t.baseline_tok_s:,.1f}"
    v = t.verdict
    colour = LEVEL_COLOUR.get(v.level, "gray")
    verdict = f":{colour}[**{v.badge}**]" if v.level in ("good", "warn", "bad") else f"**{v.badge}**"
    st.markdown(f"accept_len **{acc}** (lifetime {fmt.accept_len(t.lifetime)}) · {t.tok_s_label} **{tok}** vs "
                f"baseline {base} · {verdict}",
                help=_help(f"Verdict: {v.sentence}. Baseline: {t.baseline_text}. The same figures and verdict as "
                           "the Servers page: the verdict is given only over a steady window at the baseline's load."))
    for note in t.notes:
        st.markdown(f":red[✕ {fmt.data_markdown(note)}]")


@live_fragment(run_every=REFRESH_S)
@_guarded
def servers_tile() -> None:
    st.page_link(SERVERS_PAGE, label="Servers", icon=":material/dns:",
                 help="the Servers page: live accept_len and tok/s, relaunch, preflight and log")
    names = rt.fleet.names()
    if not names:
        st.caption("No server yet: add a `[[server]]` entry to the workspace file.")
        return
    stored = _stored_baselines(f"{rt.store.path}:{id(rt.store)}", rt.store)
    lock = control_lock(rt)
    now = time.time()
    for name in names:
        _server_line(data.server_tile(rt, name, stored, now=now), lock)
    st.caption(f"updated {time.strftime('%H:%M:%S', time.localtime(now))} · every {REFRESH_S} s")


# -- alerts, GPUs, training, benchmarks, cost ---------------------------------------------------------------

ALERT_CHARS = 70
OPEN_LINK = re.compile(r"\s*\(\[open\]\([^)]*\)\)\s*$")  # the alerts engine's own link: the tile is the link
ALERT_MARK = {"error": ":red[● error]", "warning": ":orange[▲ warning]", "info": ":blue[○ info]"}


@live_fragment(run_every=SLOW_REFRESH_S)
@_guarded
def alerts_tile() -> None:
    alerts = list(rt.active_alerts())
    st.page_link(PROCESSES_PAGE, label=f"Alerts ({len(alerts)})", icon=":material/notifications:",
                 help="the Processes page's Alerts section: acknowledge, mute, notification channels")
    if not alerts:
        st.caption(":green[✓ no active alert]")
        return
    order = {"error": 0, "warning": 1, "info": 2}
    alerts.sort(key=lambda a: order.get(getattr(a, "severity", "warning"), 1))
    for a in alerts[:3]:
        level = getattr(a, "severity", "warning")
        title = OPEN_LINK.sub("", str(getattr(a, "title", a))).strip()
        short = title if len(title) <= ALERT_CHARS else title[:ALERT_CHARS - 1].rstrip() + "…"
        # one or two lines each, so the tile keeps its place in the first screen; the whole text on hover
        message = getattr(a, "message", None)
        extra = message if isinstance(message, str) and message and message != title else ""
        st.markdown(f"{ALERT_MARK.get(level, ALERT_MARK['warning'])} {fmt.data_markdown(short)}",
                    help=_help(title + (f" — {extra}" if extra else "")) if short != title or extra else None)
    if len(alerts) > 3:
        st.caption(f"and {len(alerts) - 3} more")


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
    return '<div class="ov-gpus">' + "".join(out) + "</div>"


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


def _bench_line() -> None:
    results = [r for r in BenchStore(rt.store).list() if not r.invalid]
    if not results:
        st.caption("Benchmarks: no result yet")
        return
    configured = {n: (rt.fleet.config(n).model_path, rt.fleet.config(n).served_model_name,
                      rt.fleet.config(n).baseline_tok_s) for n in rt.fleet.names()}
    pairs = bench_charts.speedups(results, configured)
    verdicts = bench_charts.verdicts(pairs)
    spec = [r for r in results if not r.is_baseline]
    newest = max(spec, key=lambda r: (bench_data.when(r) or 0.0, r.id or 0), default=None)
    if newest is None:
        st.markdown(f"Benchmarks: {fmt.count(len(results))} results, all without speculation")
        return
    v = verdicts.get(newest.id)
    word = bench_data.verdict_text(v) or fmt.NA
    colour = LEVEL_COLOUR.get(v.level, "gray") if v is not None else "gray"
    ratio = f"{v.ratio:.2f}× · " if v is not None and v.ratio is not None else ""
    st.markdown(fmt.data_markdown(f"Newest benchmark #{newest.id} {bench_data.server_of(newest)} "
                                  f"({bench_data.load_short(newest)}): ") + f":{colour}[**{ratio}{word}**]")


def _train_lines() -> None:
    from ui.train.data import follower

    names = rt.train.names()
    if not names:
        st.caption("Training: no run in this workspace")
        return
    for name in names[:2]:
        view = rt.supervisor.view(name)
        badge = fmt.view_badge(view)
        step = ""
        try:
            prog = follower(rt.train.log_path(name), rt.train.output_dir(name)).poll().progress
            if prog.step is not None:
                step = f" · step {fmt.count(prog.step)}" + (f" / {fmt.count(prog.total_steps)}"
                                                             if prog.total_steps else "")
        except OSError:  # the log cannot be read: no step shown
            step = ""
        st.markdown(fmt.data_markdown(f"**{name}** · ") + badge.markdown() + step)


def _cost_lines() -> None:
    now = time.time()
    lines = [data.cost_line("Regeneration", data.regen_costs(rt, now=now)),
             data.cost_line("Training", list(data.train_costs(rt, now=now).values()))]
    results = BenchStore(rt.store).list()
    key = (len(results), results[0].id if results else None)
    cached = st.session_state.get("ov-bench-cost")
    if cached is None or cached[0] != key:  # each result's cost reads its power history once
        cached = (key, data.cost_line("Benchmarks", list(data.bench_costs(rt, results).values())))
        st.session_state["ov-bench-cost"] = cached
    lines.append(cached[1])
    parts = []
    for ln in lines:
        if not ln.jobs:
            parts.append(f"{ln.what} {fmt.NA}")
            continue
        hours = fmt.NA if ln.gpu_hours is None else f"**{ln.gpu_hours:,.2f}** GPU-h"
        kwh = "" if ln.energy_kwh is None else f" / {ln.energy_kwh:,.2f} kWh"
        part = "" if ln.counted == ln.jobs or not ln.counted else f" ({ln.counted} of {ln.jobs})"
        parts.append(f"{ln.what} {hours}{kwh}{part}")
    why = "; ".join([f"{ln.what}: {ln.why}" for ln in lines if ln.why]
                    + [f"{ln.what}: no job started from this workspace" for ln in lines if not ln.jobs])
    st.markdown("**Cost** · " + " · ".join(parts),
                help=_help("GPU-hours = the job's GPUs × its hours (a regeneration job: its servers' GPUs; a "
                           "benchmark: its server's); energy (kWh) from the GPUs' power readings over that time, "
                           "where they cover it. N/A: not known. " + (f"Why: {why}" if why else "")))


@live_fragment(run_every=SLOW_REFRESH_S)
@_guarded
def work_tile() -> None:
    names = rt.train.names()
    live = [n for n in names if (v := rt.supervisor.view(n)) is not None and v.live]
    focus = (live or names or [None])[0]  # the page opens on the running run, else the first
    st.page_link(TRAIN_PAGE, label="Training", icon=":material/model_training:",
                 query_params={"run": focus} if focus else None,
                 help="the Training page" + (f" on {focus}" if focus else "") + ": curves, checkpoints, deploy")
    _train_lines()
    st.page_link(BENCH_PAGE, label="Benchmarks", icon=":material/speed:",
                 help="the Benchmarks page: every result against its baseline at the same load")
    _bench_line()
    _cost_lines()


with main:
    left, right = st.columns([3, 2], gap="medium")
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
        with st.container(border=True, key="ov-work"):
            work_tile()
