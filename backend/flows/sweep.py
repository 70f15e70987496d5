"""A sweep as a supervised job: relaunch a server in each configuration, benchmark it, restore it.

``python -m backend.cli bench sweep SERVER ...`` (:mod:`backend.cli.bench`) runs
:func:`run_sweep`: for each configuration of the plan (:mod:`backend.flows.sweep_plan`) it
preflights, relaunches and waits until the server is ready (:mod:`backend.flows.relaunch`),
then benchmarks every load, storing each result as soon as it has it (tagged with the sweep
id in its label).  At the end, and also when stopped (SIGTERM) or failed, it gives the server
back its original configuration: the workspace file's entry as it was, relaunched (or
stopped, if it was not running) and ready.

The job's state file (JSON, written to a temporary name and renamed) holds the plan, the
original server, every configuration's status and results, the current phase and the
break-even check (:mod:`backend.bench.sweep_check`).  The dashboard reads it; the job never
depends on the dashboard.  Started again with the same state file, the job resumes: it skips
the configurations (and, within one, the loads) already measured.

The sweep's own relaunches come between loads, so each load is measured on one server run; a
result whose server restarted anyway while it was measured (someone else relaunched it, or it
crashed and was restarted) is stored marked invalid, and its configuration fails with the reason
(a resume measures it again).  A state file that cannot be written (a full disk) ends the sweep
failed with "no space left on device in FOLDER"; the server is still restored, and the final
state goes into the room the writer set aside (:class:`backend.flows.bench_job.ProgressWriter`).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from backend.bench.client import ClientError, Load
from backend.diskspace import disk_error
from backend.flows.bench_job import REPO_ROOT, ProgressWriter, end as write_end
from backend.flows.relaunch import (Original, RelaunchError, RelaunchStopped, relaunch_and_wait, remember,
                                    restore)
from backend.flows.bench_runner import BenchRunError, run_benchmark, target_of
from backend.bench.sweep_check import check_sweep
from backend.flows.sweep_plan import SweepConfig, SweepPlan, expand
from backend.filemodes import PRIVATE_FILE, make_private_dirs
from backend.readcap import CONFIG_JSON_MAX, SMALL_TEXT_MAX, TooLarge, load_json_capped, read_text_whole
from specdeck_types.bench import BenchResult
from specdeck_types.process import Kind, ProcessSpec, RestartPolicy

RUNNING, DONE, FAILED, STOPPED = "running", "done", "failed", "stopped"
PENDING = "pending"
STOP_GRACE_S = 300.0  # a stop restores the server first; SIGKILL after this
STATE_VERSION = 1


class SweepStateError(Exception):
    """The state file cannot be used (unreadable, another plan, or a sweep still running on it)."""


@dataclass
class SweepState:
    sweep_id: str
    server: str
    plan: dict[str, Any]
    configs: list[dict[str, Any]]  # SweepConfig.to_dict() + status, error, results {concurrency: id}, run
    original: dict[str, Any]  # relaunch.Original.to_dict()
    notes: list[str] = field(default_factory=list)
    state: str = RUNNING
    phase: str = "starting"
    detail: str = ""
    current: int | None = None  # index into configs
    done: int = 0  # requests of the current load
    total: int = 0
    results: list[dict[str, Any]] = field(default_factory=list)  # one summary per stored result
    errors: list[str] = field(default_factory=list)
    check: list[dict[str, Any]] = field(default_factory=list)
    restored: bool | None = None  # None until the restore ran
    starts: int = 0  # how many times a job ran on this state (1 + resumes)
    started_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    pid: int = field(default_factory=os.getpid)
    version: int = STATE_VERSION

    @property
    def finished(self) -> bool:
        return self.state != RUNNING

    @property
    def n_done(self) -> int:
        return sum(1 for c in self.configs if c["status"] == DONE)

    @property
    def fraction(self) -> float:
        loads = max(1, len(self.plan.get("concurrency") or [1]))
        measured = sum(len(c.get("results") or {}) for c in self.configs)
        within = self.done / self.total if self.total and self.phase == "benchmarking" else 0.0
        return min(1.0, (measured + within) / max(1, len(self.configs) * loads))


def read_state(path: Path) -> SweepState | None:
    """The state file, or None when there is none (or it is not one): for pages."""
    try:
        return load_state(path)
    except SweepStateError:
        return None


def load_state(path: Path) -> SweepState | None:
    """The state file; None when it does not exist; :class:`SweepStateError` when it is not a sweep's."""
    path = Path(path)
    try:
        text = read_text_whole(path, CONFIG_JSON_MAX, "a sweep's state file")
    except FileNotFoundError:
        return None
    except TooLarge as exc:
        raise SweepStateError(f"{exc}; give another --state-file") from exc
    except OSError as exc:
        raise SweepStateError(f"{path}: cannot be read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise SweepStateError(f"{path}: not a sweep's state file (not UTF-8 text); give another --state-file") from exc
    try:
        d = json.loads(text)
        if not isinstance(d, dict):
            raise ValueError("not a JSON object")
        missing = [k for k in ("sweep_id", "server", "plan", "configs", "original") if k not in d]
        if missing:
            raise ValueError(f"missing {', '.join(missing)}")
        return SweepState(**{k: v for k, v in d.items() if k in SweepState.__dataclass_fields__})
    except (ValueError, TypeError) as exc:
        raise SweepStateError(f"{path}: not a sweep's state file ({exc}); give another --state-file") from exc


def _alive(pid: int, state_path: Path | None = None) -> bool:
    """Is ``pid`` a sweep process (on ``state_path``, when given)?"""
    import psutil

    try:
        cmd = psutil.Process(pid).cmdline()
    except (psutil.Error, OSError):
        return False
    return "sweep" in cmd and (state_path is None or str(state_path) in cmd)


def lock_path(ws, server: str) -> Path:
    return Path(ws.run_dir) / f"sweep-{server}.lock"


def take_lock(ws, server: str, state_file: Path) -> Path:
    """One sweep per server at a time: a lock file with this process's pid and state file.
    A lock whose process is gone is taken over; a live one raises :class:`SweepStateError`."""
    path = lock_path(ws, server)
    make_private_dirs(path.parent)
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, PRIVATE_FILE)
        except FileExistsError:
            try:
                held = load_json_capped(path, SMALL_TEXT_MAX, "a lock file")
                pid, other = int(held["pid"]), held.get("state_file")
            except (OSError, ValueError, KeyError, TypeError):
                pid, other = 0, None
            if pid and pid != os.getpid() and _alive(pid):
                raise SweepStateError(f"a sweep of {server} is already running (pid {pid}, state in {other}); "
                                      "stop it first, or wait until it ends") from None
            path.unlink(missing_ok=True)  # left by a sweep that is gone
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"pid": os.getpid(), "state_file": str(state_file)}, f)
        return path
    raise SweepStateError(f"{path}: could not take the lock of {server}'s sweep")


