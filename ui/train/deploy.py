"""The Training page's deploy panel: a checkpoint to a benchmarked server, in one guided flow.

Choose the server, the speculative values (the server's by default) and the load (the stored
baseline's by default); the checkpoint's preflight against the server's target shows before
anything starts.  Start runs ``train deploy`` as a supervised job (backend/flows/deploy_job.py);
its state file drives the live step list, and at the end the result row sits beside the baseline
and the previous draft, with the speedup and the break-even accept_len.
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path

import streamlit as st

from backend.flows.deploy import (DONE, FAILED, KEEP, RESTORE, RUNNING, SKIPPED, STOPPED, DeployRequest, plan_loads,
                                  read_state, speculative_values, stored_baselines, DeployError)
from backend.flows.deploy_job import (command_line, deploy_jobs, start_deploy, stored_results)
from ui import fmt
from ui.auth import control_lock, data_lock, live_fragment
from ui.components import code_span, confirm_box, findings_list, freshness, path_text
from ui.context import actor

REFRESH_S = 2
_ICON = {DONE: ":green[✔ done]", FAILED: ":red[✖ failed]", STOPPED: ":orange[■ stopped]",
         RUNNING: ":orange[● running]", SKIPPED: ":grey[– skipped]", "pending": ":grey[○ pending]"}
_KEY = "train-deploy"


def deploy_panel(rt, run_name: str | None, checkpoint_path: str | None) -> None:
    """Deploy ``checkpoint_path`` (of training run ``run_name``) to a server of the workspace."""
    st.subheader("Deploy a checkpoint")
    st.caption("Preflight it against a server's target, relaunch the server with it as its EAGLE3 draft, "
               "benchmark it at the baseline's load, and compare with the baseline and the previous draft.")
    job = _job_to_show(rt, checkpoint_path)
    if job is not None:
        _live(rt, job.name, job.meta["state"])
    if not checkpoint_path:
        st.info("No checkpoint chosen: the run has saved none yet. The newest is chosen here as soon as the "
                "run saves one; pick another in the Checkpoints tab.", icon=":material/info:")
        return
    servers = rt.fleet.names()
    if not servers:
        st.info("No server in the workspace: add a [[server]] entry to the workspace file to deploy to.",
                icon=":material/info:")
        return
    _form(rt, run_name, checkpoint_path, servers)


def _job_to_show(rt, checkpoint_path: str | None):
    """The deploy job started from this session, else the newest one of this checkpoint."""
    jobs = deploy_jobs(rt)
    wanted = st.session_state.get(f"{_KEY}-job")
    for j in jobs:
        if j.name == wanted:
            return j
    if checkpoint_path:
        ck = str(Path(checkpoint_path).expanduser().resolve())
        return next((j for j in jobs if j.meta.get("checkpoint") == ck), None)
    return None


# -- the form -------------------------------------------------------------------------------------

def _form(rt, run_name: str | None, checkpoint_path: str, servers: list[str]) -> None:
    from backend.flows.checkpoint_check import preflight_checkpoint

    ckpt = str(Path(checkpoint_path).expanduser().resolve())
    with st.container(border=True):
        a, b, c, d = st.columns([2, 1, 1, 1])
        errors_on = _preflight_errors(rt, ckpt, servers)
        if st.session_state.get(f"{_KEY}-server") not in servers:  # default: the first the checkpoint passes on
            st.session_state[f"{_KEY}-server"] = next((s for s in servers if not errors_on[s]), servers[0])
        server = a.selectbox("Server", servers, key=f"{_KEY}-server",
                             format_func=lambda s: s + (f" ({errors_on[s]} preflight error(s))" if errors_on[s]
                                                        else ""),
                             help="the workspace server whose draft the checkpoint replaces; the first where the "
                                  "checkpoint passes preflight is chosen", persist_state="session")
        cfg = rt.fleet.config(server)
        steps0, topk0, ndt0 = speculative_values(cfg, DeployRequest(ckpt, server))
        steps = b.number_input("Steps", 1, 64, steps0, key=f"{_KEY}-steps-{server}",
                               help="--speculative-num-steps (default: the server's)", persist_state="session")
        topk = c.number_input("Top-k", 1, 64, topk0, key=f"{_KEY}-topk-{server}",
                              help="--speculative-eagle-topk (default: the server's)", persist_state="session")
        ndt = d.number_input("Draft tokens", 1, 1024, ndt0, key=f"{_KEY}-ndt-{server}",
                             help="--speculative-num-draft-tokens (default: the server's)", persist_state="session")
        findings = preflight_checkpoint(ckpt, cfg.model_path, server=cfg, num_steps=int(steps), eagle_topk=int(topk),
                                        num_draft_tokens=int(ndt))
        errors = [f for f in findings if f.severity == "error"]
        hidden = bool(data_lock(rt))  # the workspace's paths and the command line
        st.markdown(fmt.data_markdown(f"**Preflight** of {code_span(Path(ckpt).name)} against "
                                      f"{path_text(cfg.model_path, hidden)}: "
                                      + (f":red[{len(errors)} error(s): the server will not be touched]" if errors
                                         else ":green[no errors]")))
        findings_list(findings, info=False)

        try:
            baselines = stored_baselines(stored_results(rt.store, rt.fleet, server), server, cfg.model_path)
        except Exception as exc:  # the store unreadable: say so, the form still works with a given load
            st.warning(f"The stored benchmarks could not be read: {exc}")
            baselines = []
        try:
            results = stored_results(rt.store, rt.fleet, server)
        except Exception:  # said above with the baselines
            results = []
        req, ready = _load_inputs(server, ckpt, baselines, demo=bool(getattr(rt.workspace, "is_demo", False)))
        if ready:
            _estimate_line(req, baselines, results, cfg.baseline_tok_s)
        e, f, g = st.columns([2, 2, 1])
        after = e.radio("Afterwards", [KEEP, RESTORE], horizontal=True, key=f"{_KEY}-after",
                        format_func=lambda x: "keep the checkpoint on the server" if x == KEEP else
                        "put the previous config back", persist_state="session")
        mode = f.radio("Benchmark client", ["auto", "builtin", "sglang"], horizontal=True, key=f"{_KEY}-mode",
                       help="auto: SGLang's bench_serving where the server's environment has sglang, "
                            "else the built-in client", persist_state="session")
        timeout = g.number_input("Ready timeout (s)", 10, 7200, 900, key=f"{_KEY}-timeout", persist_state="session")
        req = DeployRequest(**{**req.to_dict(), "concurrency": tuple(req.concurrency), "num_steps": int(steps),
                               "eagle_topk": int(topk), "num_draft_tokens": int(ndt), "after": after,
                               "mode": mode, "run_name": run_name, "ready_timeout_s": float(timeout)})
        if not hidden:
            st.caption(fmt.data_markdown("Runs as a supervised job: " + code_span(shlex.join(
                ["python", "-m", "backend.cli", "train", "deploy", *command_line(req)]))))
        lock = control_lock(rt)
        blocked = lock or ("preflight found errors" if errors else "") or ("" if ready else "choose the load")
        if st.button("Start deploy", key=f"{_KEY}-start", type="primary", icon=":material/rocket_launch:",
                     disabled=bool(blocked), help=blocked or None):
            st.session_state[f"{_KEY}-confirm"] = True
            st.session_state[f"{_KEY}-pending"] = req
    pending = st.session_state.get(f"{_KEY}-pending")
    if pending is not None and confirm_box(
            f"{_KEY}-confirm", fmt.data_markdown(
                f"Relaunch **{pending.server}** with {code_span(Path(pending.checkpoint).name)}? Its current run "
                "stops while the checkpoint is served and benchmarked; a failure puts the previous config back."),
            confirm_label="Yes, deploy") is True:
        st.session_state.pop(f"{_KEY}-pending", None)
        try:
            spec, _ = start_deploy(rt, pending, actor=actor(), source="dashboard")
        except Exception as exc:  # refused or failed: the audit log has it
            st.error(f"Could not start the deploy: {exc}")
        else:
            st.session_state[f"{_KEY}-job"] = spec.name
            st.rerun()


def _preflight_errors(rt, ckpt: str, servers: list[str]) -> dict[str, int]:
    """Per server, the checkpoint's preflight errors against its target with its own speculative values."""
    from backend.flows.checkpoint_check import preflight_checkpoint

    out = {}
    for name in servers:
        cfg = rt.fleet.config(name)
        steps, topk, ndt = speculative_values(cfg, DeployRequest(ckpt, name))
        try:
            findings = preflight_checkpoint(ckpt, cfg.model_path, server=cfg, num_steps=steps, eagle_topk=topk,
                                            num_draft_tokens=ndt)
        except Exception:  # an unreadable target: the form's own preflight says why
            out[name] = 1
            continue
        out[name] = sum(1 for f in findings if f.severity == "error")
    return out


