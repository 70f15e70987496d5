"""A benchmark as a supervised job: its progress file, its process spec, and the job itself.

``python -m backend.cli bench run SERVER ...`` runs in the foreground; the dashboard starts the
same command through the supervisor (:func:`bench_process_spec`, kind ``benchmark``) and shows
the job's progress file, which the job rewrites atomically (write, then rename) as it goes:

    {"state": "running", "phase": "running", "done": 37, "total": 200, "server": "glm5",
     "load": {...}, "mode": "builtin", "started_at": ..., "updated_at": ..., "pid": ...,
     "results": [ids stored so far], "error": null}

``state`` is ``running``, then ``done``, ``failed`` or ``stopped``.  A job given several
concurrencies runs them one after the other and stores each result as soon as it has it, so
a job stopped half-way keeps what it measured.  ``invalid`` lists the stored results whose
server restarted while they were measured (``{"id": ..., "why": ...}``; see
:mod:`backend.flows.bench_runner`).

A job that ends by error still leaves a final state: a write that fails because the disk is
full ends the job ``failed`` with "no space left on device in FOLDER", and the final state is
written into the room the writer set aside when it started (a small reserve file beside the
progress file, given up for it), else over the progress file in place.  Only when even that
fails does the file keep saying running; the job's exit status and its last log line then say why.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
import threading
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from backend.bench.client import ClientError, Load
from backend.diskspace import disk_error
from backend.flows.bench_runner import BenchRunError, Target, run_benchmark
from backend.filemodes import PRIVATE_FILE, make_private_dirs, write_private
from backend.readcap import CONFIG_JSON_MAX, load_json_capped
from specdeck_types.bench import BenchResult
from specdeck_types.process import Kind, ProcessSpec, RestartPolicy

RUNNING, DONE, FAILED, STOPPED = "running", "done", "failed", "stopped"
MIN_WRITE_GAP_S = 0.25  # progress within one phase is written at most 4 times a second
RESERVE_BYTES = 64 * 1024  # set aside beside a progress file for its final state on a full disk
REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Progress:
    server: str
    mode: str
    loads: list[dict[str, Any]]
    state: str = RUNNING
    phase: str = "starting"
    step: int = 0  # which load of ``loads`` (0-based)
    done: int = 0
    total: int = 0
    started_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    pid: int = field(default_factory=os.getpid)
    results: list[int] = field(default_factory=list)
    error: str | None = None
    invalid: list[dict[str, Any]] = field(default_factory=list)  # {"id", "why"} of results measured across runs

    @property
    def finished(self) -> bool:
        return self.state != RUNNING

    @property
    def fraction(self) -> float:
        """Share of the whole job done (every load counts the same)."""
        n = max(1, len(self.loads))
        within = self.done / self.total if self.total else 0.0
        return min(1.0, (self.step + (1.0 if self.state == DONE else within)) / n)


def read_progress(path: Path) -> Progress | None:
    """The progress file, or None when there is none yet (or it is not one)."""
    try:
        d = load_json_capped(Path(path), CONFIG_JSON_MAX, "a progress file")
        return Progress(**{k: v for k, v in d.items() if k in Progress.__dataclass_fields__})
    except (OSError, ValueError, TypeError):
        return None


class ProgressWriter:
    """Writes a job's progress (or state) file as the job goes, atomically.

    The first write also sets :data:`RESERVE_BYTES` aside in a hidden file beside it; a final state
    (``state`` other than running) that cannot be written gives that room up and tries again, then
    writes over the file in place.  A write that still fails raises ``OSError`` naming the file."""

    def __init__(self, path: Path | None, progress: Any, clock: Callable[[], float] = time.time):
        self.path = Path(path) if path else None
        self.p = progress
        self.clock = clock
        self._last = 0.0
        self._lock = threading.Lock()
        self._reserved = False

    @property
    def reserve_path(self) -> Path | None:
        return self.path.with_name(f".{self.path.name}.reserve") if self.path is not None else None

    def update(self, *, force: bool = False, **changes: Any) -> None:
        with self._lock:
            phase_changed = "phase" in changes and changes["phase"] != self.p.phase
            for k, v in changes.items():
                setattr(self.p, k, v)
            now = self.clock()
            self.p.updated_at = now
            if force or phase_changed or now - self._last >= MIN_WRITE_GAP_S:
                self._last = now
                self._write()

    def _write(self) -> None:
        if self.path is None:
            return
        text = json.dumps(asdict(self.p), sort_keys=True)
        final = self.p.state != RUNNING
        try:
            make_private_dirs(self.path.parent)
            if not self._reserved:
                self._reserve()
            write_private(self.path, text)
        except OSError as exc:
            if not final:
                raise _named(exc, self.path) from exc
            self._write_final(text, exc)
        if final:
            self._release()

    def _reserve(self) -> None:
        self._reserved = True
        path = self.reserve_path
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
        except OSError:
            return  # no room for it: the in-place write remains
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(b"\0" * RESERVE_BYTES)
        except OSError:
            path.unlink(missing_ok=True)

    def _release(self) -> None:
        if self.reserve_path is not None:
            try:
                self.reserve_path.unlink(missing_ok=True)
            except OSError:
                pass

    def _write_final(self, text: str, first: OSError) -> None:
        """The final state on a disk that refused it: in the reserve's room, else in place."""
        self._release()
        try:
            write_private(self.path, text)
            return
        except OSError:
            pass
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
            with os.fdopen(fd, "wb") as f:
                f.write(text.encode("utf-8"))
            return
        except OSError:
            pass
        raise _named(first, self.path) from first


