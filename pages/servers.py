"""Servers: each SGLang server's startup, preflight, live accept_len and tok/s, relaunch and stop."""

from __future__ import annotations

import shlex
import time

import pandas as pd
import streamlit as st
from pydantic import ValidationError

from backend.sglang.config import ALGORITHMS, ServerConfig
from backend.sglang.fleet import PreflightBlocked, findings_as_rows
from backend.sglang.preflight import has_errors
from ui import charts, fmt
from ui.components import confirm_box, freshness, page_header
from ui.context import actor, require_frame, runtime

REFRESH_S = 2
SEVERITY_ICON = {"error": "● error", "warning": "▲ warning", "info": "○ info"}
STATUS_TEXT = {
    "ready": ":green[● ready]",
    "starting": ":orange[◐ starting]",
    "failed": ":red[✕ failed]",
    "unreachable": ":red[✕ not answering]",
    "no-log": ":gray[○ no log yet]",
}

require_frame(__file__)
rt = runtime()
fleet = rt.fleet

page_header("Servers", "SGLang servers and their speculative drafts: startup, preflight, live accept_len "
            "and tok/s against the baseline, relaunch and stop.")

names = fleet.names()
if not names:
    st.info(f"No server yet: add a `[[server]]` entry to `{rt.workspace.config_path}` and reload "
            "(the demo workspace has a simulated one).", icon=":material/info:")
    st.stop()

default = st.session_state.get("srv-selected")
name = st.selectbox("Server", names, index=names.index(default) if default in names else 0, key="srv-selected")


def _state(v) -> str:
    return v.state.value if v is not None else "NEVER"


def _when(ts: float | None) -> str:
    return time.strftime("%H:%M:%S", time.localtime(ts)) if ts else fmt.NA


def _latest(series: list, default=None):
    for v in reversed(series):
        if v is not None:
            return v
    return default


def _reading_age(r) -> str:
    if r is None:
        return "not read yet"
    return f"{'read' if r.ok else 'failed'} {fmt.age(r.age())}" + ("" if r.ok else f" ({r.error})")


# -- live status ------------------------------------------------------------------

