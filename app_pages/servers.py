"""Servers: each SGLang server's startup, preflight, live accept_len and tok/s, relaunch and stop."""

from __future__ import annotations

import shlex
import time
from pathlib import Path

import pandas as pd
import streamlit as st
from pydantic import ValidationError

from backend.flows.router_sync import drain, routers_of
from backend.sglang.config import ALGORITHMS, ServerConfig, config_changes
from backend.sglang.fleet import PreflightBlocked, findings_as_rows
from backend.bench import baseline
from backend.sglang import livefigures
from backend.sglang.alerts import ACCEPT_FLOOR
from backend.sglang.monitor import PAR_TOLERANCE, SLOW_RATIO, STEADY_WINDOW_S, steady_verdict
from backend.sglang.preflight import has_errors
from ui import fmt, servers_charts
from ui.bench import baseline as baseline_measure
from backend.logview import newest_line_age
from ui.auth import control_lock, data_lock, live_fragment, show_data_lock
from ui.components import (code_span, confirm_box, findings_list, freshness, log_block, open_expander, page_header,
                           path_text, text_block)
from ui.context import actor, runtime
from ui.overview_query import QueryState
from ui.routers import routers_section

REFRESH_S = 2
PAGE_DRAIN_S = 15.0  # a relaunch from this page waits at most this long for a server's requests in flight
FOLLOW = "srv-follow"
FOLLOW_SCRIPT = ("<script>setTimeout(() => document.querySelector('.st-key-srv-status')"
                 "?.scrollIntoView({block: 'start', behavior: 'smooth'}), 100);</script>")
SEVERITY_ICON = {"error": "● error", "warning": "▲ warning", "info": "○ info"}
SELECTED = "srv-selected"
LAUNCH_OPEN = "srv-launch-open"
PANELS = {"relaunch": LAUNCH_OPEN}  # ?panel= value -> the session flag that opens that panel

rt = runtime()
fleet = rt.fleet

page_header("Servers", "SGLang servers and their speculative drafts: startup, preflight, live accept_len "
            "and tok/s against the baseline, relaunch and stop.")

names = fleet.names()
if not names:
    st.info(f"No server yet: add a `[[server]]` entry to {path_text(rt.workspace.config_path, bool(data_lock(rt)))} "
            "and reload "
            "(the demo workspace has a simulated one).", icon=":material/info:")
    st.stop()

@live_fragment(run_every=REFRESH_S)
def routers() -> None:
    """Each [[router]] and the servers behind it, side by side (nothing without a router)."""
    routers_section(rt)


if fleet.router_names():
    routers()
# the server and an open panel are in the URL's query (?server=NAME&panel=relaunch): a link opens the page on
# them, in a fresh browser too; a value that is not a server or panel here is ignored with a note
query = QueryState("servers")
query.take("server", SELECTED, names, what="server")
if query.take("panel", "srv-panel-wanted", list(PANELS), what="panel") is not None:
    st.session_state[PANELS[st.session_state.pop("srv-panel-wanted")]] = True
if st.session_state.get(SELECTED) not in names:  # a server removed from the workspace since: the first one
    st.session_state[SELECTED] = names[0]
query.show_notes()
name = st.selectbox("Server", names, key=SELECTED)
query.put("server", name)


def _when(ts: float | None) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ts)) if ts else fmt.NA


def _reading_age(r) -> str:
    if r is None:
        return "not read yet"
    return f"{'read' if r.ok else 'failed'} {fmt.age(r.age())}" + ("" if r.ok else f" ({r.error})")


# -- live figures: one run at a time, compared like with like --------------------

LEVEL_COLOUR = {"good": "green", "par": "gray", "warn": "orange", "bad": "red", "none": "gray"}
VERDICT_TEXT = (f"within ±{PAR_TOLERANCE * 100:.0f} % on par, above faster (green), below slower (amber; red "
                f"under {SLOW_RATIO:.2f}×)")


def _verdict_line(v) -> str:
    """The verdict's sentence, coloured by it (the rule is in the metric's help)."""
    text = f"**Verdict** {v.sentence}"
    return f":{LEVEL_COLOUR[v.level]}[{text}]" if v.level in ("good", "warn", "bad") else text