# the load a deploy offers on the demo workspace (its tiny simulated server), where 200 prompts of 1024/512
# tokens with the baseline measured first take about 20 minutes
DEMO_LOAD = {"conc": "2", "n": 16, "in": 128, "out": 64}
LOAD = {"conc": "1", "n": 200, "in": 1024, "out": 512}


def load_estimate(req: DeployRequest, baselines, results, baseline_tok_s: float | None):
    """(low s, point s, high s, basis) of the benchmarking time of ``req``: its output tokens at each load
    (the baseline's run too, where one is measured first) over the output tok/s known for that load: a stored
    baseline at the same load (a point), else the newest stored result of the server (scaled by concurrency
    between none and full), else the configured single-stream ``baseline_tok_s`` (the same).  None when no
    speed of the server is known."""
    try:
        loads, _ = plan_loads(req, baselines)
    except DeployError:
        return None
    lo = point = hi = 0.0
    bases = set()
    for load in loads:
        tokens = load.num_prompts * load.output_len
        runs = 2 if (req.measure_baseline and load.baseline_id is None) else 1
        same = next((b for b in baselines if b.load.key() == load.key() and b.results.output_tok_s), None)
        if same is not None:
            t = runs * tokens / same.results.output_tok_s
            lo, point, hi = lo + t, point + t, hi + t
            bases.add(f"baseline #{same.id}'s {fmt.tok_s(same.results.output_tok_s)} at this load")
            continue
        near = next((r for r in results if r.results.output_tok_s and r.load.concurrency), None)
        if near is not None:
            per_stream = near.results.output_tok_s / max(1, near.load.concurrency)
            bases.add(f"result #{near.id}'s {fmt.tok_s(per_stream)} per request")
        elif baseline_tok_s:
            per_stream = float(baseline_tok_s)
            bases.add(f"the configured single-stream {fmt.tok_s(per_stream)}")
        else:
            return None
        c = max(1, min(load.concurrency, load.num_prompts))
        slow, fast = runs * tokens / per_stream, runs * tokens / (per_stream * c)
        lo, hi, point = lo + fast, hi + slow, point + (fast * slow) ** 0.5
    return lo, point, hi, "; ".join(sorted(bases))


