"""The Benchmarks page's "Run a benchmark": the form, the command it will run, and the job's live progress.

A benchmark started here is ``python -m backend.cli bench run SERVER ...`` as a supervised job
(:func:`backend.flows.bench_job.bench_process_spec`), saved with the runtime's other page-started jobs so
a dashboard restart re-adopts it.  The page reads the progress file the job rewrites as it goes.
A job whose process ended while its file still says running (killed, or a disk too full for even
its final state) shows as failed, with the last error its log gave.  :func:`space_alert` warns when
the outputs folder is low on space.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path

import streamlit as st

from backend.bench.client import BACKENDS, Load
from backend.flows.bench_job import (DONE, FAILED, RUNNING, STOPPED, Progress, bench_process_spec, command_line, job_dir,
                               load_dict, preview, progress_path, read_progress)
from backend.diskspace import low_space
from specdeck_types.bench import BenchResult
from ui import fmt
from ui.bench import charts as bench_charts
from ui.bench import data
from ui.bench import stored as bench_stored
from ui.auth import control_lock, data_lock, live_fragment, show_data_lock
from ui.components import freshness, path_text, stop_control
from ui.context import actor

REFRESH_S = 2
MODES = {"auto": "Auto: SGLang's benchmark where the server's environment has sglang, else the built-in client",
         "builtin": "Built-in client", "sglang": "SGLang's bench_serving"}
ENDPOINTS = {"sglang": "/generate", "sglang-oai-chat": "/v1/chat/completions"}
SEEN = "bench-seen-results"  # ids the page's table showed at its last run
JOB_KIND = "bench"
ROUTER_ACCEPT = ("through a router, accept_len is that of the servers behind it over the run, weighted by the "
                 "requests each took; it reads N/A with the reason where a server gives no figure, has no request "
                 "counter, or where their speculation differs")


class FormError(ValueError):
    pass


def parse_concurrency(text: str) -> list[int]:
    """``"1 4, 16"`` -> [1, 4, 16]: whole numbers of at least 1, each once, in the order given."""
    out: list[int] = []
    words = [w for w in re.split(r"[\s,;]+", text.strip()) if w]
    if not words:
        raise FormError("Concurrency: give at least one value, e.g. `1 4 16`")
    for w in words:
        try:
            n = int(w)
        except ValueError:
            raise FormError(f"Concurrency: `{w}` is not a whole number") from None
        if n < 1:
            raise FormError(f"Concurrency: `{w}` must be at least 1")
        if n not in out:
            out.append(n)
    return out


@dataclass(frozen=True)
class BenchJob:
    name: str
    progress: Path
    server: str
    started_here: bool  # started from a page (the supervisor owns it); else a `bench run` from a terminal


def bench_jobs(rt) -> list[BenchJob]:
    """The benchmark jobs this workspace knows, oldest first: those started from the page, and the
    progress files of runs started from a terminal."""
    found: dict[Path, BenchJob] = {}
    for job in rt.jobs():
        if job.meta.get("kind") == JOB_KIND and job.meta.get("progress"):
            p = Path(job.meta["progress"])
            found[p] = BenchJob(job.name, p, job.meta.get("server") or "", True)
    root = rt.workspace.outputs_dir / "bench"
    for p in sorted(root.glob("*/progress.json")) if root.is_dir() else []:
        if p not in found:
            found[p] = BenchJob(f"bench-{p.parent.name}", p, "", False)

    def started(j: BenchJob) -> float:
        prog = read_progress(j.progress)
        if prog is not None:
            return prog.started_at
        try:
            return j.progress.parent.stat().st_mtime
        except OSError:
            return 0.0

    return sorted(found.values(), key=started)


def _run_id(ws, server: str) -> str:
    base = time.strftime("%Y%m%d-%H%M%S")
    run_id, n = base, 1
    while job_dir(ws, server, run_id).exists():
        n += 1
        run_id = f"{base}-{n}"
    return run_id


def _router_label(rt, name: str) -> str:
    members = rt.fleet.router_members(name)
    return f"{name} (router: {', '.join(members)})" if members else f"{name} (router, no server behind it)"


def _router_checks(rt, name: str) -> None:
    """Where a run through router ``name`` goes, what it cannot measure, and why it would fail now."""
    cfg = rt.fleet.router_config(name)
    members = rt.fleet.router_members(name)
    view = rt.supervisor.view(name)
    if view is None or view.state.value != "RUNNING":
        st.warning(f"Router **{name}** is {fmt.view_badge(view).label}: a benchmark through it fails at once. "
                   "Start it on the Servers page first.", icon=":material/warning:")
    else:
        rv = getattr(rt, "router_sync", None)
        rv = rv.view(name) if rv is not None else None
        if rv is not None and rv.checked_at is not None and rv.healthy_workers == 0:
            st.warning(f"Router **{name}** has no healthy server behind it yet ({', '.join(members)}): start "
                       "them on the Servers page, they join it once ready.", icon=":material/warning:")
    st.caption(fmt.data_markdown(f"Requests go to the router at {cfg.url} ({cfg.policy}), which spreads them over "
                                 f"{', '.join(members) or 'no server'}; tok/s is the fleet's."))
    st.info(f"**accept_len through a router:** {ROUTER_ACCEPT}.", icon=":material/alt_route:")


def run_form(rt) -> None:
    servers = rt.fleet.names()
    routers = [r for r in rt.fleet.router_names() if r not in servers]
    if not servers:
        st.info(f"No managed server to benchmark: add a `[[server]]` to "
                f"{path_text(rt.workspace.config_path, bool(data_lock(rt)))} (the demo workspace has a simulated "
                "one). Results of benchmarks run elsewhere can be imported with "
                "`python -m backend.cli bench import FILE`.", icon=":material/info:")
        return
    with st.container(border=True):
        st.markdown("**Run a benchmark**")
        a, b, c, d, e = st.columns([3, 2, 2, 2, 2])
        if routers:
            server = a.selectbox("Server or router", servers + routers, key="bench-f-server", persist_state="session",
                                 format_func=lambda n: _router_label(rt, n) if n in routers else n,
                                 help="a server of the workspace, or a [[router]] in front of several: then the "
                                      "requests go to the router's URL and it spreads them over its servers (accept_len "
                                      "and the configuration are then those of the servers behind it); a "
                                      "configuration is read from /server_info at the run")
        else:
            server = a.selectbox("Server", servers, key="bench-f-server", persist_state="session",
                                 help="a server of the workspace; its configuration is read from /server_info at "
                                      "the run")
        conc_text = b.text_input("Concurrency", "1", key="bench-f-conc", persist_state="session",
                                 help="one or more values (e.g. `1 4 16`): each runs in turn and is stored as its own "
                                      "result")
        prompts = c.number_input("Prompts", 1, 1_000_000, 200, key="bench-f-prompts", persist_state="session",
                                 help="requests at each concurrency")
        inp = d.number_input("Input length", 1, 1_000_000, 1024, key="bench-f-in", persist_state="session", help="prompt tokens per request")
        out = e.number_input("Output length", 1, 1_000_000, 512, key="bench-f-out", persist_state="session", help="tokens to generate per request")
        x, y = st.columns([3, 2])
        mode = x.radio("Client", list(MODES), format_func=MODES.get, key="bench-f-mode", persist_state="session")
        backend = y.radio("Endpoint", BACKENDS, format_func=ENDPOINTS.get, horizontal=True, key="bench-f-backend", persist_state="session")
        where = "local"
        if getattr(rt.workspace.config, "cluster", None) is not None:  # offered only where there is a cluster
            where = y.radio("Run on", ["local", "ray"], horizontal=True, key="bench-f-where", persist_state="session",
                            format_func={"local": "this machine", "ray": "the Ray cluster"}.get,
                            help="ray: the job runs on the workspace's [cluster] (no GPU: the server does the work)")
        try:
            concs = parse_concurrency(conc_text)
        except FormError as exc:
            st.error(str(exc))
            return
        loads = [Load(concurrency=n, num_prompts=int(prompts), input_len=int(inp), output_len=int(out),
                      backend=backend) for n in concs]
        if server in routers:
            _router_checks(rt, server)
        else:
            view = rt.supervisor.view(server)
            if view is None or view.state.value != "RUNNING":
                state = fmt.view_badge(view).label
                st.warning(f"**{server}** is {state}: a benchmark needs it ready and fails at once otherwise. "
                           "Start it on the Servers page first.", icon=":material/warning:")
        st.caption(f"{len(loads)} run(s) of {fmt.count(int(prompts))} requests, {fmt.count(int(inp))} tokens in and "
                   f"{fmt.count(int(out))} out; each stored as soon as it is measured. The job will run:")
        if not show_data_lock(rt):  # a command line
            st.code(preview(server, loads, mode), language="bash", wrap_lines=True)
        busy = [j for j in bench_jobs(rt) if j.server == server and _live(rt, j)]
        lock = control_lock(rt)
        why = lock or (f"{busy[0].name} is still benchmarking {server}" if busy else "")
        if st.button("Start", key="bench-start", type="primary", icon=":material/play_arrow:", disabled=bool(why),
                     help=why or "start `bench run` as a supervised job"):
            ws = rt.workspace
            run_id = _run_id(ws, server)
            spec = bench_process_spec(ws, server, run_id, command_line(server, loads, mode), where=where)
            meta = {"kind": JOB_KIND, "server": server, "run_id": run_id, "mode": mode,
                    "progress": str(progress_path(ws, server, run_id)), "loads": [load_dict(x) for x in loads]}
            try:
                rt.start_job(spec, meta, actor=actor(), source="dashboard")
            except Exception as exc:  # refused or failed: the audit log has it
                st.error(f"Could not start {spec.name}: {exc}")
            else:
                st.session_state["bench-job-wanted"] = spec.name
                st.toast(f"{spec.name} started", icon=":material/check_circle:")
                st.rerun()


def _live(rt, job: BenchJob) -> bool:
    """Whether the job may still be measuring: its process is live (or, started from a terminal,
    its progress file says running)."""
    if job.started_here:
        view = rt.supervisor.view(job.name)
        return view is not None and view.live
    prog = read_progress(job.progress)
    return prog is not None and prog.state == RUNNING and _pid_alive(prog.pid)


def space_alert(rt) -> None:
    """A warning for each output folder (the outputs folder, its benchmark jobs') low on space."""
    outputs = Path(rt.workspace.outputs_dir)
    for low in low_space([outputs, outputs / "bench"]):
        st.warning(fmt.data_markdown(f"**Low disk space** where benchmark jobs write: {low.describe()}. A job "
                                     "that fills it fails with \"no space left on device\"."),
                   icon=":material/hard_drive:")


def _pid_alive(pid: int | None) -> bool:
    import psutil

    return bool(pid) and psutil.pid_exists(int(pid))


def ended_without_final(prog: Progress, view) -> str | None:
    """How the job ended when its progress file still says running but its process is gone; else None."""
    if prog.state != RUNNING:
        return None
    if view is not None:
        if view.live:
            return None
        return f"its process ended ({fmt.view_badge(view).label}) without writing a final state"
    if _pid_alive(prog.pid):
        return None
    return f"its process (pid {prog.pid}) is gone and never wrote a final state"


def last_error(rt, view) -> str | None:
    """The last ``error:`` line of the job's log (what the job said as it ended)."""
    if view is None:
        return None
    try:
        text, _ = rt.supervisor.tail_last(view.name, 40)
    except Exception:  # noqa: BLE001 - no log: the state line alone says what happened
        return None
    lines = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("error:")]
    return lines[-1][len("error:"):].strip() if lines else None