@st.cache_resource(show_spinner=False)
def _stored_baselines(key: str, _store) -> baseline.StoredBaselines:
    return baseline.StoredBaselines(_store)


def _model_name(server: str) -> str:
    cfg = fleet.config(server)
    return cfg.served_model_name or Path(cfg.model_path).name


def baseline_choice(server: str, running: int | None) -> baseline.BaselineChoice:
    """The stored baseline of this server's target at (or nearest to) the concurrency it runs now."""
    cfg = fleet.config(server)
    store = _stored_baselines(f"{rt.store.path}:{id(rt.store)}", rt.store)
    return store.choose(server, cfg.model_path, cfg.served_model_name, running, cfg.baseline_tok_s)


def live_figures(snap, server: str) -> baseline.BaselineChoice:
    """Key figures of the current run; tok/s against the baseline measured at the same concurrency, or
    (none stored) per request against the configured single-stream one.  Returns the baseline chosen."""
    fig = livefigures.latest(snap)
    dec, acc, life, tput, running = fig.decode, fig.accept_len, fig.lifetime_accept_len, fig.gen_throughput, \
        fig.running_req
    choice = baseline_choice(server, running)
    measured = livefigures.measured_figures(tput, running, choice) if choice.stored else None
    speed = livefigures.speed_figures(tput, running, None if measured else snap.baseline_tok_s)
    delta = livefigures.accept_vs_lifetime(acc, life)
    # the verdict: over a steady window at the load the baseline was measured at, never one line's ratio
    if measured is not None:
        verdict = steady_verdict(dec["ts"], dec["gen_throughput"], dec["running_req"], choice.tok_s,
                                 choice.concurrency, now=time.time())
    else:  # the configured baseline is single-stream: one request in flight
        verdict = steady_verdict(dec["ts"], dec["gen_throughput"], dec["running_req"], snap.baseline_tok_s, 1,
                                 now=time.time())
    verdict_kw = dict(delta=verdict.badge if dec["ts"] else None, delta_color=LEVEL_COLOUR[verdict.level],
                      delta_arrow={"faster": "up", "slower": "down"}.get(verdict.verdict, "off"))
    c = st.columns(3) + st.columns(3)  # two rows: nothing cut at 1024 px
    c[0].metric("accept_len", fmt.accept_len(acc), delta=delta.text, delta_color=LEVEL_COLOUR[delta.level],
                delta_arrow="off",
                help="accept len of the latest decode line of this run: (accepted draft tokens + 1) per request "
                     f"step; against this run's lifetime average. Red at or below {ACCEPT_FLOOR:.2f} whatever the "
                     f"delta; otherwise by the ratio to the lifetime average ({livefigures.THRESHOLDS_TEXT}).")
    c[1].metric("lifetime accept_len", fmt.accept_len(life),
                help="this run's lifetime accept_len: /server_info avg_spec_accept_length, "
                     f"{_reading_age(snap.server_info)}")
    if measured is None:
        c[2].metric("per-request tok/s", fmt.NA if speed.per_request is None else f"{speed.per_request:,.1f}",
                    **verdict_kw,
                    help="decode speed of one request: gen throughput ÷ #running-req of the latest decode line "
                         "(the single-stream figure when one request runs). No measured baseline of this target "
                         "is stored, so the verdict is against the configured single-stream baseline_tok_s (the "
                         f"fallback), given only after {STEADY_WINDOW_S:.0f} s with one request in flight: "
                         f"{VERDICT_TEXT}.")
        c[3].metric("aggregate tok/s", fmt.NA if tput is None else f"{tput:,.1f}",
                    help="gen throughput of the latest decode line: all running requests together. Not "
                         "comparable with the single-stream baseline; a baseline measured at the same "
                         "concurrency is needed for that.")
    else:
        c[2].metric("per-request tok/s", fmt.NA if speed.per_request is None else f"{speed.per_request:,.1f}",
                    help="decode speed of one request: gen throughput ÷ #running-req of the latest decode line. "
                         "The measured baseline is compared with the aggregate figure at the same concurrency.")
        c[3].metric("aggregate tok/s", fmt.NA if tput is None else f"{tput:,.1f}",
                    **verdict_kw,
                    help="gen throughput of the latest decode line (all running requests together). The verdict "
                         f"is the mean over the last {STEADY_WINDOW_S:.0f} s against the output tok/s of the "
                         "baseline, given only when every line of that window ran at the concurrency the baseline "
                         f"was measured at: {VERDICT_TEXT}. {choice.label}.")
    c[4].metric("running · queued", f"{fmt.count(running)} · {fmt.count(livefigures.newest(dec['queue_req']))}",
                help="#running-req and #queue-req of the latest decode line of this run")
    usage = livefigures.newest(dec["token_usage"])
    metrics = snap.metrics.value if snap.run_live and snap.metrics is not None and snap.metrics.ok else None
    hit, hit_from = livefigures.prefix_cache_hit_pct(snap.latest_prefill, metrics)
    c[5].metric("KV used · cache hit", f"{fmt.pct(None if usage is None else usage * 100)} · {fmt.pct(hit)}",
                help="KV cache token usage of the latest decode line; prefix cache hit from " + hit_from)
    if dec["ts"]:
        if measured is not None:
            st.caption(f"{_verdict_line(verdict)} · now: {measured.comparison}")
            if running and not choice.exact:
                baseline_measure.offer(server, choice, running, _model_name(server))
        else:
            st.caption(f"{_verdict_line(verdict)} · Fallback, configured: now {speed.comparison} · "
                       f"{speed.aggregate_text}")
            baseline_measure.offer(server, choice, running, _model_name(server))
    elif not snap.run_live:
        st.caption("No run in progress: the figures above stay blank until the next run logs its own; the "
                   "charts keep the previous runs.")
    elif snap.run_started_ts is not None:
        st.caption(f"New run since {_when(snap.run_started_ts)}: its figures appear with its first decode line.")
    else:
        st.caption("No decode line yet.")
    return choice