def _named(exc: OSError, path: Path) -> OSError:
    """``exc`` with the file it was writing named (a failed ``write`` names none)."""
    if exc.filename is not None:
        return exc
    return OSError(exc.errno, exc.strerror or str(exc), str(path))


def end(w: ProgressWriter, **changes: Any) -> str | None:
    """Write the final state ``changes``; None, or why the file could not be written (said to stderr)."""
    try:
        w.update(force=True, **changes)
    except OSError as exc:
        why = f"the final state could not be written: {disk_error(exc, w.path)}"
        sys.stderr.write(f"error: {why}\n")
        return why
    return None


def load_dict(load: Load) -> dict[str, Any]:
    return {"concurrency": load.concurrency, "num_prompts": load.num_prompts, "input_len": load.input_len,
            "output_len": load.output_len, "backend": load.backend}


def run_job(target: Target, loads: list[Load], *, mode: str, work_dir: Path,
            store: Callable[[BenchResult], BenchResult], progress_path: Path | None = None,
            stop: threading.Event | None = None,
            emit: Callable[[BenchResult], None] | None = None) -> tuple[Progress, list[BenchResult]]:
    """Run every load in turn against ``target``; ``store`` saves a result and returns it stored
    (with its id); ``emit`` hears of each stored result.  Errors end the job as ``failed``; a full
    disk is said as such, naming the folder."""
    stop = stop or threading.Event()
    w = ProgressWriter(progress_path, Progress(server=target.name or target.base_url, mode=mode,
                                               loads=[load_dict(x) for x in loads]))
    stored: list[BenchResult] = []
    try:
        w.update(force=True)
        for i, load in enumerate(loads):
            if stop.is_set():
                break
            w.update(step=i, done=0, total=load.num_prompts, phase="starting", force=True)
            result = run_benchmark(target, load, mode=mode, work_dir=work_dir / f"c{load.concurrency}-{i}",
                                   progress=lambda ph, d, t: w.update(phase=ph, done=d, total=t),
                                   stop=stop)
            saved = store(result)
            stored.append(saved)
            if saved.invalid:
                w.p.invalid.append({"id": saved.id, "why": saved.invalid})
            if emit is not None:
                emit(saved)
            w.update(results=[r.id for r in stored if r.id is not None], force=True)
    except (BenchRunError, ClientError) as exc:
        state = STOPPED if stop.is_set() else FAILED
        end(w, state=state, phase=state, error=None if state == STOPPED else str(exc))
        return w.p, stored
    except OSError as exc:  # a write of the job: its progress file, its folder, its output
        traceback.print_exc()
        why = disk_error(exc, work_dir)
        w.p.state = FAILED  # said even where the file cannot be written
        w.p.error = why
        end(w, state=FAILED, phase=FAILED, error=why)
        return w.p, stored
    except Exception as exc:  # anything else: the job's log has the traceback, the progress file says why
        traceback.print_exc()
        w.p.state, w.p.error = FAILED, f"{type(exc).__name__}: {exc}"
        end(w, state=FAILED, phase=FAILED, error=w.p.error)
        return w.p, stored
    state = STOPPED if stop.is_set() and len(stored) < len(loads) else DONE
    why = end(w, state=state, phase=state, step=len(stored) - 1 if state == DONE else w.p.step)
    if why:
        w.p.state, w.p.error = FAILED, why
    return w.p, stored


