"""The deploy flow as a job: run in the foreground by ``train deploy``, or started through the supervisor.

:func:`run_deploy` takes a :class:`~backend.flows.deploy.DeployRequest` through the steps listed in
:mod:`backend.flows.deploy`, rewriting the state file at each change, so the dashboard (restarted or
not) shows where it is.  The server is changed only after the checkpoint passed inspection and
preflight; from then on any failure, and a stop (SIGTERM), restores the server's previous config
(:func:`backend.flows.relaunch.restore`), and the state file says how the server was left.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Callable

from backend.bench.client import ClientError, Load
from backend.flows.relaunch import (PreflightFailed, RelaunchError, RelaunchStopped, relaunch_and_wait, remember,
                                    restore)
from backend.flows.bench_runner import BenchRunError, run_benchmark, target_of
from backend.flows.deploy import (DONE, FAILED, KEEP, RESTORE, RUNNING, SKIPPED, STOPPED, DeployError, DeployRequest,
                                  DeployState, PlannedLoad, baseline_config, checkpoint_label, compare, deploy_config,
                                  plan_loads, speculative_values, stored_baselines, write_state)
from specdeck_types.bench import BenchResult
from specdeck_types.process import Kind, ProcessSpec, RestartPolicy

REPO_ROOT = Path(__file__).resolve().parents[2]
WRITE_GAP_S = 0.25  # benchmark progress is written at most 4 times a second
STOP_GRACE_S = 120.0  # time for a stopped job to put the server back


class Stopped(Exception):
    """The job was asked to stop (SIGTERM, Ctrl-C) and left the step it was in."""


class _Job:
    """One run of the flow: the state, its file, and the session's server and store."""

    def __init__(self, session, req: DeployRequest, state_path: Path, *, actor: str, source: str,
                 stop: threading.Event):
        self.s, self.req, self.path = session, req, Path(state_path)
        self.actor, self.source, self.stop = actor, source, stop
        self.st = DeployState(request=req.to_dict(), pid=os.getpid())
        self.original = None  # what restore brings back, once the server is about to change
        self._last = 0.0

    # -- the state file --------------------------------------------------------------------
    def save(self, *, throttle: bool = False) -> None:
        now = time.monotonic()
        if throttle and now - self._last < WRITE_GAP_S:
            return
        self._last = now
        write_state(self.path, self.st)

    def begin(self, name: str, detail: str = "") -> None:
        s = self.st.step(name)
        s.status, s.started_at, s.message = RUNNING, time.time(), ""
        self.st.detail, self.st.done, self.st.total = detail, 0, 0
        if self.stop.is_set():
            raise Stopped()
        self.save()

    def finish(self, name: str, message: str = "", status: str = DONE) -> None:
        s = self.st.step(name)
        s.status, s.message = status, message
        s.ended_at = time.time() if s.started_at is not None else None
        self.st.detail = ""
        self.save()

    def phase(self, phase: str, detail: str) -> None:
        self.st.detail = detail or phase
        self.save()

    # -- the server --------------------------------------------------------------------------
    def relaunch(self, cfg) -> None:
        if self.original is None:
            self.original = remember(self.s, self.req.server)
        self.st.server_left = "unknown"
        try:
            relaunch_and_wait(self.s, self.req.server, cfg, actor=self.actor, source=self.source,
                              timeout_s=self.req.ready_timeout_s, on_phase=self.phase, stop=self.stop)
        except RelaunchStopped:
            raise Stopped() from None

    def bench(self, load: PlannedLoad, label: str, work: Path) -> BenchResult:
        from state.bench import BenchStore

        target = target_of(self.s, self.req.server)
        self.st.done, self.st.total = 0, load.num_prompts

        def progress(ph: str, done: int, total: int) -> None:
            self.st.done, self.st.total = done, total
            self.st.detail = f"{ph}: concurrency {load.concurrency}, {done} of {total} requests"
            self.save(throttle=True)

        r = run_benchmark(target, Load(concurrency=load.concurrency, num_prompts=load.num_prompts,
                                       input_len=load.input_len, output_len=load.output_len),
                          mode=self.req.mode, work_dir=work, progress=progress, stop=self.stop)
        if self.stop.is_set():
            raise Stopped()
        r = replace(r, label=f"{label}; {r.label}" if r.label else label)
        return BenchStore(self.s.store).insert(r).result

    def stored(self) -> list[BenchResult]:
        return stored_results(self.s.store, self.s.fleet, self.req.server)