# -- live status ------------------------------------------------------------------

def _setting(v) -> str:
    return "auto" if v is None else f"{v}"


def speculation_text(cfg: ServerConfig, snap) -> str:
    """``speculation: EAGLE3 · steps 5 · topk 1 · draft tokens 6``: what the running server reports on
    /server_info, else what it was launched with; a setting the server reports otherwise than the workspace
    file says is named."""
    spec = cfg.speculative
    launched = {"algorithm": spec.algorithm, "steps": spec.num_steps, "topk": spec.eagle_topk,
                "draft tokens": spec.num_draft_tokens}
    si = snap.server_info
    info = si.value if si is not None and si.ok and si.value is not None and snap.run_live else None
    if info is not None and info.speculative_algorithm:
        running = {"algorithm": info.speculative_algorithm, "steps": info.speculative_num_steps,
                   "topk": info.speculative_eagle_topk, "draft tokens": info.speculative_num_draft_tokens}
        source = "as the server reports"
    else:
        running, source = launched, "launch config"
    if not running["algorithm"]:
        return "speculation: off"
    parts = [f"**{running['algorithm']}**"] + [f"{k} **{_setting(running[k])}**" for k in
                                               ("steps", "topk", "draft tokens")]
    text = "speculation: " + " · ".join(parts) + f" ({source})"
    differ = [f"{k} {_setting(launched[k])}" for k in ("steps", "topk", "draft tokens")
              if source != "launch config" and launched[k] is not None and launched[k] != running[k]]
    if differ:
        text += f"; the workspace file says {', '.join(differ)}"
    return text


