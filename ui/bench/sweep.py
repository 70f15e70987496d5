"""The Benchmarks page's sweep panel: queue a sweep of a managed server, follow it, stop it.

``sweep_panel(rt)`` draws a form (the grid of steps, top-k and draft tokens, the baseline,
the loads), a review of the planned configurations with the exact command, and, for the
sweep chosen, a live block read from the job's state file: configuration i of n, its phase,
the results so far against the baseline at the same load, and the break-even model's
prediction beside each measurement.  The job is a supervised process
(``python -m backend.cli bench sweep``): closing the page or restarting the dashboard does
not stop it, and its state file is what is shown.
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from backend.flows.sweep import (DONE, FAILED, RUNNING, STOPPED, SweepState, command_line, preview, read_state,
                                 state_path, sweep_process_spec)
from backend.flows.sweep_plan import MODES, PlanError, SweepPlan, expand, parse_int_list
from ui import charts, fmt
from ui.auth import control_lock, data_lock, live_fragment, show_data_lock
from ui.bench.run import show_new_results
from ui.components import freshness, path_text, stop_control
from ui.context import actor

REFRESH_S = 2
PENDING_KEY = "sweep-pending"
WANTED_KEY = "sweep-wanted"
STATE_WORDS = {RUNNING: "running", DONE: "finished", FAILED: "failed", STOPPED: "stopped"}


def known_sweeps(rt) -> dict[str, str | None]:
    """State files of the sweeps this workspace knows, newest first -> the job's name (None: started
    from the command line without the dashboard)."""
    found: dict[str, tuple[float, str | None]] = {}
    for job in rt.jobs():
        if job.meta.get("kind") == "sweep" and job.meta.get("state_file"):
            found[job.meta["state_file"]] = (job.created_at, job.name)
    for p in Path(rt.workspace.outputs_dir).glob("bench/sweep-*/state.json"):
        try:
            mtime = p.stat().st_mtime
        except OSError:
            continue
        found.setdefault(str(p), (mtime, None))
    return {k: v[1] for k, v in sorted(found.items(), key=lambda kv: -kv[1][0])}


def sweep_panel(rt) -> None:
    st.subheader("Sweep")
    st.caption("Relaunch a server in each configuration (steps × top-k × draft tokens, and without speculation), "
               "benchmark it at each load, then give it back its original configuration. Results land in the "
               "comparison above, tagged with the sweep's id.")
    servers = rt.fleet.names()
    if not servers:
        st.info("No server yet: add a `[[server]]` to the workspace file (a sweep relaunches a managed server).",
                icon=":material/dns:")
    else:
        _form(rt, servers)
        _pending(rt)
    sweeps = known_sweeps(rt)
    if not sweeps:
        st.caption("No sweep yet.")
        return
    paths = list(sweeps)
    wanted = st.session_state.pop(WANTED_KEY, None)
    if wanted in paths:
        st.session_state["sweep-shown"] = wanted
    shown = st.selectbox("Sweep", paths, key="sweep-shown", format_func=lambda p: _title(p, sweeps[p]),
                         persist_state="session")
    live_sweep(rt, shown, sweeps[shown])


def _title(path: str, job: str | None) -> str:
    """A label that stays the same while the sweep runs (a changing one would reset the choice)."""
    return job or Path(path).parent.name


# -- the form --------------------------------------------------------------------------------

def _server_help(routers: list[str]) -> str:
    """Why the sweep's choice lists the workspace's servers and never a router."""
    text = ("a sweep relaunches this one server in each configuration, then gives it back its own. A [[router]] "
            "is not offered: a sweep changes one server's launch, and the other servers behind the router would "
            "keep theirs, so each figure would mix configurations")
    if routers:
        text += (f". To measure through {', '.join(routers)}, use the Run a benchmark tab (it takes a router; "
                 "accept_len is then not measured)")
    return text


def _form(rt, servers: list[str]) -> None:
    with st.form("sweep-form"):
        st.markdown("**Queue a sweep**")
        a, b, c = st.columns(3)
        routers = rt.fleet.router_names()
        server = a.selectbox("Server", servers, key="sweep-f-server", persist_state="session", help=_server_help(routers))
        baseline = b.radio("Baseline (speculation off)", ["also", "only", "no"], key="sweep-f-baseline", persist_state="session",
                           horizontal=True, help="the baseline runs first, at the same loads")
        mode = c.selectbox("Benchmark", MODES, key="sweep-f-mode", persist_state="session",
                           help="auto: SGLang's bench_serving where the server's environment has sglang, "
                                "else the built-in client")
        spec = rt.fleet.config(server).speculative
        a, b, c = st.columns(3)
        steps = a.text_input("Steps", key="sweep-f-steps", persist_state="session", placeholder=f"server's: {spec.num_steps or 'auto'}",
                             help="comma-separated, e.g. 3,5; empty keeps the server's value")
        topk = b.text_input("Top-k", key="sweep-f-topk", persist_state="session", placeholder=f"server's: {spec.eagle_topk or 'auto'}",
                            help="e.g. 1,4; at top-k 1 the draft tokens are steps + 1 (SGLang sets them so)")
        drafts = c.text_input("Draft tokens", key="sweep-f-drafts", persist_state="session",
                              placeholder=f"server's: {spec.num_draft_tokens or 'auto'}", help="e.g. 4,8")
        d = st.columns(5)
        conc = d[0].text_input("Concurrency", "1", key="sweep-f-conc", persist_state="session", help="loads, e.g. 1,16")
        prompts = d[1].number_input("Prompts per load", 1, 1_000_000, 200, key="sweep-f-prompts", persist_state="session")
        in_len = d[2].number_input("Input tokens", 1, 10_000_000, 1024, key="sweep-f-in", persist_state="session")
        out_len = d[3].number_input("Output tokens", 1, 10_000_000, 512, key="sweep-f-out", persist_state="session")
        ready = d[4].number_input("Ready timeout (s)", 10, 86_400, 1800, key="sweep-f-ready", persist_state="session",
                                  help="how long each relaunch may take to become ready")
        review = st.form_submit_button("Review", icon=":material/preview:")
    if not review:
        return
    try:
        lists = {name: parse_int_list(text, label) for name, text, label in (
            ("steps", steps, "Steps"), ("topk", topk, "Top-k"), ("draft_tokens", drafts, "Draft tokens"),
            ("concurrency", conc, "Concurrency")) if text.strip()}
        plan = SweepPlan.build(server=server, baseline=baseline == "also", baseline_only=baseline == "only",
                               mode=mode, num_prompts=int(prompts), input_len=int(in_len), output_len=int(out_len),
                               ready_timeout_s=float(ready), **lists)
        configs, notes = expand(plan, rt.fleet.config(server))
    except PlanError as exc:
        st.session_state.pop(PENDING_KEY, None)
        st.error("Not queued: " + "; ".join(exc.problems), icon=":material/error:")
        return
    st.session_state[PENDING_KEY] = (plan, [c.to_dict() for c in configs], notes)


def _pending(rt) -> None:
    pending = st.session_state.get(PENDING_KEY)
    if pending is None:
        return
    plan, configs, notes = pending
    with st.container(border=True):
        n, loads = len(configs), len(plan.concurrency)
        st.markdown(f"**{n} configuration{'s' if n != 1 else ''} × {loads} load{'s' if loads != 1 else ''}** on "
                    f"**{plan.server}**: each is a preflight, a relaunch (requests in flight to {plan.server} fail), "
                    f"a wait until ready and {fmt.count(plan.num_prompts)} prompts of {fmt.count(plan.input_len)}/"
                    f"{fmt.count(plan.output_len)} tokens per load; then {plan.server} is restored.")
        st.dataframe(pd.DataFrame([{"#": i + 1, "configuration": c["label"], "steps": c["steps"],
                                    "top-k": c["topk"], "draft tokens": c["draft_tokens"]}
                                   for i, c in enumerate(configs)]), hide_index=True)
        for note in notes:
            st.caption(fmt.data_markdown(f"ⓘ {note}"))
        if not show_data_lock(rt):  # a command line
            st.code(preview(plan), language="bash")
        busy = [j.name for j in rt.jobs() if j.meta.get("kind") == "sweep" and j.meta.get("server") == plan.server
                and (v := rt.supervisor.view(j.name)) is not None and v.live]
        lock = control_lock(rt) or (f"{busy[0]} is still running on this server" if busy else "")
        x, y, _ = st.columns([1, 1, 4])
        if x.button("Start", key="sweep-start-go", type="primary", icon=":material/play_arrow:",
                    disabled=bool(lock), help=lock or None):
            st.session_state.pop(PENDING_KEY, None)
            sweep_id = time.strftime("%Y%m%d-%H%M%S")
            spec = sweep_process_spec(rt.workspace, plan.server, sweep_id, command_line(plan))
            path = str(state_path(rt.workspace, plan.server, sweep_id))
            try:
                rt.start_job(spec, {"kind": "sweep", "server": plan.server, "sweep_id": sweep_id,
                                    "state_file": path}, actor=actor(), source="dashboard")
            except Exception as exc:  # refused or failed: the audit log has it
                st.error(f"Could not start {spec.name}: {exc}")
            else:
                st.session_state[WANTED_KEY] = path
                st.rerun()
        if y.button("Cancel", key="sweep-start-cancel"):
            st.session_state.pop(PENDING_KEY, None)
            st.rerun()


# -- the live block --------------------------------------------------------------------------

@live_fragment(run_every=REFRESH_S)
def live_sweep(rt, path: str, job: str | None) -> None:
    s = read_state(Path(path))
    view = rt.supervisor.view(job) if job else None
    hidden = bool(data_lock(rt))  # the workspace's paths
    if view is not None:
        st.markdown(fmt.data_markdown(f"{fmt.view_badge(view).markdown()} &nbsp; **{view.name}**"
                                      + (f" · pid {view.pid}" if view.pid else "")
                                      + f" · log {path_text(view.log_path, hidden)}"))
    if s is None:
        st.info(fmt.data_markdown(f"No state yet at {path_text(path, hidden)}: the job writes it when it starts; "
                                  "its log says what it is doing."), icon=":material/hourglass_empty:")
        return
    _progress(s, view)
    if view is not None and view.live:
        _stop(rt, view)
    elif view is not None and (s.state != DONE or s.restored is not True):
        _resume(rt, view, s)
    _figures(s)
    _chart(s)
    _tables(s)
    if s.state == RUNNING:
        freshness(s.updated_at, REFRESH_S, "state written")
    else:
        st.caption(fmt.data_markdown(f"state written {fmt.age(time.time() - s.updated_at)} · "
                                     f"{path_text(path, hidden)}"))
    show_new_results(i for c in s.configs for i in (c.get("results") or {}).values())


def _progress(s: SweepState, view) -> None:
    n = len(s.configs)
    if s.state == RUNNING:
        i = s.current if s.current is not None else 0
        label = s.configs[i]["label"] if s.configs else ""
        detail = f" ({s.detail})" if s.detail else ""
        within = f", {fmt.count(s.done)} of {fmt.count(s.total)} requests" if s.phase == "benchmarking" and s.total \
            else ""
        stale = view is not None and not view.live
        text = f"Configuration {i + 1} of {n}: {label} · {s.phase}{detail}{within}"
        st.progress(s.fraction, text=fmt.data_markdown(text))
        if stale and (view.exit_code or 0) > 0:
            st.error(fmt.data_markdown(f"**The sweep failed** ({fmt.view_badge(view).label}) without writing its "
                                       "final state; its log says why. Start it again (same command) to resume "
                                       "and restore."), icon=":material/error:")
        elif stale:
            st.warning("The job is no longer running but its state says running: it was killed before it could "
                       "restore the server. Start it again (same command) to resume and restore.",
                       icon=":material/warning:")
    else:
        word = STATE_WORDS.get(s.state, s.state)
        restored = {True: "restored", False: "NOT restored", None: "not restored yet"}[s.restored]
        msg = f"Sweep {s.sweep_id} {word}: {s.n_done} of {n} configurations measured; {s.server} {restored}."
        (st.success if s.state == DONE and not s.errors else st.warning if s.state == STOPPED else st.error)(
            fmt.data_markdown(msg))
    for e in s.errors:
        st.error(fmt.data_markdown(e), icon=":material/error:")
    for note in s.notes:
        st.caption(fmt.data_markdown(f"ⓘ {note}"))


def _baselines(s: SweepState) -> dict[int, float]:
    out = {row["concurrency"]: row["baseline_tok_s"] for row in s.check if row.get("baseline_tok_s")}
    for r in s.results:
        if r["config"] == "baseline" and r.get("output_tok_s"):
            out[r["concurrency"]] = r["output_tok_s"]
    return out


def _figures(s: SweepState) -> None:
    base = _baselines(s)
    spec = [r for r in s.results if r["config"] != "baseline" and r.get("output_tok_s")]
    best = max(spec, key=lambda r: r["output_tok_s"] / base.get(r["concurrency"], r["output_tok_s"]), default=None)
    elapsed = (s.updated_at if s.finished else time.time()) - s.started_at
    cols = st.columns(4)
    cols[0].metric("Configurations measured", f"{s.n_done} of {len(s.configs)}")
    cols[1].metric("Results stored", fmt.count(len(s.results)))
    cols[2].metric("Elapsed", fmt.duration(elapsed))
    if best is None:
        cols[3].metric("Best speculative", fmt.NA, help="no speculative result yet")
    else:
        b = base.get(best["concurrency"])
        label = next(c["label"] for c in s.configs if c["key"] == best["config"])
        delta = None if b is None else f"{(best['output_tok_s'] / b - 1) * 100:+.0f}% vs baseline"
        cols[3].metric("Best speculative", fmt.tok_s(best["output_tok_s"]), delta=delta,
                       help=f"{label} at concurrency {best['concurrency']}" + (
                           f"; baseline {fmt.tok_s(b)} at the same load" if b else "; no baseline at this load"))


def _chart(s: SweepState) -> None:
    base = _baselines(s)
    rows = [r for r in s.results if r["config"] != "baseline" and r.get("output_tok_s")]
    if not rows:
        return
    labels = {c["key"]: c["label"] for c in s.configs}
    ratio = all(r["concurrency"] in base for r in rows)
    fig = charts.figure("Speed against the baseline at the same load" if ratio else "Output tok/s",
                        y_title="× baseline tok/s" if ratio else "tok/s", range_buttons=False, height=320)
    for conc in sorted({r["concurrency"] for r in rows}):
        these = [r for r in rows if r["concurrency"] == conc]
        ys = [r["output_tok_s"] / base[conc] if ratio else r["output_tok_s"] for r in these]
        fig.add_trace(go.Bar(
            x=[labels.get(r["config"], r["config"]) for r in these], y=ys, name=f"concurrency {conc}",
            marker_color=charts.colour_for(f"concurrency {conc}"),
            text=[f"{y:.2f}×" if ratio else f"{y:.1f}" for y in ys], textposition="outside",
            customdata=[[r["output_tok_s"], r.get("accept_len") or 0.0] for r in these],
            hovertemplate="%{x}<br>%{customdata[0]:.1f} tok/s, accept_len %{customdata[1]:.2f}"
                          f"<extra>concurrency {conc}</extra>"))
    if ratio:
        fig.add_hline(y=1.0, line_dash="dash", line_color="#6b7280", annotation_position="bottom right",
                      annotation_text="baseline")
    fig.update_layout(hovermode="closest", barmode="group")
    fig.update_yaxes(rangemode="tozero")
    charts.legend_below(fig)
    st.plotly_chart(fig, key="sweep-chart")
    if ratio:
        st.caption("Above 1× speculation pays at that load. Baseline (speculation off) at each load: " + ", ".join(
            f"{fmt.tok_s(base[c])} at concurrency {c}" for c in sorted(base)) + ".")


def _tables(s: SweepState) -> None:
    res = {(r["config"], r["concurrency"]): r for r in s.results}
    concs = s.plan.get("concurrency") or []
    rows = []
    for i, c in enumerate(s.configs):
        row = {"#": i + 1, "configuration": c["label"], "status": c["status"]}
        for conc in concs:
            r = res.get((c["key"], conc))
            row[f"tok/s @{conc}"] = fmt.tok_s(r["output_tok_s"]).replace(" tok/s", "") if r else fmt.NA
            row[f"accept_len @{conc}"] = fmt.accept_len(r.get("accept_len")) if r and not c["baseline"] else "—"
        row["error"] = c.get("error") or ""
        rows.append(row)
    st.dataframe(pd.DataFrame(rows), hide_index=True)
    if not s.check:
        return
    st.markdown("**Break-even model against the measurements** — each configuration's round cost (in plain decode "
                "steps) is predicted from the other configurations at the same load; predicted tok/s = baseline "
                "tok/s × measured accept_len ÷ that cost.")
    table = [{"configuration": r["label"], "concurrency": r["concurrency"],
              "measured tok/s": fmt.tok_s(r["measured_tok_s"]).replace(" tok/s", ""),
              "predicted tok/s": fmt.tok_s(r["predicted_tok_s"]).replace(" tok/s", ""),
              "error": fmt.pct(r["error_pct"]) if r["error_pct"] is not None else fmt.NA,
              "accept_len": fmt.accept_len(r["accept_len"]),
              "break-even accept_len": fmt.accept_len(r["cost_ratio"]),
              "vs baseline": fmt.NA if r["pays"] is None else ("faster" if r["pays"] else "slower")}
             for r in s.check]
    st.dataframe(pd.DataFrame(table), hide_index=True)
    with st.expander("How each prediction was made"):
        st.markdown(fmt.data_markdown("\n".join(f"- **{r['label']}** at concurrency {r['concurrency']}: {r['basis']}"
                                                 for r in s.check)))
    csv = pd.DataFrame(s.check).to_csv(index=False)
    st.download_button("Model vs measured (CSV)", csv, file_name=f"sweep-{s.sweep_id}-check.csv",
                       mime="text/csv", key="sweep-check-csv", icon=":material/download:")


def _stop(rt, view) -> None:
    stop_control(rt, view, key="sweep", label="Stop the sweep",
                 help="the job ends its benchmark, restores the server, then exits",
                 question=f"Stop **{view.name}**? Results stored so far stay. It restores the server's original "
                          f"configuration before it exits (SIGKILL after {view.spec.stop_grace_s:.0f} s); running it "
                          "again with the same state file resumes.",
                 done="Stop: requested")


def _resume(rt, view, s: SweepState) -> None:
    """Start the job again with the same command: it skips what is measured and restores the server."""
    lock = control_lock(rt)
    left = sum(1 for c in s.configs if c["status"] != DONE)
    if st.button("Resume the sweep", key="sweep-resume", icon=":material/play_arrow:", disabled=bool(lock),
                 help=lock or f"run the same command again: the {left} configuration(s) not measured yet, "
                              "then the restore"):
        try:
            rt.start(view.name, actor=actor(), source="dashboard")
        except Exception as exc:  # refused or failed: the audit log has it
            st.error(f"Could not resume {view.name}: {exc}")
        else:
            st.toast("Resume: started", icon=":material/check_circle:")