@st.fragment(run_every=REFRESH_S)
def live(server: str) -> None:
    snap = fleet.snapshot(server)
    view = rt.supervisor.view(server)
    state = _state(view)

    if snap.alert is not None:
        a = snap.alert
        st.error(f"**{a.title}.** {a.message}\n\nLikely causes:\n" + "\n".join(f"- {c}" for c in a.causes),
                 icon=":material/error:")
    if snap.fatal is not None:
        f = snap.fatal
        text = f"**{f.title}** at {_when(f.ts)}: `{f.message[:300]}`"
        if f.cause and f.cause not in f.message:
            text += f"\n\nCause: `{f.cause[:300]}`"
        st.error(text + f"\n\nDetails: `{snap.log_path}`", icon=":material/cancel:")
        if f.hint:
            st.markdown("**What the log suggests:**")
            st.code(f.hint, language=None)

    badge = fmt.state_badge(state, view.exit_code if view else None)
    st.markdown(
        f"{badge.markdown()} &nbsp; {STATUS_TEXT.get(snap.status, snap.status)} &nbsp; · sglang {snap.version}"
        + (" (assumed)" if snap.version_assumed else "")
        + f" · speculation: {snap.algorithm or 'off'}"
        + (f" · pid {view.pid}" if view is not None and view.pid else ""))

    if snap.status == "starting" and snap.fatal is None:
        label = snap.phase_label or "waiting for the first log line"
        pct = f" {snap.phase_percent:.0f}%" if snap.phase_percent is not None else ""
        since = f" · {fmt.duration(time.time() - snap.launched_ts)} since launch" if snap.launched_ts else ""
        st.progress(min(1.0, max(0.0, snap.progress)), text=f"Starting: {label}{pct}{since}")
        if snap.phase_detail:
            st.caption(snap.phase_detail[:200])

    dec = snap.decode
    acc = _latest(dec["accept_len"])
    tput = _latest(dec["gen_throughput"])
    life = snap.lifetime_accept_len
    c = st.columns(6)
    c[0].metric("accept_len", fmt.accept_len(acc),
                delta=None if acc is None or life is None else f"{acc - life:+.2f} vs life",
                help="accept len of the latest decode line: (accepted draft tokens + 1) per request step; delta against the lifetime average")
    c[1].metric("lifetime", fmt.accept_len(life),
                help=f"lifetime accept_len: /server_info avg_spec_accept_length, {_reading_age(snap.server_info)}")
    c[2].metric("tok/s", fmt.NA if tput is None else f"{tput:,.1f}",
                delta=None if tput is None or snap.baseline_tok_s is None
                else f"{tput - snap.baseline_tok_s:+,.1f} vs base",
                help="gen throughput (token/s) of the latest decode line, all requests; delta against the baseline")
    c[3].metric("running", fmt.count(_latest(dec["running_req"])))
    c[4].metric("queued", fmt.count(_latest(dec["queue_req"])))
    usage = _latest(dec["token_usage"])
    c[5].metric("KV cache", fmt.pct(None if usage is None else usage * 100))

    if dec["ts"]:
        ts = dec["ts"]
        fig = charts.figure("accept_len", y_title="tokens per step", height=260)
        charts.add_series(fig, "accept_len", ts, dec["accept_len"], fmt=".2f")
        fig.add_hline(y=1.0, line_dash="dot", line_color="#dc2626",
                      annotation_text="1.0 = no draft token accepted", annotation_position="bottom left")
        fig2 = charts.figure("Generation throughput (tok/s)", y_title="tok/s", height=260)
        charts.add_series(fig2, "gen throughput", ts, dec["gen_throughput"], fmt=",.1f")
        charts.add_baseline(fig2, snap.baseline_tok_s, "baseline")
        l, r = st.columns(2)
        l.plotly_chart(fig, width="stretch", key="srv-acc-chart")
        r.plotly_chart(fig2, width="stretch", key="srv-tput-chart")
        fig3 = charts.figure("Requests", y_title="requests", height=220)
        charts.add_series(fig3, "running", ts, dec["running_req"], fmt=".0f")
        charts.add_series(fig3, "queued", ts, dec["queue_req"], fmt=".0f")
        st.plotly_chart(fig3, width="stretch", key="srv-req-chart")
        if snap.accept_rate_meaning != "none":
            st.caption(f"accept rate in this log means {snap.accept_rate_description}; compare accept_len "
                       "across versions, not accept rate.")
    elif snap.status == "ready":
        st.info("Ready, but no decode line yet: lines appear every `decode_log_interval` decode steps "
                "once requests arrive.", icon=":material/info:")

    st.caption(f"HTTP: /health {_reading_age(snap.health)} · /metrics {_reading_age(snap.metrics)} · "
               f"server info {_reading_age(snap.server_info)} · log: {fmt.count(snap.stats.decode_lines)} decode, "
               f"{fmt.count(snap.stats.prefill_lines)} prefill lines, {fmt.count(snap.stats.unparsed_lines)} "
               f"unparsed{' · watching file events' if snap.watching else ' · polling the log'}")
    freshness(snap.refreshed_at, REFRESH_S)


live(name)

# -- config, preflight and control ---------------------------------------------------

cfg = fleet.config(name)
view = rt.supervisor.view(name)
active = view is not None and view.live

st.subheader("Config and preflight")
left, right = st.columns([3, 2])
with left:
    st.code(shlex.join(fleet.argv(cfg)), language="bash", wrap_lines=True)
    with st.expander("Launch config (from the workspace file)"):
        st.json(cfg.model_dump(mode="json", exclude_none=True))