@live_fragment(run_every=REFRESH_S)
def live(server: str) -> None:
    snap = fleet.snapshot(server)
    view = rt.supervisor.view(server)
    hidden = bool(data_lock(rt))  # the log's own words: only for sessions that may see logs

    if snap.alert is not None:
        a = snap.alert
        st.error(fmt.data_markdown(f"**{a.title}.** {a.message}\n\nLikely causes:\n"
                                   + "\n".join(f"- {c}" for c in a.causes)), icon=":material/error:")
    if snap.fatal is not None:
        f = snap.fatal
        text = f"**{f.title}** at {_when(f.ts)}"
        if hidden:
            text += " (the log's lines are shown to signed-in users)"
        else:
            text += f": {code_span(f.message[:300])}"
            if f.cause and f.cause not in f.message:
                text += f"\n\nCause: {code_span(f.cause[:300])}"
            text += f"\n\nDetails: {code_span(snap.log_path)}"
        st.error(fmt.data_markdown(text), icon=":material/cancel:")
        if f.hint and not hidden:
            st.markdown("**What the log suggests:**")
            st.code(f.hint, language=None)

    badge = fmt.server_badge(view, snap.status, health_at=snap.health.at if snap.health is not None else None)
    status = st.container(key="srv-status")  # where the view goes after a relaunch
    status.markdown(
        f"{badge.markdown()} &nbsp; · sglang {snap.version}"
        + (" (assumed)" if snap.version_assumed else "")
        + f" · {speculation_text(fleet.config(server), snap)}"
        + (f" · pid {view.pid}" if view is not None and view.pid else ""))

    if snap.status == "starting" and snap.fatal is None:
        label = snap.phase_label or "waiting for the first log line"
        pct = f" {snap.phase_percent:.0f}%" if snap.phase_percent is not None else ""
        since = f" · {fmt.duration(time.time() - snap.launched_ts)} since launch" if snap.launched_ts else ""
        st.progress(min(1.0, max(0.0, snap.progress)), text=f"Starting: {label}{pct}{since}")
        if snap.phase_detail and not hidden:
            st.caption(fmt.data_markdown(snap.phase_detail[:200]))

    choice = live_figures(snap, server)
    baseline_measure.progress(rt, server)
    if snap.decode["ts"]:
        servers_charts.live_charts(snap, choice)
    elif snap.status == "ready":
        st.info("Ready, but no decode line yet: lines appear every `decode_log_interval` decode steps "
                "once requests arrive.", icon=":material/info:")

    st.caption(f"HTTP: /health {_reading_age(snap.health)} · /metrics {_reading_age(snap.metrics)} · "
               f"server info {_reading_age(snap.server_info)} · log: {fmt.count(snap.stats.decode_lines)} decode, "
               f"{fmt.count(snap.stats.prefill_lines)} prefill lines, {fmt.count(snap.stats.unparsed_lines)} "
               f"unparsed{' · watching file events' if snap.watching else ' · polling the log'}")
    freshness(snap.refreshed_at, REFRESH_S)



# -- config, preflight and control ---------------------------------------------------

cfg = fleet.config(name)
lock = control_lock(rt)
if not lock:  # an edit in the Start…/Relaunch… panel is then checked in a fraction of a second
    fleet.warm_parser(name)
view = rt.supervisor.view(name)
active = view is not None and view.live


def _preflight(server: str) -> tuple[float, list] | None:
    """The findings of the workspace config (run on the first visit and on "Run preflight"), or None after
    an error on the page: preflight runs the server's python, which only a session that may act asks for."""
    try:
        return time.time(), rt.preflight(actor(), server, source="dashboard")
    except Exception as exc:  # refused (audited), or the check itself failed
        st.error(f"Preflight did not run: {exc}", icon=":material/lock:")
        return None


def _put(data: dict, set_fields: set[str], key: str, value, current) -> None:
    """Put a form value into ``data`` when the user changed it or the file already sets it,
    so an untouched default is never written into the workspace file."""
    if value != current or key in set_fields:
        data[key] = value