def stored_results(store, fleet, server: str) -> list[BenchResult]:
    """Stored benchmark results of ``server``, and those of its target model that name no server."""
    from state.bench import BenchFilter, BenchStore

    bench = BenchStore(store)
    target = fleet.config(server).model_path
    by_server = bench.list(BenchFilter(server=server))
    by_target = [r for r in bench.list(BenchFilter(target_model=target)) if not r.server]
    return by_server + by_target


def _label_parts(info) -> tuple[int | None, int | None]:
    """(epoch, step) from training_state.pt, else from the folder's name."""
    from backend.train.checkpoints import list_checkpoints

    if info.state is not None and (info.state.epoch is not None or info.state.step is not None):
        return info.state.epoch, info.state.step
    for c in list_checkpoints(info.path.parent).checkpoints:
        if c.path == info.path:
            return c.epoch, c.step
    return None, None


def run_deploy(session, req: DeployRequest, state_path: Path, *, actor: str, source: str,
               stop: threading.Event | None = None,
               on_step: Callable[[DeployState, str], None] | None = None) -> DeployState:
    """The whole flow; returns the final state (also in ``state_path``).  ``on_step(state, step)`` hears
    of each step as it ends (the command line prints it)."""
    from backend.train.checkpoints import inspect_checkpoint
    from backend.flows.checkpoint_check import preflight_checkpoint

    job = _Job(session, req, state_path, actor=actor, source=source, stop=stop or threading.Event())
    st = job.st
    work = Path(state_path).parent
    ckpt = Path(req.checkpoint)
    tell = on_step or (lambda state, step: None)

    def done(name: str, message: str, status: str = DONE) -> None:
        job.finish(name, message, status)
        tell(st, name)

    job.save()
    try:
        job.begin("inspect", f"reading {ckpt}")
        try:
            info = inspect_checkpoint(ckpt)
        except FileNotFoundError as exc:
            raise DeployError("inspect", str(exc)) from None
        st.checkpoint_info = info.summary()
        if not info.servable:
            cmd = f" Run: {' '.join(info.export_argv)}" if info.export_argv else ""
            raise DeployError("inspect", f"{ckpt.name} cannot be served: {info.why_not_servable}.{cmd}")
        epoch, step = _label_parts(info)
        st.label = checkpoint_label(ckpt, req.run_name, epoch, step)
        fc = "×".join(map(str, info.fc_shape)) if info.fc_shape else "not found"
        done("inspect", f"{st.label}: fc.weight {fc}, {info.layers} layer(s), draft vocabulary "
                        f"{info.draft_vocab}, d2t {'present' if info.has_d2t else 'missing'}")

        job.begin("preflight", f"checking {ckpt.name} against {req.server}'s target")
        if req.server not in session.fleet.names():
            raise DeployError("preflight", f"no server named {req.server!r} in {session.ws.config_path}")
        cfg = session.fleet.config(req.server)
        steps, topk, ndt = speculative_values(cfg, req)
        findings = preflight_checkpoint(ckpt, cfg.model_path, server=cfg, num_steps=steps, eagle_topk=topk,
                                        num_draft_tokens=ndt)
        st.findings = [asdict(f) for f in findings]
        errors = [f for f in findings if f.severity == "error"]
        if errors:
            raise DeployError("preflight", f"{len(errors)} error(s) against {cfg.model_path}, so {req.server} was "
                                           "not touched: " + "; ".join(f"{f.code}: {f.found}" for f in errors))
        warn = [f.code for f in findings if f.severity == "warning"]
        done("preflight", f"no errors against {cfg.model_path} (EAGLE3, {steps} steps, top-k {topk}, {ndt} draft "
                          f"tokens)" + (f"; warnings: {', '.join(warn)}" if warn else ""))

        job.begin("load", "looking up the stored baseline")
        loads, where = plan_loads(req, stored_baselines(job.stored(), req.server, cfg.model_path))
        st.load_source = where
        st.loads = [asdict(x) for x in loads]
        done("load", where)

        missing = [x for x in loads if x.baseline_id is None]
        if missing and req.measure_baseline:
            job.begin("baseline", f"relaunching {req.server} without speculation")
            job.relaunch(baseline_config(cfg))
            measured = []
            for i, x in enumerate(missing):
                r = job.bench(x, f"baseline measured before deploying {st.label}", work / f"baseline-c{x.concurrency}-{i}")
                loads[loads.index(x)] = replace(x, baseline_id=r.id)
                measured.append(f"#{r.id} ({r.results.output_tok_s or 0:.1f} tok/s at concurrency {x.concurrency})")
            st.loads = [asdict(x) for x in loads]
            done("baseline", "measured without speculation: " + ", ".join(measured))
        else:
            job.begin("baseline")
            why = ("stored: " + ", ".join(f"#{x.baseline_id} at concurrency {x.concurrency}" for x in loads
                                          if x.baseline_id is not None)) if not missing else \
                (f"none stored at concurrency {', '.join(str(x.concurrency) for x in missing)}: the speedup there "
                 "will be N/A (deploy with --measure-baseline to measure it first)")
            done("baseline", why, SKIPPED)

        job.begin("relaunch", f"relaunching {req.server} with {ckpt.name}")
        job.relaunch(deploy_config(cfg, ckpt, steps, topk, ndt))
        st.server_left = "checkpoint"
        done("relaunch", f"{req.server} serves {ckpt} (EAGLE3, {steps} steps, top-k {topk}, {ndt} draft tokens)")

        job.begin("benchmark", f"benchmarking {req.server}")
        new: list[BenchResult] = []
        for i, x in enumerate(loads):
            new.append(job.bench(x, st.label, work / f"c{x.concurrency}-{i}"))
        done("benchmark", "stored " + ", ".join(f"#{r.id} ({r.results.output_tok_s or 0:.1f} tok/s at concurrency "
                                                f"{r.load.concurrency})" for r in new))

        job.begin("compare", "pairing with the baseline and the previous draft")
        everything = job.stored()
        rows = [compare(r, everything, ckpt) for r in new]
        st.rows = [asdict(r) for r in rows]
        done("compare", " ".join(_row_text(r) for r in rows))

        if req.after == RESTORE:
            job.begin("restore", f"putting {req.server} back as it was")
            _restore(job)
            done("restore", st.restore)
        else:
            job.begin("restore")
            st.restore = f"kept: {req.server} serves {ckpt.name} (its entry in the workspace file says so)"
            done("restore", st.restore, SKIPPED)
        st.state = DONE
    except Stopped:
        _fail(job, None, "stopped by the user", STOPPED, tell)
    except DeployError as exc:
        _fail(job, exc.step, str(exc), FAILED, tell)
    except PreflightFailed as exc:
        st.findings = [asdict(f) for f in exc.findings]
        _fail(job, None, str(exc), FAILED, tell)
    except (RelaunchError, BenchRunError, ClientError) as exc:
        _fail(job, None, str(exc), STOPPED if job.stop.is_set() else FAILED, tell)
    except Exception as exc:  # anything else: the log has the traceback, the state file says why
        traceback.print_exc()
        _fail(job, None, f"{type(exc).__name__}: {exc}", FAILED, tell)
    st.detail = ""
    job.save()
    return st


