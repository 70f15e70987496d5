"""Controlling a regeneration from the dashboard: the job's command, pause and requeue.

A regeneration started from the page runs the same command as from a terminal,
``python -m backend.cli --workspace ROOT regen run ...``, as a supervised process of kind
``regeneration`` (an ad-hoc job, :mod:`backend.supervisor.adhoc`).  The page never holds the
job's state: the output files and the progress log are the state.

- start: :func:`run_argv` builds the argv from validated form values, :func:`job_spec` the spec;
- pause: :func:`request_pause` writes ``pause`` to ``OUT.control`` (the job stops submitting,
  finishes what is in flight, flushes and exits 0 in state ``paused``);
- resume: the same spec started again: the job resumes from the ids already written;
- requeue failed: ``regen requeue OUT`` (:func:`requeue_argv`), run to completion;
- stop: the supervisor's stop (SIGTERM to the group, grace, SIGKILL).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from backend.regen.output import RunFiles
from backend.supervisor.spec import Kind, ProcessSpec, RestartPolicy

REPO_ROOT = Path(__file__).resolve().parents[2]
REASONING = ("none", "save", "disable")
STOP_GRACE_S = 60.0  # a stopped job flushes what it has before it exits
REQUEUE_TIMEOUT_S = 120.0


class FormError(ValueError):
    """A form value that cannot be used; the message names the field."""


@dataclass(frozen=True)
class RunForm:
    """What the start form asks for."""

    out: str
    servers: tuple[str, ...]
    mix: str | None = None
    inputs: tuple[str, ...] = ()
    concurrency: int = 64
    max_tokens: int = 4096
    temperature: float = 0.7
    top_p: float | None = None
    reasoning: str = "none"
    system_prompt: str | None = None
    stall_after_min: float = 10.0
    extra: dict[str, str] = field(default_factory=dict)

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
        if self.concurrency < 1:
            raise FormError(f"concurrency: {self.concurrency} is not at least 1")
        if self.max_tokens < 1:
            raise FormError(f"max tokens: {self.max_tokens} is not at least 1")
        if not 0.0 <= self.temperature <= 2.0:
            raise FormError(f"temperature: {self.temperature} is not between 0 and 2")
        if self.top_p is not None and not 0.0 < self.top_p <= 1.0:
            raise FormError(f"top_p: {self.top_p} is not in (0, 1]")
        if self.reasoning not in REASONING:
            raise FormError(f"reasoning: {self.reasoning!r} is not one of {', '.join(REASONING)}")
        if self.stall_after_min <= 0:
            raise FormError("stall alert: give a number of minutes above 0")
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
    return argv


def job_spec(form: RunForm, root: Path, log_dir: Path, python: str = sys.executable) -> tuple[ProcessSpec, dict]:
    """The supervised process for ``form`` and the meta the page and the stall alert read."""
    argv = run_argv(form, root, python)
    out = form.check(root)
    name = job_name(out)
    spec = ProcessSpec(name=name, kind=Kind.REGENERATION, argv=tuple(argv), log_path=str(log_dir / f"{name}.log"),
                       cwd=str(REPO_ROOT), env={"PYTHONUNBUFFERED": "1"}, stop_grace_s=STOP_GRACE_S,
                       restart=RestartPolicy(mode="never"))
    meta = {"kind": "regen", "out": str(out), "stall_after_s": form.stall_after_min * 60.0,
            "mix": form.mix, "inputs": list(form.inputs), "servers": list(form.servers)}
    return spec, meta


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


def requeue_argv(out: str | os.PathLike[str], python: str = sys.executable) -> list[str]:
    return [python, "-m", "backend.cli", "regen", "requeue", str(RunFiles.of(out).out)]


def requeue(out: str | os.PathLike[str], *, timeout_s: float = REQUEUE_TIMEOUT_S) -> tuple[bool, str]:
    """Run ``regen requeue OUT``; (succeeded, what it printed).  Past ``timeout_s`` it gets
    SIGTERM, then SIGKILL after a grace period."""
    try:
        proc = subprocess.Popen(requeue_argv(out), cwd=REPO_ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
    except OSError as exc:
        return False, f"could not run regen requeue: {exc}"
    try:
        text, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
        return False, f"regen requeue did not finish within {timeout_s:.0f} s and was stopped"
    text = (text or "").strip()
    return proc.returncode == 0, text or f"exit status {proc.returncode}"