def _form_config(base: ServerConfig, server: str) -> ServerConfig | None:
    """The relaunch form; returns the edited config, or None when it does not validate."""
    spec, graph = base.speculative, base.cuda_graph
    k = f"srv-f-{server}-"
    c1, c3 = st.columns(2)
    algo_opts = ["(off)", *ALGORITHMS]
    algo = c1.selectbox("speculative algorithm", algo_opts, key=k + "algo",
                        index=algo_opts.index(spec.algorithm) if spec.algorithm else 0)
    port = c3.number_input("port", 1, 65535, base.port, key=k + "port")
    draft = st.text_input("draft model path", spec.draft_model_path or "", key=k + "draft")  # full width: paths are long
    c4, c5, c6 = st.columns(3)
    steps = c4.number_input("num steps (0 = auto)", 0, 64, spec.num_steps or 0, key=k + "steps")
    topk = c5.number_input("eagle topk (0 = auto)", 0, 64, spec.eagle_topk or 0, key=k + "topk")
    dtok = c6.number_input("draft tokens (0 = auto)", 0, 1024, spec.num_draft_tokens or 0, key=k + "dtok")
    c7, c8, c9 = st.columns(3)
    tp = c7.number_input("tp size", 1, 64, base.tp_size, key=k + "tp")
    gpus = c8.text_input("GPUs (CUDA_VISIBLE_DEVICES)", ",".join(map(str, base.gpus)) if base.gpus else "",
                         key=k + "gpus", help="comma-separated GPU indices, e.g. 0,1; empty leaves it unset")
    mem = c9.number_input("mem fraction static (0 = auto)", 0.0, 0.99, base.mem_fraction_static or 0.0, 0.01,
                          key=k + "mem")
    c10, c11, c12 = st.columns(3)
    no_graph = c10.checkbox("disable CUDA graph", graph.disable, key=k + "nograph")
    max_bs = c11.number_input("CUDA graph max batch size (0 = auto)", 0, 4096, graph.max_bs or 0, key=k + "maxbs")
    trust = c12.checkbox("trust remote code", base.trust_remote_code, key=k + "trust",
                         help="--trust-remote-code: run the model's own Python code (Kimi-K2 and GLM need it)")
    extra = st.text_input("extra arguments", shlex.join(base.extra_args), key=k + "extra")
    try:
        gpu_list = [int(g) for g in gpus.replace(" ", "").split(",") if g] if gpus.strip() else None
    except ValueError:
        st.error(f"The config is not valid:\n- gpus: {gpus!r} is not a list of GPU indices like 0,1")
        return None
    try:
        extra_args = shlex.split(extra)
    except ValueError as exc:
        st.error(f"The config is not valid:\n- extra arguments: {exc}")
        return None

    data = base.model_dump(mode="json", exclude_unset=True)
    top = base.model_fields_set
    _put(data, top, "port", int(port), base.port)
    _put(data, top, "tp_size", int(tp), base.tp_size)
    _put(data, top, "gpus", gpu_list, base.gpus)
    _put(data, top, "mem_fraction_static", float(mem) or None, base.mem_fraction_static)
    _put(data, top, "extra_args", extra_args, base.extra_args)
    _put(data, top, "trust_remote_code", bool(trust), base.trust_remote_code)
    sp: dict = dict(data.get("speculative", {}))
    _put(sp, spec.model_fields_set, "algorithm", None if algo == "(off)" else algo, spec.algorithm)
    _put(sp, spec.model_fields_set, "draft_model_path", draft.strip() or None, spec.draft_model_path)
    _put(sp, spec.model_fields_set, "num_steps", int(steps) or None, spec.num_steps)
    _put(sp, spec.model_fields_set, "eagle_topk", int(topk) or None, spec.eagle_topk)
    _put(sp, spec.model_fields_set, "num_draft_tokens", int(dtok) or None, spec.num_draft_tokens)
    if sp:
        data["speculative"] = sp
    cg: dict = dict(data.get("cuda_graph", {}))
    _put(cg, graph.model_fields_set, "disable", bool(no_graph), graph.disable)
    _put(cg, graph.model_fields_set, "max_bs", int(max_bs) or None, graph.max_bs)
    if cg:
        data["cuda_graph"] = cg
    try:
        return ServerConfig.model_validate(data)
    except ValidationError as exc:
        msgs = [f"{'.'.join(map(str, e['loc'])) or 'config'}: {e['msg']}" for e in exc.errors()]
        st.error("The config is not valid:\n" + "\n".join(f"- {m}" for m in msgs))
        return None


def _changes(old: ServerConfig, new: ServerConfig) -> list[str]:
    """``speculative.num_steps 3 → 4`` for each field the form changed."""
    def show(v) -> str:
        if v is None:
            return "auto"
        if isinstance(v, list):
            return (shlex.join(v) if all(isinstance(x, str) for x in v) else ",".join(map(str, v))) or "none"
        return str(v)

    return [f"`{key}` {show(a)} → {show(b)}" for key, a, b in config_changes(old, new)]