def _estimate_line(req: DeployRequest, baselines, results, baseline_tok_s: float | None) -> None:
    try:
        loads, _ = plan_loads(req, baselines)
    except DeployError:
        return
    tokens = sum(ld.num_prompts * ld.output_len * (2 if req.measure_baseline and ld.baseline_id is None else 1)
                 for ld in loads)
    est = load_estimate(req, baselines, results, baseline_tok_s)
    what = f"{fmt.count(tokens)} output tokens to generate"
    if est is None:
        st.caption(f"**Benchmark time: {fmt.NA}**: no speed of this server is known yet (no stored benchmark and "
                   f"no baseline_tok_s) · {what}, plus the relaunch.")
        return
    lo, point, hi, basis = est
    band = fmt.duration(point) if hi - lo < 1 else f"{fmt.duration(lo)}-{fmt.duration(hi)} (about {fmt.duration(point)})"
    st.caption(f"**Benchmark time: {band}** · {what} at {basis}, plus the relaunch.")


def _load_inputs(server: str, ckpt: str, baselines, demo: bool = False) -> tuple[DeployRequest, bool]:
    """The load part of the request, and whether it is complete."""
    options = ["baseline", "given"] if baselines else ["given"]
    if baselines:
        b = baselines[0]
        lo = b.load
        st.markdown(f"**Load**: the newest baseline of {server} is result #{b.id}: concurrency "
                    f"{lo.concurrency if lo.concurrency is not None else fmt.NA}, "
                    f"{fmt.count(lo.num_prompts)} prompts of {lo.input_len or fmt.NA}/{lo.output_len or fmt.NA} "
                    f"tokens, {fmt.tok_s(b.results.output_tok_s)}.")
    else:
        st.warning(f"No baseline of {server} is stored, so there is nothing to compare with yet. Give the load "
                   "below and measure the baseline first (the server runs without speculation for it), or "
                   "benchmark the server without speculation and come back.", icon=":material/warning:")
    how = st.radio("Measure at", options, horizontal=True, key=f"{_KEY}-load-{server}",
                   format_func=lambda x: "the baseline's load" if x == "baseline" else "a load I give", persist_state="session")
    if how == "baseline":
        req = DeployRequest(ckpt, server)
        try:
            loads, where = plan_loads(req, baselines)
        except DeployError as exc:
            st.error(str(exc))
            return req, False
        st.caption(f"Measures at {where}.")
        return req, True
    dflt = DEMO_LOAD if demo else LOAD
    c = st.columns(4)
    conc = c[0].text_input("Concurrency", dflt["conc"], key=f"{_KEY}-conc", help="several values, separated by "
                           "spaces, run one after the other: `1 4 16`", persist_state="session")
    n = c[1].number_input("Prompts", 1, 100_000, dflt["n"], key=f"{_KEY}-n", persist_state="session")
    i = c[2].number_input("Input tokens", 1, 1_000_000, dflt["in"], key=f"{_KEY}-in", persist_state="session")
    o = c[3].number_input("Output tokens", 1, 1_000_000, dflt["out"], key=f"{_KEY}-out", persist_state="session")
    measure = st.checkbox("Measure missing baselines", value=not baselines, key=f"{_KEY}-measure",
                          help="where no baseline is stored at this load, measure one first: the server runs "
                                "without speculation for it", persist_state="session")
    try:
        values = tuple(int(x) for x in conc.replace(",", " ").split())
    except ValueError:
        st.error(f"Concurrency {conc!r}: write whole numbers, e.g. `1 4 16`.")
        return DeployRequest(ckpt, server), False
    if not values or min(values) < 1:
        st.error("Concurrency: at least one value, each 1 or more.")
        return DeployRequest(ckpt, server), False
    req = DeployRequest(ckpt, server, concurrency=values, num_prompts=int(n), input_len=int(i), output_len=int(o),
                        measure_baseline=bool(measure))
    return req, True