def _row_text(r) -> str:
    prev = ""
    if r.previous_id is not None:
        prev = f" Previous draft ({Path(r.previous_draft or '?').name}, #{r.previous_id}): " + (
            f"{r.previous_tok_s:.1f} tok/s" if r.previous_tok_s else "tok/s N/A") + (
            f", {r.previous_speedup:.2f}×." if r.previous_speedup else ".")
    if r.speedup is None:
        return f"concurrency {r.concurrency}: {r.tok_s or 0:.1f} tok/s; {r.reason}.{prev}"
    be = f", break-even accept_len {r.break_even_accept_len:.2f}" if r.break_even_accept_len else ""
    acc = f" at accept_len {r.accept_len:.2f}" if r.accept_len is not None else ""
    return (f"concurrency {r.concurrency}: {r.tok_s:.1f} tok/s{acc}, {r.speedup:.2f}× the baseline "
            f"({r.baseline_tok_s:.1f} tok/s){be}.{prev}")


def _restore(job: _Job) -> None:
    """Put the server back as :func:`remember` saw it; the state says how it was left."""
    req, st = job.req, job.st
    if job.original is None:
        st.restore, st.server_left = f"not needed: {req.server} was not changed", "previous"
        return
    try:
        res = restore(job.s, req.server, job.original, actor=job.actor, source=job.source,
                      timeout_s=max(req.ready_timeout_s, req.restore_timeout_s), on_phase=job.phase)
    except Exception as exc:  # the message must reach the state file whatever went wrong
        st.server_left = "unknown"
        st.restore = (f"restore failed: {exc}. Check {req.server} on the Servers page; its previous "
                      "entry is what the workspace file should hold")
        raise
    st.server_left = "previous"
    st.restore = (f"restored: {req.server} runs its previous configuration again" if res is not None else
                  f"restored: {req.server} was not running before, so it was stopped")