def launch_panel(server: str, running: bool) -> None:
    """Edit, preflight and confirm a (re)launch, in its own container."""
    head, close = st.columns([6, 1])
    head.markdown(f"**{server}** — edit, check, then {'stop and relaunch' if running else 'start'}.")
    if close.button("Cancel", key="srv-launch-cancel"):
        st.session_state[LAUNCH_OPEN] = False
        st.rerun()
    lock = control_lock(rt)
    if lock:
        st.error(lock, icon=":material/lock:")
        return
    new = _form_config(fleet.config(server), server)
    if new is None:
        return
    changes = _changes(fleet.config(server), new)
    st.markdown(fmt.data_markdown("**Changes:** " + ("; ".join(changes) if changes else "none (relaunch as it is)")))
    st.code(shlex.join(fleet.argv(new)), language="bash", wrap_lines=True)
    # checked once per edit: each check runs the server's python and is audited
    checked_key = "srv-launch-checked"
    stamp = (server, running, new.model_dump_json())
    checked = st.session_state.get(checked_key)
    if checked is None or len(checked) != 3 or checked[0] != stamp:
        with st.spinner("Preflight: checking the edited command…"):
            try:
                checked = (stamp, rt.preflight(actor(), server, new, source="dashboard"), time.time())
            except Exception as exc:  # refused (a typed folder outside the roots, ...) or failed: audited
                st.error(f"Preflight did not run: {exc}", icon=":material/lock:")
                return
        st.session_state[checked_key] = checked
    found, checked_at = checked[1], checked[2]
    if found:
        findings_list(found)
    else:
        st.success("Preflight: no findings.")
    blocked = has_errors(found)
    anyway = False
    if blocked:
        st.error("Preflight found errors. The server would start, but the errors above say how it will misbehave.")
        anyway = st.checkbox("Launch anyway (recorded in the audit log with these errors)", key="srv-anyway")
    label = "Stop and relaunch" if running else "Start"
    if st.button(label, type="primary", disabled=(blocked and not anyway) or bool(lock), help=lock or None,
                 key="srv-launch-go"):
        if running and routers_of(fleet, server):  # out of its routers first, its requests in flight finished
            with st.spinner(f"Draining {server}: out of {', '.join(routers_of(fleet, server))}, waiting up to "
                            f"{PAGE_DRAIN_S:.0f} s for its requests in flight…"):
                try:
                    drain(fleet, rt.supervisor, rt.workspace.run_dir, server, limit_s=PAGE_DRAIN_S)
                except Exception as exc:  # a router that does not answer: the relaunch goes on
                    st.warning(f"Could not drain **{server}** first: {exc}")
        try:
            rt.launch(server, new, actor=actor(), source="dashboard", launch_anyway=anyway, findings=found)
        except PreflightBlocked:
            st.error("Refused: preflight errors (recorded in the audit log).")
            return
        except Exception as exc:  # the supervisor refused or the config file could not be written
            st.error(f"Could not launch **{server}**: {exc}")
            return
        # the page's preflight is now the launched config's own check (made above with the server's memory
        # counted free); checking again during the restart would read the GPUs while the old process lets go
        st.session_state[f"srv-preflight-{server}"] = (checked_at, found)
        st.session_state[LAUNCH_OPEN] = False
        st.session_state[FOLLOW] = True  # the next run brings the status and its startup progress into view
        st.toast(f"{label} requested for {server}; its startup progress follows", icon=":material/check_circle:")
        st.rerun()


st.subheader("Control")
row = st.container(horizontal=True)  # buttons as wide as their labels
lock = control_lock(rt)
if row.button("Relaunch…" if active else "Start…", key="srv-launch", disabled=bool(lock), help=lock or None,
              icon=":material/rocket_launch:"):
    st.session_state[LAUNCH_OPEN] = True
query.put("panel", "relaunch" if st.session_state.get(LAUNCH_OPEN) else None)  # before the panel, which may stop the run
if st.session_state.get(LAUNCH_OPEN):
    with st.container(border=True):
        launch_panel(name, active)
if row.button("Measure baseline…", key="srv-measure", disabled=bool(lock), help=lock or None,
              icon=":material/speed:"):
    st.session_state[baseline_measure.OPEN] = True
if st.session_state.get(baseline_measure.OPEN):
    with st.container(border=True):
        _snap = fleet.snapshot(name)
        _dec = _snap.run_decode if _snap.run_decode is not None else _snap.decode
        baseline_measure.panel(rt, name, _dec["running_req"][-1] if _dec["running_req"] else None)