# -- the job, live ----------------------------------------------------------------------------------

@live_fragment(run_every=REFRESH_S)
def _live(rt, name: str, state_file: str) -> None:
    view = rt.supervisor.view(name)
    state = read_state(state_file)
    live = view is not None and view.live
    hidden = bool(data_lock(rt))  # the workspace's paths
    with st.container(border=True):
        head = f"**{name}**"
        if view is not None:
            head = f"{fmt.view_badge(view).markdown()} &nbsp; " + head + f" · log {path_text(view.log_path, hidden)}"
        st.markdown(fmt.data_markdown(head))
        if state is None:
            st.info(fmt.data_markdown(f"No state yet: {path_text(state_file, hidden)} is written when the job "
                                      "starts."), icon=":material/hourglass_empty:")
            return
        if state.label:
            ckpt = state.request.get("checkpoint")
            shown = code_span(Path(str(ckpt)).name if hidden else ckpt)  # the folder's name only, when paths are hidden
            st.markdown(fmt.data_markdown(f"{shown} → **{state.request.get('server')}** · {state.label}"))
        if state.state == RUNNING and not live and view is not None:
            st.error(fmt.data_markdown(
                f"The job ended without finishing its steps ({fmt.state_text(view.state.value, view.exit_code)}); "
                f"its log {path_text(view.log_path, hidden)} says why. The server may need a look on the Servers "
                "page."))
        _steps(state, live)
        if state.state == RUNNING and live:
            freshness(state.updated_at, REFRESH_S, "state written")
            lock = control_lock(rt)
            if st.button("Stop", key=f"{_KEY}-stop", icon=":material/stop:", disabled=bool(lock), help=lock or
                         "SIGTERM: the job stops and puts the previous server config back"):
                st.session_state[f"{_KEY}-confirm-stop"] = True
            if confirm_box(f"{_KEY}-confirm-stop", f"Stop **{name}**? The benchmark ends and the server gets its "
                           "previous config back.", confirm_label="Yes, stop") is True:
                try:
                    rt.stop(name, actor=actor(), source="dashboard")
                except Exception as exc:  # refused: the audit log has it
                    st.error(f"Could not stop {name}: {exc}")
        if state.rows:
            _result(state)
    # the job's results changed what the form shows (a measured baseline, the server's config): once, as the
    # job finishes, the whole panel is drawn again
    seen = st.session_state.get(f"{_KEY}-seen-{name}")
    st.session_state[f"{_KEY}-seen-{name}"] = state.state
    if seen == RUNNING and state.finished:
        st.rerun(scope="app")