with right:
    key = f"srv-preflight-{name}"
    if st.button("Run preflight", key="srv-run-preflight", icon=":material/fact_check:") or key not in st.session_state:
        st.session_state[key] = (time.time(), fleet.preflight(name))
    at, findings = st.session_state[key]
    errs = sum(1 for f in findings if f.severity == "error")
    warns = sum(1 for f in findings if f.severity == "warning")
    (st.error if errs else st.warning if warns else st.success)(
        f"Preflight: {errs} error(s), {warns} warning(s)" + (" — a launch needs 'launch anyway'" if errs else ""))
    st.caption(f"checked {fmt.age(time.time() - at)}")
# errors and warnings in full: their words are the point
for f in findings:
    if f.severity in ("error", "warning"):
        (st.error if f.severity == "error" else st.warning)(
            f"**{f.code}**: {f.found}\n\n**Fix:** {f.fix}",
            icon=":material/error:" if f.severity == "error" else ":material/warning:")
if findings:
    with st.expander(f"All findings ({len(findings)})", expanded=not (errs or warns)):
        df = pd.DataFrame(findings_as_rows(findings))
        df["severity"] = df["severity"].map(SEVERITY_ICON)
        st.dataframe(df, hide_index=True, width="stretch")


def _form_config(base: ServerConfig) -> ServerConfig | None:
    """The relaunch form; returns the edited config, or None when it does not validate."""
    spec = base.speculative
    c1, c2, c3 = st.columns(3)
    algo_opts = ["(off)", *ALGORITHMS]
    algo = c1.selectbox("speculative algorithm", algo_opts,
                        index=algo_opts.index(spec.algorithm) if spec.algorithm else 0)
    draft = c2.text_input("draft model path", spec.draft_model_path or "")
    port = c3.number_input("port", 1, 65535, base.port)
    c4, c5, c6 = st.columns(3)
    steps = c4.number_input("num steps (0 = auto)", 0, 64, spec.num_steps or 0)
    topk = c5.number_input("eagle topk (0 = auto)", 0, 64, spec.eagle_topk or 0)
    dtok = c6.number_input("draft tokens (0 = auto)", 0, 1024, spec.num_draft_tokens or 0)
    c7, c8, c9 = st.columns(3)
    tp = c7.number_input("tp size", 1, 64, base.tp_size)
    gpus = c8.text_input("GPUs (CUDA_VISIBLE_DEVICES)", ",".join(map(str, base.gpus)) if base.gpus else "")
    mem = c9.number_input("mem fraction static (0 = auto)", 0.0, 0.99, base.mem_fraction_static or 0.0, 0.01)
    c10, c11, c12 = st.columns(3)
    no_graph = c10.checkbox("disable CUDA graph", base.cuda_graph.disable)
    max_bs = c11.number_input("CUDA graph max batch size (0 = auto)", 0, 4096, base.cuda_graph.max_bs or 0)
    trust = c12.checkbox("trust remote code", base.trust_remote_code, key="srv-trust",
                         help="--trust-remote-code: run the model's own Python code (Kimi-K2 and GLM need it)")
    extra = st.text_input("extra arguments", shlex.join(base.extra_args))
    data = base.model_dump(mode="json", exclude_unset=True)
    if trust or "trust_remote_code" in data:  # written back only once it was ever set
        data["trust_remote_code"] = bool(trust)
    data.update(port=int(port), tp_size=int(tp), mem_fraction_static=float(mem) or None,
                gpus=[int(g) for g in gpus.replace(" ", "").split(",") if g] if gpus.strip() else None,
                cuda_graph={"disable": bool(no_graph), "max_bs": int(max_bs) or None})
    data["speculative"] = {"algorithm": None if algo == "(off)" else algo, "draft_model_path": draft or None,
                           "num_steps": int(steps) or None, "eagle_topk": int(topk) or None,
                           "num_draft_tokens": int(dtok) or None}
    try:
        data["extra_args"] = shlex.split(extra)
        return ServerConfig.model_validate(data)
    except (ValidationError, ValueError) as exc:
        msgs = [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()] if isinstance(
            exc, ValidationError) else [str(exc)]
        st.error("The config is not valid:\n" + "\n".join(f"- {m}" for m in msgs))
        return None