if row.button("Stop", key="srv-stop", disabled=not active or bool(lock), help=lock or None,
              icon=":material/stop:"):
    st.session_state["srv-confirm-stop"] = True
if confirm_box("srv-confirm-stop", f"Stop **{name}**? Requests in flight fail; it gets SIGTERM, then SIGKILL "
               f"after {view.spec.stop_grace_s:.0f} s." if view else f"Stop **{name}**?",
               confirm_label="Yes, stop") is True:
    try:
        rt.stop(name, actor=actor(), source="dashboard")
        st.toast(f"Stop requested for {name}", icon=":material/check_circle:")
    except Exception as exc:
        st.error(f"Could not stop **{name}**: {exc}")


live(name)
if st.session_state.pop(FOLLOW, False):  # after a (re)launch: the view goes to its status and progress
    st.html(FOLLOW_SCRIPT, unsafe_allow_javascript=True, width="content")

st.subheader("Config and preflight")
left, right = st.columns([3, 2])
with left:
    if not show_data_lock(rt):  # a command line and the workspace's paths
        # shown as text; the copy button is in the expander, which builds it only while open (a page's first
        # st.code starts the browser's syntax highlighter, see ui.components.text_block)
        text_block(shlex.join(fleet.argv(cfg)))
        config_box = open_expander("Launch command to copy, and config (from the workspace file)",
                                   key="srv-config-open")
        if config_box is not None:  # the code block and the JSON viewer only while open
            with config_box:
                st.code(shlex.join(fleet.argv(cfg)), language="bash", wrap_lines=True)
                st.json(cfg.model_dump(mode="json", exclude_none=True))
findings: list = []
with right:
    key = f"srv-preflight-{name}"
    pressed = st.button("Run preflight", key="srv-run-preflight", icon=":material/fact_check:", disabled=bool(lock),
                        help=lock or "check the launch command with SGLang's own parser and the model folders")
    if pressed or (key not in st.session_state and not lock):
        with st.spinner("Preflight: checking the launch command (the first check with SGLang's own parser loads sglang)…"):
            result = _preflight(name)
        if result is not None:
            st.session_state[key] = result
    if key in st.session_state and not lock:
        at, findings = st.session_state[key]
        errs = sum(1 for f in findings if f.severity == "error")
        warns = sum(1 for f in findings if f.severity == "warning")
        (st.error if errs else st.warning if warns else st.success)(
            f"Preflight: {errs} error(s), {warns} warning(s)" + (" — a launch needs 'launch anyway'" if errs else ""))
        st.caption(f"checked {fmt.age(time.time() - at)}")
    elif lock:
        st.caption("Preflight runs the server's python and reads its model folders: it is run by a session that "
                   "may start servers.")
# errors and warnings in full: their words are the point
findings_list(findings, info=False)
if findings:
    with st.expander(f"All findings ({len(findings)})", expanded=not (errs or warns)):
        df = pd.DataFrame(findings_as_rows(findings))
        df["severity"] = df["severity"].map(SEVERITY_ICON)
        st.table(df, hide_index=True)  # a table wraps long text; a data grid cuts it


# -- log ----------------------------------------------------------------------------------

st.subheader("Log")


@live_fragment(run_every=REFRESH_S)
def log_view(server: str) -> None:
    if show_data_lock(rt):
        return
    snap = fleet.snapshot(server)
    st.caption(fmt.data_markdown(code_span(snap.log_path)))
    log_block(list(snap.log_tail), newest_age_s=newest_line_age(snap.log_path), toggle_key="srv-log-probes")
    if snap.unparsed:
        with st.expander(f"{snap.stats.unparsed_lines} batch line(s) could not be read"):
            st.dataframe(pd.DataFrame([{"line": u.line_no, "reason": u.reason, "text": u.text}
                                       for u in snap.unparsed]), hide_index=True, width="stretch")
    if snap.problems:
        with st.expander(f"{len(snap.problems)} warning(s) from the log"):
            for p in snap.problems:
                st.markdown(fmt.data_markdown(f"- **{p.title}** at {_when(p.ts)}: {code_span(p.message[:200])}"))


log_view(name)