def _summary(key: str, r: BenchResult) -> dict[str, Any]:
    f = r.results
    return {"config": key, "concurrency": r.load.concurrency, "id": r.id, "output_tok_s": f.output_tok_s,
            "accept_len": f.accept_len, "accept_len_lifetime": f.accept_len_lifetime,
            "ttft_median_ms": f.ttft_ms.median, "tpot_median_ms": f.tpot_ms.median,
            "request_s": f.request_s, "completed": f.completed, "algorithm": r.config.algorithm,
            "num_steps": r.config.num_steps, "topk": r.config.topk,
            "num_draft_tokens": r.config.num_draft_tokens, "label": r.label}


def _outside_baselines(session, plan: SweepPlan) -> dict[int, float]:
    """The newest stored baseline of the server at each concurrency with the plan's lengths."""
    from state.bench import BenchFilter, BenchStore

    out: dict[int, tuple[float, float]] = {}
    for r in BenchStore(session.store).list(BenchFilter(server=plan.server)):
        if not r.is_baseline or r.invalid or not r.results.output_tok_s or r.load.concurrency is None:
            continue
        if (r.load.input_len, r.load.output_len) != (plan.input_len, plan.output_len):
            continue
        when = r.started_at or r.created_at or 0.0
        if r.load.concurrency not in out or when >= out[r.load.concurrency][0]:
            out[r.load.concurrency] = (when, r.results.output_tok_s)
    return {c: v for c, (_, v) in out.items()}


def new_state(session, plan: SweepPlan, sweep_id: str) -> SweepState:
    original = remember(session, plan.server)
    configs, notes = expand(plan, original.cfg)
    return SweepState(sweep_id=sweep_id, server=plan.server, plan=plan.to_dict(),
                      configs=[{**c.to_dict(), "status": PENDING, "error": None, "results": {}, "run": None}
                               for c in configs],
                      original=original.to_dict(), notes=notes)


def open_state(session, plan: SweepPlan, state_path: Path, sweep_id: str) -> SweepState:
    """The state to run: the one in ``state_path`` (a resume) or a new one."""
    old = load_state(state_path)
    if old is None:
        return new_state(session, plan, sweep_id)
    if old.plan != plan.to_dict():
        diff = [f"{k} {old.plan.get(k)!r} there, {v!r} here" for k, v in plan.to_dict().items()
                if old.plan.get(k) != v]
        raise SweepStateError(f"{state_path} holds sweep {old.sweep_id} with another plan ({'; '.join(diff)}); "
                              "give the same arguments to resume it, or another --state-file")
    if old.state == RUNNING and old.pid != os.getpid() and _alive(old.pid, state_path):
        raise SweepStateError(f"sweep {old.sweep_id} is still running on {state_path} (pid {old.pid})")
    return old