def _state_line(prog: Progress) -> str:
    n = len(prog.loads)
    load = prog.loads[min(prog.step, n - 1)] if n else {}
    where = f"load {min(prog.step + 1, n)} of {n}" + (f" (concurrency {load.get('concurrency')})" if load else "")
    if prog.state == RUNNING:
        return f"{prog.phase}: {where}, {fmt.count(prog.done)} of {fmt.count(prog.total)} requests"
    if prog.state == DONE:
        return f"done: {n} load(s) measured"
    return f"{prog.state} during {where}"


@live_fragment(run_every=REFRESH_S)
def live_progress(rt) -> None:
    """The running (or last) benchmark job: state, phase, requests done, results stored; Stop."""
    jobs = bench_jobs(rt)
    if not jobs:
        st.caption("No benchmark job yet in this workspace: start one below, or from a terminal with "
                   "`python -m backend.cli bench run SERVER`.")
        return
    names = [j.name for j in jobs]
    wanted = st.session_state.pop("bench-job-wanted", None)
    if wanted in names:
        st.session_state["bench-job"] = wanted
    if st.session_state.get("bench-job") not in names:
        st.session_state["bench-job"] = names[-1]
    name = st.selectbox("Benchmark job", names[::-1], key="bench-job", persist_state="session")
    job = jobs[names.index(name)]
    view = rt.supervisor.view(job.name) if job.started_here else None
    hidden = bool(data_lock(rt))  # the workspace's paths and the job's errors
    head = f"**{job.name}**"
    if view is not None:
        head = f"{fmt.view_badge(view).markdown()} &nbsp; " + head + (f" · pid {view.pid}" if view.pid else "") \
            + f" · log {path_text(view.log_path, hidden)}"
    else:
        head += " · started from a terminal"
    st.markdown(fmt.data_markdown(head))
    prog = read_progress(job.progress)
    if prog is None:
        st.info(fmt.data_markdown(f"No progress yet: {path_text(job.progress, hidden)} is not written. The job "
                                  "writes it when it starts; its log says what it is doing."),
                icon=":material/hourglass_empty:")
        return
    gone = ended_without_final(prog, view)
    state = FAILED if gone else prog.state
    colour = {DONE: "green", FAILED: "red", STOPPED: "gray"}.get(state, "orange")
    line = f"failed: {gone}" if gone else _state_line(prog)
    st.progress(prog.fraction, text=fmt.data_markdown(f":{colour}[{line}]"))
    end = prog.updated_at if state != RUNNING else time.time()
    k = st.columns(4)
    k[0].metric("state", state.upper())
    k[1].metric("requests (this load)", f"{fmt.count(prog.done)} / {fmt.count(prog.total)}")
    k[2].metric("elapsed", fmt.duration(end - prog.started_at))
    k[3].metric("results stored", fmt.count(len(prog.results)))
    if prog.results:
        stored_results(rt, prog.results)
    for bad in prog.invalid:
        st.warning(fmt.data_markdown(f"**Result #{bad.get('id')} is invalid**: {bad.get('why')}. It is kept in "
                                     "the Runs tab, marked, and left out of the comparisons."),
                   icon=":material/report:")
    log = f" Details: {path_text(view.log_path, hidden)}." if view is not None else ""
    if prog.error:
        st.error(fmt.data_markdown(f"**The benchmark {prog.state}**: {prog.error}.{log}"), icon=":material/error:")
    elif gone:
        said = last_error(rt, view)
        why = f": {said}" if said else " (it was killed or crashed)"
        st.error(fmt.data_markdown(f"**The benchmark failed**: {gone}{why}.{log}"), icon=":material/error:")
    elif prog.state == RUNNING:
        freshness(prog.updated_at, REFRESH_S, "progress written")
    _stop(rt, view)
    show_new_results(prog.results)


