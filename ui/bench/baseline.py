"""Servers page: measure a server's baseline where none is stored at the load it runs.

The measurement is a baseline-only sweep (``bench sweep SERVER --baseline-only``), a supervised
job: it relaunches the server without speculation, benchmarks it at the chosen concurrencies,
stores each result, and restores the server as it was.  This module words the offer, draws the
form that starts the job, and follows the job's state file.
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path

import streamlit as st

from backend.bench import baseline
from backend.flows.sweep import DONE, RUNNING, command_line, preview, read_state, state_path, sweep_process_spec
from backend.flows.sweep_plan import PlanError, SweepPlan, parse_int_list
from ui import fmt
from ui.components import code_span, path_text
from ui.auth import control_lock, data_lock, show_data_lock
from ui.context import actor

OPEN = "srv-measure-open"
KIND = "baseline-sweep"


def offer(server: str, choice: baseline.BaselineChoice, running: int | None, model: str) -> None:
    """Say that no baseline is stored (at all, or at the concurrency the server runs) and how to measure it."""
    at = running if running else 1
    if not choice.stored:
        left_out = (f"; {choice.unplaced:,} without a recorded concurrency cannot be placed" if choice.unplaced
                    else "")
        head = (f"**No measured baseline of this target is stored** (a benchmark without speculation on "
                f"{code_span(model)}{left_out}). Until one is, tok/s is compared with the configured single-stream "
                f"`baseline_tok_s` (the fallback below).")
    else:
        head = (f"**No baseline measured at concurrency {at}** (measured at "
                f"{', '.join(map(str, choice.measured))}).")
    st.markdown(fmt.data_markdown(f"{head} Measure it at concurrency {at} with **Measure baseline…** under Control, "
                                  f"or run {code_span(shlex.join(baseline.sweep_argv(server, at)))}: it relaunches "
                                  "the server without speculation, benchmarks it and restores it."))


def _jobs(rt, server: str) -> list:
    return [j for j in rt.jobs() if j.meta.get("kind") == KIND and j.meta.get("server") == server]


def measuring(rt, server: str) -> bool:
    """A baseline measurement of ``server`` runs now."""
    for job in _jobs(rt, server):
        view = rt.supervisor.view(job.name)
        if view is not None and view.live:
            return True
    return False


def close_panel() -> None:
    st.session_state[OPEN] = False
    st.session_state.pop("srv-measure-conc", None)  # the next form starts from the concurrency then


def panel(rt, server: str, running: int | None) -> None:
    """The form: concurrencies, prompts and lengths, the command it runs, and the start."""
    head, close = st.columns([6, 1])
    head.markdown(f"**Measure the baseline of {server}**: stop it (requests in flight fail), relaunch it without "
                  "speculation, benchmark it at each concurrency, store the results, and relaunch it as it is now.")
    if close.button("Cancel", key="srv-measure-cancel"):
        close_panel()
        st.rerun()
    defaults = SweepPlan(server=server)
    # the concurrency the server ran when the form opened; what the user types then stays
    st.session_state.setdefault("srv-measure-conc", str(running or 1))
    c1, c2, c3, c4 = st.columns(4)
    conc = c1.text_input("concurrency", key="srv-measure-conc",
                         help="requests in flight; several values run one after the other, e.g. 1,16")
    prompts = c2.number_input("prompts per load", 1, 1_000_000, defaults.num_prompts, key="srv-measure-n")
    in_len = c3.number_input("input tokens", 1, 10_000_000, defaults.input_len, key="srv-measure-in")
    out_len = c4.number_input("output tokens", 1, 10_000_000, defaults.output_len, key="srv-measure-out")
    try:
        plan = SweepPlan.build(server=server, baseline_only=True, num_prompts=int(prompts), input_len=int(in_len),
                               output_len=int(out_len), concurrency=parse_int_list(conc, "concurrency"))
    except PlanError as exc:
        st.error("Not a measurement plan:\n" + "\n".join(f"- {p}" for p in exc.problems))
        return
    if not show_data_lock(rt):  # a command line
        st.code(preview(plan), language="bash", wrap_lines=True)
    lock = control_lock(rt)
    busy = measuring(rt, server)
    if st.button("Stop, measure and restore", type="primary", key="srv-measure-go", disabled=bool(lock) or busy,
                 help=lock or ("a measurement of this server runs already" if busy else None)):
        sweep_id = time.strftime("%Y%m%d-%H%M%S")
        spec = sweep_process_spec(rt.workspace, server, sweep_id, command_line(plan))
        meta = {"kind": KIND, "server": server, "state": str(state_path(rt.workspace, server, sweep_id)),
                "concurrency": list(plan.concurrency)}
        try:
            rt.start_job(spec, meta, actor=actor(), source="dashboard")
        except Exception as exc:  # refused or failed: the audit log has it
            st.error(f"Could not start {spec.name}: {exc}")
            return
        close_panel()
        st.toast(f"Measuring the baseline of {server} ({spec.name})", icon=":material/check_circle:")
        st.rerun()


def progress(rt, server: str) -> None:
    """The newest baseline measurement of ``server``: its phase while it runs, its outcome after."""
    jobs = _jobs(rt, server)
    if not jobs:
        return
    job = jobs[-1]
    state = read_state(Path(job.meta["state"]))
    view = rt.supervisor.view(job.name)
    live = view is not None and view.live
    conc = ", ".join(map(str, job.meta.get("concurrency") or []))
    if state is None:
        if live:
            st.progress(0.0, text=f"Baseline measurement {job.name} at concurrency {conc}: starting")
        return
    if state.state == RUNNING and live:
        text = f"Baseline measurement at concurrency {conc}: {state.phase}"
        if state.detail:
            text += f" · {state.detail[:120]}"
        text += f" · {fmt.duration(time.time() - state.started_at)} so far"
        st.progress(state.fraction, text=fmt.data_markdown(text))
        return
    stored = len(state.results)
    restored = {True: "server restored", False: "the server could NOT be restored: check it",
                None: "server not restored yet"}[state.restored]
    outcome = "done" if state.state == DONE else state.state if state.state != RUNNING else "ended"
    line = (f"Last baseline measurement ({job.name}, concurrency {conc}): {outcome}, {stored} result(s) stored, "
            f"{restored}.")
    if state.errors:
        line += f" Error: {state.errors[-1][:300]}"
    line += f" Log: {path_text(job.spec.log_path, bool(data_lock(rt)))}"
    (st.caption if state.state == DONE and state.restored else st.warning)(fmt.data_markdown(line))
