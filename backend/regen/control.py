"""Controlling a regeneration from the dashboard: the job's command, and what may be done to it when.

A regeneration started from the page runs the same command as from a terminal,
``python -m backend.cli --workspace ROOT regen run ...``, as a supervised process of kind
``regeneration`` (an ad-hoc job, :mod:`backend.supervisor.adhoc`).  The page never holds the
job's state: the output files and the progress log are the state.

- start: :func:`run_argv` builds the argv from validated form values, :func:`job_spec` the spec;
- what is allowed now: :func:`controls` reads the job and its last snapshot into :class:`Controls`;
- pause: :func:`pause` writes ``pause`` to ``OUT.control`` (:func:`request_pause`; the job stops
  submitting, finishes what is in flight, flushes and exits 0 in state ``paused``);
- resume: :func:`resume` starts the same spec again (or, for a run started elsewhere, one that
  reads ``OUT.job.json``): the job resumes from the ids already written;
- requeue failed: :func:`requeue` moves the error file's rows back to the queue, in this process
  (:func:`requeue_failed`), refused while a job holds the output;
- stop: :func:`stop`, the supervisor's stop (SIGTERM to the group, grace, SIGKILL).

Every action goes through the runtime (``rt.act``, ``rt.start``, ``rt.start_job``, ``rt.stop``) with
the caller's ``actor``, so it is authorised and audited as before.
"""

from __future__ import annotations

import fcntl
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend.filemodes import open_private
from backend.regen import output
from backend.regen.catalog import mixes, resolve_mix
from backend.regen.config import REASONING, InputEntry, InputMix, Sampling, dataset_name  # REASONING: the start form's choices too
from backend.regen.datasets import RowCounts, count_mix
from backend.regen.output import RunFiles
from backend.regen.progress import RunLocked
from specdeck_types.process import Kind, ProcessSpec, RestartPolicy

REPO_ROOT = Path(__file__).resolve().parents[2]
STOP_GRACE_S = 60.0  # a stopped job flushes what it has before it exits
LIVE_STATES = ("starting", "running", "waiting", "pausing", "stopping")  # a job in these writes the output
PAUSABLE_STATES = ("starting", "running", "waiting")  # a pause is read and obeyed


class FormError(ValueError):
    """A form value that cannot be used; the message names the field."""


@dataclass
class RunForm(Sampling):
    """What the start form asks for: where the rows come from and go, the servers, the run's
    parameters (:class:`Sampling`, with ``regen run``'s defaults and limits), the stall alert."""

    out: str
    servers: tuple[str, ...]
    mix: str | None = None
    inputs: tuple[str, ...] = ()
    stall_after_min: float = 10.0
    stream: bool = False  # --stream: a stalled server is noticed between chunks
    first_byte_timeout: float | None = None  # None: regen run's default
    chunk_timeout: float | None = None
    startup_timeout: float | None = None
    extra: dict[str, str] = field(default_factory=dict)
    where: str = "local"  # "ray": a job on the workspace's [cluster] (no GPU: the servers do the work)

    def check(self, root: Path) -> Path:
        """The output path, resolved against the workspace; :class:`FormError` for a bad field."""
        if not self.out.strip():
            raise FormError("output: give a path ending in .jsonl")
        out = Path(self.out.strip()).expanduser()
        if not out.is_absolute():
            out = root / out
        if out.suffix != ".jsonl":
            raise FormError(f"output: {self.out!r} must end in .jsonl (SpecForge's format)")
        if not self.servers:
            raise FormError("servers: choose at least one server or give a URL")
        if bool(self.mix) == bool(self.inputs):
            raise FormError("datasets: choose a mix or give input files, one of the two")
        for p in self.inputs:
            if not Path(p).expanduser().is_file():
                raise FormError(f"input files: {p}: no such file")
        try:
            self.check_limits()
        except ValueError as exc:
            raise FormError(str(exc)) from None
        if self.where not in ("local", "ray"):
            raise FormError(f"run on: 'local' or 'ray' (got {self.where!r})")
        if self.stall_after_min <= 0:
            raise FormError("stall alert: give a number of minutes above 0")
        for label, value in (("first-byte timeout", self.first_byte_timeout), ("chunk timeout", self.chunk_timeout),
                             ("startup timeout", self.startup_timeout)):
            if value is not None and not value > 0:
                raise FormError(f"{label}: give a number of seconds above 0")
        return out