def _steps(state, live: bool) -> None:
    now = time.time()
    lines = []
    for s in state.steps:
        took = ""
        if s.started_at:
            took = f" · {fmt.duration((s.ended_at or now) - s.started_at)}"
        msg = f" — {s.message}" if s.message else ""
        icon = ":grey[○ not run]" if s.status == "pending" and state.finished else _ICON.get(s.status, s.status)
        lines.append(f"- {icon} **{s.title}**{took}{msg}")
    st.markdown(fmt.data_markdown("\n".join(lines)))
    cur = state.current
    if cur is not None and live:
        st.caption(fmt.data_markdown(f"{cur.title}: {state.detail or 'working'} · elapsed "
                                     f"{fmt.duration(now - state.started_at)}"))
        if cur.name in ("benchmark", "baseline") and state.total:
            st.progress(min(1.0, state.done / state.total), text=f"{fmt.count(state.done)} of "
                        f"{fmt.count(state.total)} requests")
    if state.state in (FAILED, STOPPED):
        what = "stopped" if state.state == STOPPED else "failed"
        step = state.step(state.failed_step).title if state.failed_step else "a step"
        restore = state.step("restore")
        where = {"previous": "The server runs its previous configuration.",
                 "checkpoint": "The server serves the checkpoint.",
                 "unknown": "How the server was left is not known: check it on the Servers page."}
        text = f"**{step}** {what}: {state.error}\n\n**Server:** {state.restore or restore.message} " \
               f"{where.get(state.server_left, '')}"
        (st.warning if state.state == STOPPED else st.error)(fmt.data_markdown(text), icon=":material/error:")


def _result(state) -> None:
    """The result row next to the baseline and the previous draft, per load."""
    for r in state.row_objects():
        st.markdown(f"**Result at concurrency {r.concurrency}, {r.input_len or fmt.NA}/{r.output_len or fmt.NA} "
                    "tokens**")
        m = st.columns(4)
        m[0].metric("Output tok/s", fmt.tok_s(r.tok_s),
                    delta=None if r.baseline_tok_s is None or r.tok_s is None else
                    f"{r.tok_s - r.baseline_tok_s:+.1f} tok/s vs baseline")
        m[1].metric("Speedup vs baseline", fmt.NA if r.speedup is None else f"{r.speedup:.2f}×",
                    help=r.reason or "output tok/s over the baseline's at the same concurrency and lengths")
        m[2].metric("accept_len", fmt.accept_len(r.accept_len), help="this run's, from the server's metrics or log")
        m[3].metric("Break-even accept_len", fmt.accept_len(r.break_even_accept_len),
                    help=r.reason or "the accept_len at which a speculative round pays for its cost")
        rows = [{"": "Baseline (no speculation)", "result": _id(r.baseline_id), "tok/s": fmt.tok_s(r.baseline_tok_s),
                 "accept_len": fmt.NA, "vs baseline": "1.00×" if r.baseline_tok_s else fmt.NA,
                 "break-even accept_len": fmt.NA}]
        if r.previous_id is not None:
            rows.append({"": f"Previous draft: {Path(r.previous_draft or '?').name}", "result": _id(r.previous_id),
                         "tok/s": fmt.tok_s(r.previous_tok_s), "accept_len": fmt.accept_len(r.previous_accept_len),
                         "vs baseline": _x(r.previous_speedup),
                         "break-even accept_len": fmt.accept_len(r.previous_break_even_accept_len)})
        name = Path(str(state.request.get("checkpoint") or "?")).name
        rows.append({"": f"This checkpoint: {name}", "result": _id(r.result_id), "tok/s": fmt.tok_s(r.tok_s),
                     "accept_len": fmt.accept_len(r.accept_len), "vs baseline": _x(r.speedup),
                     "break-even accept_len": fmt.accept_len(r.break_even_accept_len)})
        st.dataframe(rows, hide_index=True, width="stretch",
                     column_config={"": st.column_config.TextColumn(width="large"),
                                    "result": st.column_config.TextColumn(width="small"),
                                    "break-even accept_len": st.column_config.TextColumn(
                                        "break-even", help="accept_len at which speculation matches the baseline")})
        if r.explanation:
            st.markdown(fmt.data_markdown(r.explanation))
        elif r.reason:
            st.info(fmt.data_markdown(f"Speedup N/A: {r.reason}."), icon=":material/info:")


def _id(v: int | None) -> str:
    return f"#{v}" if v is not None else fmt.NA


def _x(v: float | None) -> str:
    return fmt.NA if v is None else f"{v:.2f}×"