def result_rows(results: list[BenchResult], ids, configured, routers=()) -> list[dict]:
    """The key figures of the results ``ids`` among ``results`` (the workspace's stored ones): tok/s,
    accept_len, the speedup against the baseline at the same load and the verdict (as the Runs table).
    A result measured through one of ``routers`` without an accept_len says why."""
    valid = [r for r in results if not r.invalid]
    pairs = {p.run.id: p for p in bench_charts.speedups(valid, configured)}
    by_id = {r.id: r for r in results}
    rows = []
    for i in ids:
        r = by_id.get(int(i))
        if r is None:
            continue
        p = pairs.get(r.id)
        v = data.verdict(r, p.ratio, p.has_baseline) if p is not None and not r.invalid else None
        if r.invalid:
            word = f"invalid: {r.invalid}"
        elif r.is_baseline and r.server in routers and data.router_accept_why(r) is None:
            # stored before the servers behind a router were read: the configuration was the router's own
            word = "speculation not known: the router's /server_info does not say what its servers run"
        elif r.is_baseline:
            word = "baseline (no speculation)"
        else:
            word = data.verdict_text(v)
        rows.append({
            "result": f"#{r.id}", "load": data.load_label(r), "tok/s": fmt.tok_s(r.results.output_tok_s),
            "accept_len": fmt.accept_len(r.accept_len) if r.accept_len is not None
            else data.accept_text(r, routers) or fmt.NA,
            "speedup": f"{p.ratio:.2f}×" if p is not None and p.ratio is not None else fmt.NA,
            "baseline": p.baseline_text if p is not None else fmt.NA, "verdict": word,
            "_level": v.level if v is not None else "none", "_router": r.server in routers,
        })
    return rows