def launch_panel(server: str, running: bool) -> None:
    """Edit, preflight and confirm a (re)launch, in its own container."""
    head, close = st.columns([6, 1])
    head.markdown(f"**{server}** — edit, check, then {'stop and relaunch' if running else 'start'}.")
    if close.button("Cancel", key="srv-launch-cancel"):
        st.session_state["srv-launch-open"] = False
        st.rerun()
    new = _form_config(fleet.config(server))
    if new is None:
        return
    st.code(shlex.join(fleet.argv(new)), language="bash", wrap_lines=True)
    found = fleet.preflight(server, new)
    if found:
        df = pd.DataFrame(findings_as_rows(found))
        df["severity"] = df["severity"].map(SEVERITY_ICON)
        st.dataframe(df, hide_index=True, width="stretch")
    blocked = has_errors(found)
    anyway = False
    if blocked:
        st.error("Preflight found errors. The server would start, but the errors above say how it will misbehave.")
        anyway = st.checkbox("Launch anyway (recorded in the audit log with these errors)", key="srv-anyway")
    label = "Stop and relaunch" if running else "Start"
    if st.button(label, type="primary", disabled=blocked and not anyway, key="srv-launch-go"):
        try:
            fleet.launch(server, new, actor=actor(), source="dashboard", launch_anyway=anyway, findings=found)
        except PreflightBlocked:
            st.error("Refused: preflight errors (recorded in the audit log).")
            return
        except Exception as exc:  # the supervisor refused or the config file could not be written
            st.error(f"Could not launch **{server}**: {exc}")
            return
        st.session_state.pop(f"srv-preflight-{server}", None)
        st.session_state["srv-launch-open"] = False
        st.toast(f"{label} requested for {server}; startup progress shows above", icon=":material/check_circle:")
        st.rerun()


st.subheader("Control")
b1, b2, _ = st.columns([1, 1, 4])
if b1.button("Relaunch…" if active else "Start…", key="srv-launch", icon=":material/rocket_launch:"):
    st.session_state["srv-launch-open"] = True
if st.session_state.get("srv-launch-open"):
    with st.container(border=True):
        launch_panel(name, active)
if b2.button("Stop", key="srv-stop", disabled=not active, icon=":material/stop:"):
    st.session_state["srv-confirm-stop"] = True
if confirm_box("srv-confirm-stop", f"Stop **{name}**? Requests in flight fail; it gets SIGTERM, then SIGKILL "
               f"after {view.spec.stop_grace_s:.0f} s." if view else f"Stop **{name}**?",
               confirm_label="Yes, stop") is True:
    try:
        fleet.stop(name, actor=actor(), source="dashboard")
        st.toast(f"Stop requested for {name}", icon=":material/check_circle:")
    except Exception as exc:
        st.error(f"Could not stop **{name}**: {exc}")

# -- log ----------------------------------------------------------------------------------

st.subheader("Log")


@st.fragment(run_every=REFRESH_S)
def log_view(server: str) -> None:
    snap = fleet.snapshot(server)
    st.caption(f"`{snap.log_path}` · last {len(snap.log_tail)} lines")
    st.code("\n".join(snap.log_tail[-200:]) or "(log is empty)", language=None, height=320)
    if snap.unparsed:
        with st.expander(f"{snap.stats.unparsed_lines} batch line(s) could not be read"):
            st.dataframe(pd.DataFrame([{"line": u.line_no, "reason": u.reason, "text": u.text}
                                       for u in snap.unparsed]), hide_index=True, width="stretch")
    if snap.problems:
        with st.expander(f"{len(snap.problems)} warning(s) from the log"):
            for p in snap.problems:
                st.markdown(f"- **{p.title}** at {_when(p.ts)}: `{p.message[:200]}`")


log_view(name)