def run_sweep(session, plan: SweepPlan, *, state_path: Path, actor: str, source: str = "cli",
              stop: threading.Event | None = None, sweep_id: str | None = None,
              emit: Callable[[BenchResult], None] | None = None,
              say: Callable[[str], None] | None = None) -> SweepState:
    """Run (or resume) the sweep of ``plan`` with its state in ``state_path``; returns the final state.
    One sweep runs per server at a time (:func:`take_lock`)."""
    stop = stop or threading.Event()
    say = say or (lambda text: None)
    lock = take_lock(session.ws, plan.server, Path(state_path))
    try:
        return _run(session, plan, Path(state_path), actor, source, stop, sweep_id, emit, say)
    finally:
        lock.unlink(missing_ok=True)


def _run(session, plan: SweepPlan, state_path: Path, actor: str, source: str, stop: threading.Event,
         sweep_id: str | None, emit, say) -> SweepState:
    from state.bench import BenchStore

    st = open_state(session, plan, Path(state_path), sweep_id or time.strftime("%Y%m%d-%H%M%S"))
    st.state, st.pid, st.starts, st.restored = RUNNING, os.getpid(), st.starts + 1, None
    w = ProgressWriter(Path(state_path), st)
    original = Original.from_dict(st.original)
    work = Path(state_path).parent
    bench = BenchStore(session.store)
    outside = _outside_baselines(session, plan)
    n = len(st.configs)

    ending = False  # after the configurations: a state file that cannot be written no longer stops anything

    def phase(p: str, d: str = "") -> None:
        try:
            w.update(phase=p, detail=d)
        except OSError:
            if not ending:
                raise
        say(f"[{(st.current or 0) + 1}/{n}] {p}{': ' + d if d else ''}")

    def recheck() -> None:
        w.update(check=check_sweep(st.configs, st.results, outside), force=True)

    failed = False
    try:
        w.update(phase="starting", detail="", force=True)
        for i, c in enumerate(st.configs):
            if stop.is_set():
                break
            if c["status"] == DONE:
                continue
            cfg = SweepConfig.from_dict(c)
            c.update(status=RUNNING, error=None)
            w.update(current=i, done=0, total=0, force=True)
            say(f"[{i + 1}/{n}] {cfg.label}")
            try:
                res = relaunch_and_wait(session, plan.server, cfg.apply(original.cfg), actor=actor, source=source,
                                        timeout_s=plan.ready_timeout_s, on_phase=phase, stop=stop)
            except RelaunchStopped:
                c.update(status=PENDING)
                break
            except RelaunchError as exc:
                c.update(status=FAILED, error=str(exc))
                st.errors.append(f"{cfg.label}: {exc}")
                w.update(force=True)
                say(f"[{i + 1}/{n}] {cfg.label} failed: {exc}")
                continue
            c["run"] = {"run_id": res.run_id, "ready_after_s": round(res.ready_after_s, 2)}
            if not _measure(session, plan, st, c, cfg, w, bench, work, stop, emit, phase, recheck):
                if stop.is_set():
                    c.update(status=PENDING)
                    break
                continue
            c.update(status=DONE)
            w.update(force=True)
    except OSError as exc:  # a write of the sweep (its state file, a benchmark's folder): said plainly
        traceback.print_exc()
        failed = True
        st.errors.append(disk_error(exc, work))
        say(f"error: {st.errors[-1]}")
    except Exception as exc:  # the log has the traceback; the state says why, and the restore still runs
        traceback.print_exc()
        failed = True
        st.errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        ending = True
        try:
            # stopped: the restore must end within the stop's grace period, before SIGKILL
            timeout = min(plan.ready_timeout_s, STOP_GRACE_S - 60) if stop.is_set() else plan.ready_timeout_s
            restore(session, plan.server, original, actor=actor, source=source, timeout_s=timeout, on_phase=phase)
            st.restored = True
            say(f"restored {plan.server} to its original configuration")
        except Exception as exc:  # noqa: BLE001 - any failure here is reported, never hidden
            failed = True
            st.errors.append(f"restoring {plan.server}: {exc}")
            st.restored = False
            say(f"could not restore {plan.server}: {exc}")
        st.check = check_sweep(st.configs, st.results, outside)
        end = FAILED if failed else STOPPED if any(c["status"] != DONE and c["status"] != FAILED
                                                    for c in st.configs) else DONE
        why = write_end(w, state=end, phase=end, detail="", current=None)
        if why:
            st.state = FAILED
            st.errors.append(why)
    return st