def job_name(out: Path) -> str:
    """``regen-<output stem>``: one job per output, so a resume is the same job again."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", out.name[: -len(".jsonl")]).strip("-.") or "out"
    return f"regen-{stem}"[:64]


def run_argv(form: RunForm, root: Path, python: str = sys.executable) -> list[str]:
    out = form.check(root)
    argv = [python, "-m", "backend.cli", "--workspace", str(root), "regen", "run"]
    if form.mix:
        argv += ["--mix", form.mix]
    for p in form.inputs:
        argv += ["--input", str(Path(p).expanduser().resolve())]
    for s in form.servers:
        argv += ["--server", s]
    argv += ["--out", str(out), "--concurrency", str(form.concurrency), "--max-tokens", str(form.max_tokens),
             "--temperature", f"{form.temperature:g}", "--reasoning", form.reasoning]
    if form.top_p is not None:
        argv += ["--top-p", f"{form.top_p:g}"]
    if form.system_prompt:
        argv += ["--system-prompt", form.system_prompt]
    if form.stream:
        argv += ["--stream"]
    for flag, value in (("--first-byte-timeout", form.first_byte_timeout), ("--chunk-timeout", form.chunk_timeout),
                        ("--startup-timeout", form.startup_timeout)):
        if value is not None:
            argv += [flag, f"{value:g}"]
    return argv


def count_form_rows(form: RunForm, root: Path, datasets=(), mix_entries=()) -> RowCounts:
    """The rows ``form`` would ask and skip, counted by streaming its inputs (the mix resolved against
    the workspace's catalog); :class:`FormError` naming the input that cannot be read."""
    try:
        if form.mix:
            found = mixes(datasets, mix_entries).get(form.mix)
            if found is None:
                raise FormError(f"mix: {form.mix!r} is not a [[mix]] of the workspace file")
            counts = count_mix(resolve_mix(found, datasets), root).values()
        else:  # the files as regen run reads them: one mix, an id asked once across them
            seen: set[str] = set()
            entries = []
            for p in form.inputs:
                name = dataset_name(Path(p), seen)
                seen.add(name)
                entries.append(InputEntry(dataset=name, file=str(Path(p).expanduser().resolve())))
            counts = count_mix(InputMix(entries=tuple(entries)), root).values()
    except (OSError, ValueError) as exc:
        if isinstance(exc, FormError):
            raise
        raise FormError(f"datasets: {exc}") from None
    return RowCounts(rows=sum(c.rows for c in counts), skipped=sum(c.skipped for c in counts))


def duration_estimate(rows: int, rates: list[tuple[str, float]]) -> tuple[float | None, str]:
    """Seconds to ask ``rows`` at the newest measured rate of a regeneration of this workspace
    (``rates``: (run, rows/s), newest last), and the basis; None when no run has a rate yet."""
    for name, rate in reversed(rates):
        if rate > 0:
            return rows / rate, f"at {rate:,.2f} rows/s, the last rate of {name}"
    return None, "no regeneration of this workspace has a measured rate yet"


def job_spec(form: RunForm, root: Path, log_dir: Path, python: str = sys.executable) -> tuple[ProcessSpec, dict]:
    """The supervised process for ``form`` and the meta the page and the stall alert read."""
    argv = run_argv(form, root, python)
    out = form.check(root)
    name = job_name(out)
    spec = ProcessSpec(name=name, kind=Kind.REGENERATION, argv=tuple(argv), log_path=str(log_dir / f"{name}.log"),
                       cwd=str(REPO_ROOT), env={"PYTHONUNBUFFERED": "1"}, stop_grace_s=STOP_GRACE_S,
                       restart=RestartPolicy(mode="never"), where=form.where)
    meta = {"kind": "regen", "out": str(out), "stall_after_s": form.stall_after_min * 60.0,
            "mix": form.mix, "inputs": list(form.inputs), "servers": list(form.servers)}
    return spec, meta


def cli_job_spec(run_args: list[str], out: str, root: Path, log_dir: Path, *, where: str = "ray",
                 python: str = sys.executable) -> tuple[ProcessSpec, dict]:
    """``regen run --where ray``: the same ``regen run RUN_ARGS`` (``--where`` left out; its paths absolute, as
    the job does not run in the caller's folder) as a supervised job on the workspace's [cluster]; CPU only
    (num_gpus 0), with the meta the page and the stall alert read."""
    path = Path(out).expanduser().resolve()
    name = job_name(path)
    argv = [python, "-m", "backend.cli", "--workspace", str(root), "regen", "run", *run_args]
    spec = ProcessSpec(name=name, kind=Kind.REGENERATION, argv=tuple(argv), log_path=str(log_dir / f"{name}.log"),
                       cwd=str(REPO_ROOT), env={"PYTHONUNBUFFERED": "1"}, stop_grace_s=STOP_GRACE_S,
                       restart=RestartPolicy(mode="never"), where=where)
    return spec, {"kind": "regen", "out": str(path), "stall_after_s": 600.0}


def args_argv(parser, args, leave_out: tuple[str, ...] = ()) -> list[str]:
    """The options of ``args`` (parsed by ``parser``) as a command line again: every option whose value is
    not its default, a repeated one (``append``) once per value, ``nargs`` lists spread; positionals are
    not options and are left to the caller."""
    import argparse

    argv: list[str] = []
    done: set[str] = set()
    for act in parser._actions:  # argparse keeps its actions here; there is no public list
        if not act.option_strings or act.dest in leave_out or act.dest in done or isinstance(act, argparse._HelpAction):
            continue
        value = getattr(args, act.dest, None)
        if value is None or (value == act.default and not isinstance(act, argparse._AppendAction)):
            continue
        flag = act.option_strings[-1] if act.option_strings[-1].startswith("--") else act.option_strings[0]
        if isinstance(act, (argparse._StoreConstAction,)):  # store_true / store_false share a dest
            for other in parser._actions:
                if other.dest == act.dest and isinstance(other, argparse._StoreConstAction) and other.const == value:
                    argv.append(other.option_strings[-1])
                    done.add(act.dest)
                    break
            continue
        if isinstance(act, argparse._AppendAction):
            for v in value or []:
                argv += [flag, str(v)]
        elif isinstance(value, (list, tuple)):
            argv += [flag, *(str(v) for v in value)]
        else:
            argv += [flag, str(value)]
        done.add(act.dest)
    return argv


def resume_spec(out: Path, root: Path, log_dir: Path, python: str = sys.executable) -> tuple[ProcessSpec, dict]:
    """A job that resumes ``out`` with the parameters of its ``.job.json`` (a run started elsewhere)."""
    name = job_name(out)
    argv = [python, "-m", "backend.cli", "--workspace", str(root), "regen", "run", "--out", str(out)]
    spec = ProcessSpec(name=name, kind=Kind.REGENERATION, argv=tuple(argv), log_path=str(log_dir / f"{name}.log"),
                       cwd=str(REPO_ROOT), env={"PYTHONUNBUFFERED": "1"}, stop_grace_s=STOP_GRACE_S,
                       restart=RestartPolicy(mode="never"))
    return spec, {"kind": "regen", "out": str(out), "stall_after_s": 600.0}


def request_pause(out: str | os.PathLike[str]) -> Path:
    """Write ``pause`` to ``OUT.control`` (whole, by rename); the job reads it within a second."""
    path = RunFiles.of(out).control
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".control.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write("pause\n")
    os.replace(tmp, path)
    return path


@contextmanager
def _run_lock(files: RunFiles) -> Iterator[None]:
    """Hold the output's run lock (the lock a job holds on its progress log) meanwhile: a job that
    holds it now refuses this with :class:`RunLocked`, and none starts on the output until it is
    let go.  An output no job has logged progress for has no lock to take."""
    if not files.progress.exists():
        yield
        return
    with open_private(files.progress, "ab") as fh:
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise RunLocked(f"{files.progress}: a regeneration job is writing this output") from None
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def requeue_failed(out: str | os.PathLike[str], error_class: str | None = None) -> tuple[bool, str]:
    """Move the failed rows of ``out`` (all, or those of ``error_class``) back to its queue: (done,
    what happened), as ``regen requeue OUT`` says it.  Refused while a job runs on the output."""
    files = RunFiles.of(out)
    try:
        with _run_lock(files):
            n = output.requeue(files, error_class)
    except RunLocked:
        return False, f"error: a job is running on {files.out}; pause it first (its failed rows stay where they are)"
    what = f"failed rows of class {error_class}" if error_class else "failed rows"
    return True, f"{n} {what} moved back to the queue of {files.out}; the next regen run asks them again"


# -- what may be done to a job, and doing it ------------------------------------------------------


def job_for(rt, out: str):
    """The job started from the dashboard on ``out`` (:class:`backend.supervisor.adhoc.AdhocJob`), or None."""
    for job in rt.jobs():
        if job.meta.get("out") == out:
            return job
    return None


@dataclass(frozen=True)
class Controls:
    """One output's regeneration as the controls see it: which actions it allows now, and what they act on.

    ``state`` and ``failed`` come from the job's last progress snapshot (None and 0 before the first);
    ``job`` is the dashboard's job on the output (None for a run started elsewhere) and ``view`` its
    process in the supervisor."""

    out: str
    name: str  # the job's name, or ``regen-<output stem>`` for a run started elsewhere
    state: str | None = None
    failed: int = 0
    job: Any = None
    view: Any = None
    has_job_json: bool = False  # the output's parameters are known, so a run started elsewhere can resume

    @property
    def live(self) -> bool:
        """The dashboard's process for the job is running (or starting, stopping, waiting to restart)."""
        return self.view is not None and self.view.live

    @property
    def can_pause(self) -> bool:
        """The job submits rows and reads its control file: ours while it lives, or one started elsewhere."""
        return self.state in PAUSABLE_STATES and (self.live or self.view is None)

    @property
    def can_resume(self) -> bool:
        """Not running, not finished, and there is a command to run again (our job, or ``OUT.job.json``)."""
        return not self.live and self.state != "done" and (self.job is not None or self.has_job_json)

    @property
    def can_requeue(self) -> bool:
        """Failed rows, and no job writing the output."""
        return not self.live and self.state not in LIVE_STATES and self.failed > 0

    @property
    def can_stop(self) -> bool:
        """Only a process the dashboard supervises can be stopped from it."""
        return self.live

    @property
    def started_elsewhere(self) -> bool:
        """A job writes the output, but not under the dashboard: Pause works, Stop does not."""
        return self.view is None and self.state in LIVE_STATES


def controls(rt, out: str, snap: dict[str, Any] | None) -> Controls:
    """What may be done now to the regeneration writing ``out``, whose last progress snapshot is ``snap``."""
    snap = snap or {}
    job = job_for(rt, out)
    view = rt.supervisor.view(job.name) if job is not None else None
    return Controls(out=str(out), name=job.name if job is not None else job_name(Path(out)),
                    state=snap.get("state"), failed=int(snap.get("failed") or 0), job=job, view=view,
                    has_job_json=RunFiles.of(out).job.exists())


class Refused(RuntimeError):
    """A requeue that found a job writing the output; the message says so."""


# The actions below do what the page's buttons do.  The page offers each only when :class:`Controls`
# allows it; what reaches them anyway (a job that ended or started since) is refused where it lands,
# and audited: a stop or start by the supervisor, a requeue by the output's run lock.


def pause(rt, c: Controls, *, actor, source: str = "dashboard") -> tuple[bool, str]:
    """Ask the job to pause, through its control file; audited as ``pause``."""
    return rt.act("pause", c.name, lambda: (True, f"wrote {request_pause(c.out)}"), actor=actor, source=source)


def resume(rt, c: Controls, *, actor, source: str = "dashboard"):
    """Start the job again on the same output: it asks only the rows not written yet.  The dashboard's
    job is started as it was; a run started elsewhere becomes a job that runs with its ``.job.json``."""
    if c.job is not None:
        return rt.start(c.job.name, actor=actor, source=source)
    spec, meta = resume_spec(Path(c.out), rt.workspace.root, rt.workspace.logs_dir)
    return rt.start_job(spec, meta, actor=actor, source=source)


def requeue(rt, c: Controls, *, actor, source: str = "dashboard") -> str:
    """Move the failed rows back to the queue, here and now (the next resume asks them again); audited
    as ``requeue`` with what was moved.  :class:`Refused` when a job holds the output."""
    ok, text = rt.act("requeue", c.name, lambda: requeue_failed(c.out), actor=actor, source=source)
    if not ok:
        raise Refused(text)
    return text


def stop(rt, c: Controls, *, actor, source: str = "dashboard"):
    """The supervisor's stop: SIGTERM to the job's group, SIGKILL after its grace period."""
    return rt.stop(c.name, actor=actor, source=source)