LEVEL_COLOUR = {"good": "green", "warn": "orange", "bad": "red", "none": "gray"}


def stored_results(rt, ids) -> None:
    """What the job stored, where it was started: each result's key figures and verdict."""
    fleet = rt.fleet
    configured = {n: (fleet.config(n).model_path, fleet.config(n).served_model_name, fleet.config(n).baseline_tok_s)
                  for n in fleet.names()}
    rows = result_rows(bench_stored.results(rt.store), ids, configured, fleet.router_names())
    if not rows:
        return
    st.markdown("**Stored results**")
    for row in rows:
        colour = LEVEL_COLOUR[row["_level"]]
        st.markdown(fmt.data_markdown(
            f"#{row['result'][1:]} · {row['load']}: **{row['tok/s']}**, accept_len **{row['accept_len']}**, "
            f"speedup **{row['speedup']}** against baseline {row['baseline']} · :{colour}[**{row['verdict']}**]"))
    if any(row["accept_len"].startswith(fmt.NA) for row in rows if row["_router"]):
        st.caption(f"accept_len N/A: {ROUTER_ACCEPT}.")
    st.caption("Also in the Runs tab, with every column.")


def _stop(rt, view) -> None:
    if view is None:
        return
    stop_control(rt, view, key="bench", disabled=not view.live,
                 help="SIGTERM: the benchmark ends, results already stored stay",
                 question=f"Stop **{view.name}**? The load being measured is abandoned; results already stored "
                          f"stay. After {view.spec.stop_grace_s:.0f} s it gets SIGKILL.",
                 done=f"Stop of {view.name} requested")


def show_new_results(ids) -> None:
    """A result a job stored (a benchmark's, a sweep's) that the page's table, charts and key figures
    do not show yet: run the whole page once."""
    seen = st.session_state.get(SEEN)
    if seen is None:
        return
    new = tuple(sorted(set(int(i) for i in ids) - set(seen)))
    if new and st.session_state.get("bench-rerun-for") != new:
        st.session_state["bench-rerun-for"] = new
        st.rerun(scope="app")