def _measure(session, plan: SweepPlan, st: SweepState, c: dict[str, Any], cfg: SweepConfig, w: ProgressWriter,
             bench, work: Path, stop: threading.Event, emit, phase, recheck) -> bool:
    """Benchmark every load of the plan not yet measured for config ``c``; False when one failed."""
    target = target_of(session, plan.server)
    for conc in plan.concurrency:
        if str(conc) in c["results"]:
            continue  # measured before a resume
        if stop.is_set():
            return False
        load = Load(concurrency=conc, num_prompts=plan.num_prompts, input_len=plan.input_len,
                    output_len=plan.output_len, backend=plan.backend)
        phase("benchmarking", f"concurrency {conc}, {plan.num_prompts} prompts of {plan.input_len}/"
                              f"{plan.output_len} tokens")
        try:
            r = run_benchmark(target, load, mode=plan.mode, work_dir=work / cfg.key / f"c{conc}",
                              progress=lambda ph, d, t: w.update(done=d, total=t), stop=stop)
        except (BenchRunError, ClientError) as exc:
            if not stop.is_set():
                c.update(status=FAILED, error=f"concurrency {conc}: {exc}")
                st.errors.append(f"{cfg.label} at concurrency {conc}: {exc}")
                w.update(force=True)
            return False
        asked, got = r.load.num_prompts, r.results.completed
        if asked is not None and got is not None and got < asked:
            st.notes.append(f"{cfg.label} at concurrency {conc}: {asked - got} of {asked} requests failed; its "
                            f"figures are of the {got} that completed (details in {work / cfg.key / f'c{conc}'})")
        tag = f"sweep {st.sweep_id} · {cfg.label}"
        stored = bench.insert(_tagged(r, tag)).result
        if stored.invalid:  # kept for the record, but not this configuration's measurement: a resume measures again
            c.update(status=FAILED, error=f"concurrency {conc}: result #{stored.id} is invalid: {stored.invalid}")
            st.errors.append(f"{cfg.label} at concurrency {conc}: result #{stored.id} is invalid: {stored.invalid}")
            w.update(force=True)
            if emit is not None:
                emit(stored)
            return False
        c["results"][str(conc)] = stored.id
        st.results.append(_summary(cfg.key, stored))
        recheck()
        if emit is not None:
            emit(stored)
    return True


def _tagged(r: BenchResult, tag: str) -> BenchResult:
    from dataclasses import replace

    return replace(r, label=f"{tag}; {r.label}" if r.label else tag)


# -- as a supervised job ------------------------------------------------------------

def job_name(server: str, sweep_id: str) -> str:
    return f"sweep-{server}-{sweep_id}"


def state_path(ws, server: str, sweep_id: str) -> Path:
    return Path(ws.outputs_dir) / "bench" / job_name(server, sweep_id) / "state.json"


def sweep_process_spec(ws, server: str, sweep_id: str, argv_tail: list[str]) -> ProcessSpec:
    """The supervisor's spec of ``bench sweep SERVER argv_tail...`` in workspace ``ws``, with its
    state file at :func:`state_path` of the same ids.  Stopping it (SIGTERM) restores the server
    before it exits, so the grace period is long."""
    name = job_name(server, sweep_id)
    argv = [sys.executable, "-m", "backend.cli", "--workspace", str(ws.root), "bench", "sweep", server,
            *argv_tail, "--sweep-id", sweep_id, "--state-file", str(state_path(ws, server, sweep_id))]
    return ProcessSpec(name=name, kind=Kind.BENCHMARK, argv=tuple(argv), log_path=str(ws.logs_dir / f"{name}.log"),
                       cwd=str(REPO_ROOT), stop_grace_s=STOP_GRACE_S, restart=RestartPolicy(mode="never"))


def command_line(plan: SweepPlan) -> list[str]:
    """The ``bench sweep`` arguments after SERVER for ``plan``."""
    tail: list[str] = []
    for flag, values in (("--steps", plan.steps), ("--topk", plan.topk), ("--draft-tokens", plan.draft_tokens)):
        if values:
            tail += [flag, ",".join(map(str, values))]
    if plan.baseline_only:
        tail.append("--baseline-only")
    elif plan.baseline:
        tail.append("--baseline")
    tail += ["--concurrency", ",".join(map(str, plan.concurrency)), "--num-prompts", str(plan.num_prompts),
             "--input-len", str(plan.input_len), "--output-len", str(plan.output_len), "--mode", plan.mode,
             "--backend", plan.backend, "--ready-timeout", f"{plan.ready_timeout_s:g}"]
    return tail


def preview(plan: SweepPlan) -> str:
    """The command a page shows before starting the job."""
    return shlex.join(["python", "-m", "backend.cli", "bench", "sweep", plan.server, *command_line(plan)])