def _fail(job: _Job, step: str | None, message: str, state: str, tell) -> None:
    """Mark the failed step, then put the server back if it was changed."""
    st = job.st
    cur = st.current
    name = step or (cur.name if cur else "inspect")
    s = st.step(name)
    s.status, s.message, s.ended_at = (STOPPED if state == STOPPED else FAILED), message, time.time()
    st.state, st.failed_step, st.error = state, name, message
    for other in st.steps:  # what was still to come did not happen
        if other.status == RUNNING and other is not s:
            other.status, other.ended_at = FAILED, time.time()
    job.save()
    tell(st, name)
    rs = st.step("restore")
    if job.original is None:
        st.restore = f"not needed: {job.req.server} was not touched"
        st.server_left = "previous"
        rs.status, rs.message = SKIPPED, st.restore
        job.save()
        return
    rs.status, rs.started_at, rs.message = RUNNING, time.time(), ""
    job.save()
    try:
        _restore(job)
    except Exception:
        traceback.print_exc()
        rs.status = FAILED
    else:
        rs.status = DONE
    rs.message, rs.ended_at = st.restore, time.time()
    job.save()
    tell(st, "restore")


# -- as a supervised process ----------------------------------------------------------------------

def job_name(server: str, run_id: str) -> str:
    return f"deploy-{server}-{run_id}"


def state_path(ws, server: str, run_id: str) -> Path:
    return Path(ws.outputs_dir) / "deploy" / f"{server}-{run_id}" / "state.json"


def command_line(req: DeployRequest) -> list[str]:
    """``train deploy`` arguments for ``req`` (after ``train deploy``)."""
    argv = [req.checkpoint, "--server", req.server]
    for flag, v in (("--steps", req.num_steps), ("--topk", req.eagle_topk), ("--draft-tokens", req.num_draft_tokens),
                    ("--num-prompts", req.num_prompts), ("--input-len", req.input_len),
                    ("--output-len", req.output_len), ("--run-name", req.run_name)):
        if v is not None:
            argv += [flag, str(v)]
    if req.concurrency:
        argv += ["--concurrency", *map(str, req.concurrency)]
    if req.measure_baseline:
        argv.append("--measure-baseline")
    argv.append("--restore-after" if req.after == RESTORE else "--keep")
    if req.mode in ("builtin", "sglang"):
        argv.append(f"--{req.mode}")
    argv += ["--ready-timeout", f"{req.ready_timeout_s:g}"]
    return argv


def deploy_process_spec(ws, req: DeployRequest, run_id: str) -> tuple[ProcessSpec, dict[str, Any]]:
    """The supervisor's spec of ``train deploy`` for ``req`` in workspace ``ws``, and the job's meta
    (its state file, server and checkpoint) for :meth:`backend.runtime.Runtime.start_job`."""
    name = job_name(req.server, run_id)
    path = state_path(ws, req.server, run_id)
    argv = [sys.executable, "-m", "backend.cli", "--workspace", str(ws.root), "train", "deploy",
            *command_line(req), "--state-file", str(path)]
    spec = ProcessSpec(name=name, kind=Kind.BENCHMARK, argv=tuple(argv), log_path=str(ws.logs_dir / f"{name}.log"),
                       cwd=str(REPO_ROOT), env={"PYTHONUNBUFFERED": "1"}, stop_grace_s=STOP_GRACE_S,
                       restart=RestartPolicy(mode="never"))
    return spec, {"kind": "deploy", "state": str(path), "server": req.server, "checkpoint": req.checkpoint}


def start_deploy(rt, req: DeployRequest, *, actor, source: str = "dashboard",
                 run_id: str | None = None) -> tuple[ProcessSpec, Path]:
    """Start the flow under the dashboard's supervisor (saved as a job, so a restart re-adopts it)."""
    run_id = run_id or time.strftime("%Y%m%d-%H%M%S")
    spec, meta = deploy_process_spec(rt.workspace, req, run_id)
    rt.start_job(spec, meta, actor=actor, source=source)
    return spec, Path(meta["state"])


def deploy_jobs(rt) -> list:
    """The deploy jobs started from the dashboard, newest first."""
    return [j for j in reversed(rt.jobs()) if j.meta.get("kind") == "deploy" and j.meta.get("state")]


__all__ = ["KEEP", "RESTORE", "Stopped", "command_line", "deploy_jobs", "deploy_process_spec", "run_deploy",
           "start_deploy", "state_path", "stored_results"]