def stop_on_sigterm(stop: threading.Event, signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGINT)) -> dict:
    """SIGTERM and SIGINT set ``stop``: the job ends its benchmark process and records 'stopped'.
    Returns the handlers it replaced.

    The handler never waits on a lock.  The supervisor signals the process group and then the process
    itself, so a second SIGTERM can land while the first handler runs; Python runs a handler again
    inside the one running, and an ``Event.set()`` there would wait forever for the lock that the outer
    ``set()`` holds (the job then sat until SIGKILL, its progress file still 'running').  So the first
    signal turns further SIGTERMs off, and makes a second Ctrl-C interrupt as usual, before it sets
    ``stop``."""
    def handler(signum, frame):  # noqa: ANN001 - signal protocol
        if signal.SIGTERM in signals:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if signal.SIGINT in signals:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        stop.set()

    return {sig: signal.signal(sig, handler) for sig in signals}


def job_name(server: str, run_id: str) -> str:
    return f"bench-{server}-{run_id}"


def bench_process_spec(ws, server: str, run_id: str, argv_tail: list[str], where: str = "local") -> ProcessSpec:
    """The supervisor's spec of ``bench run SERVER argv_tail...`` in workspace ``ws``; its
    progress file is :func:`progress_path` of the same ids.  ``where = "ray"``: a job on the workspace's
    [cluster] (a ValueError naming "where" without one); the client needs no GPU (num_gpus 0)."""
    if where not in ("local", "ray"):
        raise ValueError(f"where: 'local' or 'ray' (got {where!r})")
    if where == "ray" and getattr(ws.config, "cluster", None) is None:
        raise ValueError(f"where: \"ray\" needs a [cluster] section in {ws.config_path} (kind = \"ray\", "
                         "address = \"local\" or \"http://HOST:8265\")")
    name = job_name(server, run_id)
    argv = [sys.executable, "-m", "backend.cli", "--workspace", str(ws.root), "bench", "run", server,
            *argv_tail, "--progress-file", str(progress_path(ws, server, run_id))]
    return ProcessSpec(name=name, kind=Kind.BENCHMARK, argv=tuple(argv), log_path=str(ws.logs_dir / f"{name}.log"),
                       cwd=str(REPO_ROOT), stop_grace_s=15.0, restart=RestartPolicy(mode="never"), where=where)


def command_line(server: str, loads: list[Load], mode: str) -> list[str]:
    """The ``bench run`` arguments after SERVER for ``loads`` (one shared prompt count and lengths)."""
    first = loads[0]
    tail = ["--concurrency", *[str(x.concurrency) for x in loads], "--num-prompts", str(first.num_prompts),
            "--input-len", str(first.input_len), "--output-len", str(first.output_len),
            "--backend", first.backend, "--json"]
    if mode in ("builtin", "sglang"):
        tail.append(f"--{mode}")
    return tail


def preview(server: str, loads: list[Load], mode: str) -> str:
    """The command a page shows before starting the job."""
    return shlex.join(["python", "-m", "backend.cli", "bench", "run", server, *command_line(server, loads, mode)])


def job_dir(ws, server: str, run_id: str) -> Path:
    return Path(ws.outputs_dir) / "bench" / f"{server}-{run_id}"


def progress_path(ws, server: str, run_id: str) -> Path:
    return job_dir(ws, server, run_id) / "progress.json"


def job_meta(ws, server: str, run_id: str, mode: str, loads: list[Load]) -> dict[str, Any]:
    """What the Benchmarks page reads of a job it follows (saved with the job's spec)."""
    return {"kind": "bench", "server": server, "run_id": run_id, "mode": mode,
            "progress": str(progress_path(ws, server, run_id)), "loads": [load_dict(x) for x in loads]}


def start_job(sup, ws, server: str, loads: list[Load], mode: str = "auto", *, actor: str = "dashboard",
              source: str = "dashboard", run_id: str | None = None, where: str = "local") -> tuple[ProcessSpec, Path]:
    """Register and start ``bench run`` for ``server`` under the supervisor ``sup`` (audited as
    ``actor`` via ``source``; ``where = "ray"``: on the workspace's [cluster]); returns the job's spec and its
    progress file."""
    run_id = run_id or time.strftime("%Y%m%d-%H%M%S")
    spec = bench_process_spec(ws, server, run_id, command_line(server, loads, mode), where=where)
    sup.sync_specs([spec], prune=False)
    sup.start(spec.name, actor=actor, source=source)
    return spec, progress_path(ws, server, run_id)
