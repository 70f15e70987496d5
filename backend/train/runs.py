"""The workspace's training runs: configs, commands, and start / stop / resume through the supervisor.

:class:`TrainRuns` turns the ``[[train]]`` entries of the workspace file into supervisor specs (kind
``training``, log ``<workspace>/logs/<name>.log``, which backend.train.reader follows) and carries out
the Training page's and the command line's actions, each authorised and audited like a server's:

* ``command(name)``: argv, environment, Gen-3 YAML, generation and notes, for showing before a start;
* ``start(name)``: writes the Gen-3 YAML, registers the spec and starts it;
* ``stop(name)``: SIGTERM to the process group, SIGKILL after the run's ``stop_grace_s``;
* ``resume(name, confirmed=...)``: starts it again with ``--resume`` (Gen-3: ``training.resume_from``);
  when :meth:`TrainRuns.resume_warning` says something (SpecForge 0.2.0, whose ``--resume`` silently
  starts over; no checkpoint yet; torn checkpoints to move aside) it is refused unless confirmed.

A resume continues from the newest good checkpoint (:meth:`TrainRuns.resume_plan`): a torn or incomplete one
(backend.train.checkpoints.verify_checkpoint) newer than it is skipped, and the plan says which one the run
continues from.  The project's trainer skips a torn checkpoint itself; Gen-3 is pointed at the good folder
(``training.resume_from``); SpecForge's Gen-1/Gen-2 ``--resume`` takes the highest-numbered folder whatever
it holds, so a torn one newer than the good one is renamed ``NAME.torn`` first (after confirmation).

:func:`failure_reason` picks the line that says why a run ended from its log's last lines: a full disk as
"no space left on device in PATH" (torch's "unexpected pos" after a short write included, when the output
folder's disk is full), else a traceback's exception line rather than its "Traceback" header.

``save(cfg)`` writes a new or edited run back to the workspace file, comments kept, validated first.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from backend.filemodes import make_private_dirs
from backend.train.command import CommandError, TrainCommand, build_command, config_problems, output_dir_of
from backend.train.generation import EnvProbe, GenerationInfo, clear_cache, detect_generation, probe_env
from backend.train.config import TrainRunConfig
from specdeck_types.process import Kind, ProcessSpec, RestartPolicy

log = logging.getLogger(__name__)

RESUME_020 = ("SpecForge 0.2.0's --resume silently starts over: its checkpoint search does not match the "
              "epoch_N_step_M folders it writes, and it resets the step to 0 (fixed in March 2026, after 0.2.0, "
              "but a checkout of that time still reads 0.2.0). Resuming may train from step 0 again and write "
              "over the checkpoints in {out}.")
RESUME_UNKNOWN = ("SpecForge's version could not be read ({why}); if it is 0.2.0, --resume silently starts over "
                  "from step 0.")
RESUME_NOTHING = "There is no checkpoint in {out} yet: a resume starts from step 0."
RESUME_ALL_TORN = ("Every checkpoint in {out} is torn or incomplete ({names}): a resume starts from step 0. "
                   "{first}")
TRAINER_MODULE = "backend.flows.tiny"  # the project's trainer: its --resume skips a torn checkpoint itself


@dataclass(frozen=True)
class ResumePlan:
    """Where a resume of a run continues from.  ``skipped``: the torn or incomplete checkpoints newer than
    ``resume_from``; ``how`` they are skipped: ``trainer`` (the project's trainer passes over them),
    ``resume_from`` (Gen-3 is pointed at the good folder) or ``move`` (renamed ``NAME.torn`` before the start,
    as SpecForge's Gen-1/Gen-2 ``--resume`` takes the highest-numbered folder)."""

    output_dir: Path
    resume_from: Any  # backend.train.checkpoints.Checkpoint | None
    skipped: tuple = ()
    how: str = "trainer"
    count: int = 0  # checkpoints in the folder, torn ones included

    @property
    def message(self) -> str:
        """One sentence on the fallback; empty when nothing is skipped."""
        if not self.skipped:
            return ""
        names = ", ".join(c.name for c in self.skipped)
        first = self.skipped[0].problems[0] if self.skipped[0].problems else ""
        if self.resume_from is None:
            return RESUME_ALL_TORN.format(out=self.output_dir, names=names, first=first)
        said = (f"{names} {'is' if len(self.skipped) == 1 else 'are'} torn or incomplete ({first}): the run "
                f"resumes from {self.resume_from.name}, the newest good checkpoint.")
        if self.how == "move":
            said += (" SpecForge's --resume takes the highest-numbered folder, so "
                     + ", ".join(f"{c.name} is renamed {c.name}.torn" for c in self.skipped) + " first.")
        return said

    @property
    def needs_confirmation(self) -> bool:
        return bool(self.skipped) and (self.resume_from is None or self.how == "move")


class ResumeNeedsConfirmation(Exception):
    """Resume refused: :meth:`TrainRuns.resume_warning` said something and it was not confirmed."""

    def __init__(self, name: str, warning: str):
        self.name = name
        self.warning = warning
        super().__init__(f"resume {name}: confirm first: {warning}")


@dataclass(frozen=True)
class RunCommand:
    """What ``command(name)`` returns; unpacks as ``argv, env, yaml_text, generation, notes``."""

    name: str
    argv: tuple[str, ...]
    env: dict[str, str]
    yaml_text: str | None
    generation: GenerationInfo
    notes: tuple[str, ...]
    cwd: str
    output_dir: str
    yaml_path: str | None
    resume: bool

    def __iter__(self) -> Iterator[Any]:
        return iter((self.argv, self.env, self.yaml_text, self.generation, self.notes))


def _local(actor: Any, action: str, name: str, source: str) -> tuple[str, str]:
    from state import audit

    return str(actor), audit.LOCAL


class TrainRuns:
    def __init__(self, workspace, supervisor, store=None, *,
                 authorise: Callable[[Any, str, str, str], tuple[str, str]] | None = None,
                 probe: Callable[[str], EnvProbe] | None = None):
        """``authorise(actor, action, name, source) -> (who, client)`` is the runtime's (a dashboard
        caller is checked there); ``probe(python)`` replaces asking the training interpreter."""
        self.workspace = workspace
        self.supervisor = supervisor
        self.store = store if store is not None else getattr(supervisor, "store", None)
        self._authorise = authorise or _local
        self._probe = probe or probe_env
        self._lock = threading.RLock()

    # -- configs ---------------------------------------------------------------

    def configs(self) -> list[TrainRunConfig]:
        # the workspace validated every entry already
        return [TrainRunConfig.model_validate(e) for e in getattr(self.workspace.config, "train", []) or []]

    def names(self) -> list[str]:
        return [c.name for c in self.configs()]

    def config(self, name: str) -> TrainRunConfig:
        for c in self.configs():
            if c.name == name:
                return c
        raise KeyError(f"no training run named {name!r} (known: {', '.join(self.names()) or 'none'})")

    def save(self, cfg: TrainRunConfig, *, actor: Any = "specdeck", source: str = "dashboard") -> None:
        """Write ``cfg`` (new or edited) into its ``[[train]]`` entry, comments kept; a config that does
        not validate raises backend.workspace.ConfigError (file:line: field: reason) before anything is
        written.  The fields ``cfg`` sets are written (one set to ``None`` is removed from the file); a key
        of the entry that ``cfg`` does not set stays as it is."""
        from backend.workspace import update_entry

        who, client = self._authorise(actor, "edit", cfg.name, source)
        new = cfg.name not in self.names()
        values = cfg.model_dump(mode="json", exclude_unset=True)
        with self._lock:
            update_entry(self.workspace, "train", cfg.name, values, create=True)
        self._audit(who, source, "edit", cfg.name, "added the training run" if new else "edited the training run",
                    "ok", client)

    # -- commands ----------------------------------------------------------------

    def log_path(self, name: str) -> Path:
        return Path(self.workspace.log_path(name))

    def output_dir(self, name: str) -> Path:
        return Path(output_dir_of(self.config(name), self.workspace.root, self.workspace.outputs_dir))

    def generation(self, name: str, cfg: TrainRunConfig | None = None, *, refresh: bool = False) -> GenerationInfo:
        """The run's generation: chosen, or detected from its interpreter and checkout (the interpreter's
        answer is cached; ``refresh`` asks it again, e.g. after SpecForge was installed or upgraded).  A
        ``module:`` entry speaks Gen-2's flags unless another generation is chosen, and its interpreter is
        not asked."""
        cfg = cfg or self.config(name)
        if refresh:
            clear_cache(cfg.python)
        if cfg.entry_kind == "module":
            gen = cfg.generation if cfg.generation != "auto" else "gen2"
            return GenerationInfo(generation=gen, version=None, chosen=cfg.generation != "auto",
                                  evidence=(f"entry {cfg.entry!r} takes Gen-{gen[-1]}'s flags",))
        return detect_generation(cfg.python, _abs(cfg.specforge_dir, self.workspace.root), cfg.generation,
                                 probe=self._probe(cfg.python))

    def command(self, name: str, *, resume: bool = False, cfg: TrainRunConfig | None = None,
                check: bool = True) -> RunCommand:
        """The run's command (``cfg``: an edited config not saved yet); raises :class:`CommandError`
        naming the fields that prevent it.  ``check``: ask the run's SpecForge whether it takes the command
        (backend.train.specforge_check; its flag table without SpecForge), a refusal raising CommandError in
        SpecForge's words."""
        cfg = cfg or self.config(name)
        info = self.generation(name, cfg)
        notes = list(info.evidence) + list(info.problems)
        cmd: TrainCommand = build_command(cfg, info.generation, root=self.workspace.root,
                                          outputs_dir=self.workspace.outputs_dir,
                                          console_script=info.console_script, resume=resume,
                                          notes=tuple(notes))
        said: tuple[str, ...] = ()  # SpecForge's answer comes first among the notes
        if check:
            from backend.train.specforge_check import review

            probe = self._probe(cfg.python) if cfg.entry_kind == "specforge" else None
            said = review(cfg, cmd, info, probe, specforge_dir=_abs(cfg.specforge_dir, self.workspace.root))
        extra = []
        n = self._checkpoint_count(cmd.output_dir, cfg.name)
        if n and not resume:
            extra.append(f"{cmd.output_dir} already holds {n} checkpoint(s): Start trains from step 0 "
                         "(Resume continues from the latest)")
        argv = cmd.argv
        if resume and info.generation == "gen3":
            plan = self.resume_plan(name, cfg=cfg, info=info)
            if plan.skipped and plan.resume_from is not None:  # not the -latest link: the newest good step
                argv = tuple(f"training.resume_from={plan.resume_from.path}"
                             if a.startswith("training.resume_from=") else a for a in argv)
            if plan.message:
                extra.append(plan.message)
        env = dict(cmd.env)
        if cfg.where == "ray":  # what the spec runs with (see _spec), shown the same before a start
            env.pop("CUDA_VISIBLE_DEVICES", None)
            extra.append(f"on the Ray cluster: a job asking for {cfg.nproc} GPU(s); Ray sets CUDA_VISIBLE_DEVICES "
                         "to the ones it grants" + (f" (gpus = {cfg.gpus} gives the count only)" if cfg.gpus else ""))
        return RunCommand(name=cfg.name, argv=argv, env=env, yaml_text=cmd.yaml_text, generation=info,
                          notes=said + cmd.notes + tuple(extra), cwd=cmd.cwd, output_dir=cmd.output_dir,
                          yaml_path=cmd.yaml_path, resume=resume)

    def spec(self, name: str, *, resume: bool = False) -> ProcessSpec:
        cfg = self.config(name)
        return self._spec(cfg, self.command(name, resume=resume, cfg=cfg))

    def _spec(self, cfg: TrainRunConfig, cmd: RunCommand) -> ProcessSpec:
        """The run's supervisor spec.  ``where = "ray"``: a job on the workspace's [cluster] that asks Ray for
        the run's GPUs (one per process); Ray sets CUDA_VISIBLE_DEVICES to the GPUs it grants, so the
        config's GPU indices (this node's) are not passed."""
        env = dict(cmd.env)
        on_ray = cfg.where == "ray"
        if on_ray:
            env.pop("CUDA_VISIBLE_DEVICES", None)
        return ProcessSpec(name=cfg.name, kind=Kind.TRAINING, argv=cmd.argv, log_path=str(self.log_path(cfg.name)),
                           cwd=cmd.cwd, env=env, stop_grace_s=cfg.stop_grace_s,
                           restart=RestartPolicy(mode="never"), where=cfg.where,
                           num_gpus=float(cfg.nproc) if on_ray else 0.0)

    def specs(self) -> list[ProcessSpec]:
        """Specs of the runs whose command can be built (the runtime adds them to the supervisor's)."""
        out = []
        for cfg in self.configs():
            try:
                out.append(self._spec(cfg, self.command(cfg.name, cfg=cfg, check=False)))
            except CommandError as exc:
                log.info("training run %s has no command yet: %s", cfg.name, exc)
        return out

    def view(self, name: str):
        return self.supervisor.view(name)

    def checkpoints(self, name: str):
        """The run's checkpoints (backend.train.checkpoints.RunCheckpoints) in its output folder."""
        from backend.train.checkpoints import list_checkpoints

        cfg = self.config(name)
        return list_checkpoints(output_dir_of(cfg, self.workspace.root, self.workspace.outputs_dir))

    # -- resume ------------------------------------------------------------------

    def _checkpoint_count(self, output_dir: str | Path, run_id: str) -> int:
        from backend.train.checkpoints import list_checkpoints

        try:
            return len(list_checkpoints(output_dir).checkpoints)
        except OSError:
            return 0

    def resume_plan(self, name: str, *, cfg: TrainRunConfig | None = None,
                    info: GenerationInfo | None = None) -> ResumePlan:
        """Which checkpoint a resume of ``name`` continues from, and the torn ones it skips."""
        from backend.train.checkpoints import list_checkpoints

        cfg = cfg or self.config(name)
        info = info or self.generation(name, cfg)
        out = Path(output_dir_of(cfg, self.workspace.root, self.workspace.outputs_dir))
        try:
            run = list_checkpoints(out, cfg.name if info.generation == "gen3" else None)
        except OSError:
            return ResumePlan(out, None)
        good = run.latest_good
        if good is None:
            skipped = tuple(sorted(run.torn, key=lambda c: c.order, reverse=True))
        else:
            skipped = tuple(sorted((c for c in run.torn if c.order > good.order or c.latest),
                                   key=lambda c: c.order, reverse=True))
        if info.generation == "gen3":
            how = "resume_from"
        elif cfg.entry_kind == "module" and cfg.entry_words and cfg.entry_words[0] == TRAINER_MODULE:
            how = "trainer"
        else:
            how = "move"
        return ResumePlan(out, good, skipped, how, len(run.checkpoints))

    def resume_note(self, name: str) -> str:
        """The resume's fallback from torn checkpoints, said beside the resume (empty when none)."""
        return self.resume_plan(name).message

    def resume_warning(self, name: str) -> str:
        """What a resume of ``name`` should be confirmed against; empty when nothing."""
        cfg = self.config(name)
        info = self.generation(name, cfg)
        out = output_dir_of(cfg, self.workspace.root, self.workspace.outputs_dir)
        plan = self.resume_plan(name, cfg=cfg, info=info)
        said = []
        if cfg.entry_kind == "specforge" and info.generation == "gen2":
            if info.version is None:
                why = "; ".join(info.problems) or "no package metadata and no version.txt"
                said.append(RESUME_UNKNOWN.format(why=why))
            elif _is_020(info.version):
                said.append(RESUME_020.format(out=out))
        if not plan.count:
            said.append(RESUME_NOTHING.format(out=out))
        elif plan.needs_confirmation:
            said.append(plan.message)
        return " ".join(said)

    # -- actions -------------------------------------------------------------------

    def start(self, name: str, *, actor: Any = "cli", source: str = "cli"):
        return self._launch(name, "start", resume=False, actor=actor, source=source)

    def resume(self, name: str, *, actor: Any = "cli", source: str = "cli", confirmed: bool = False):
        return self._launch(name, "resume", resume=True, actor=actor, source=source, confirmed=confirmed)

    def stop(self, name: str, *, actor: Any = "cli", source: str = "cli", wait: bool = False):
        from state import audit

        who, client = self._authorise(actor, "stop", name, source)
        with audit.acting_from(client):  # a run removed from the file while running can still be stopped
            return self.supervisor.stop(name, actor=who, source=source, wait=wait)

    def _launch(self, name: str, action: str, *, resume: bool, actor: Any, source: str, confirmed: bool = False):
        from state import audit

        who, client = self._authorise(actor, action, name, source)
        with audit.acting_from(client), self._lock:
            try:
                cfg = self.config(name)
                cmd = self.command(name, resume=resume, cfg=cfg)
            except (KeyError, CommandError) as exc:
                self._audit(who, source, action, name, str(exc).strip("'\""), "refused", client)
                raise
            view = self.supervisor.view(name)
            if view is not None and view.live:
                msg = f"{name} is already {view.state.value}; stop it first"
                self._audit(who, source, action, name, msg, "refused", client)
                raise ValueError(msg)
            if resume:
                warning = self.resume_warning(name)
                if warning and not confirmed:
                    self._audit(who, source, action, name, "needs confirmation: " + warning, "refused", client)
                    raise ResumeNeedsConfirmation(name, warning)
                if warning:
                    self._audit(who, source, "resume-confirmed", name, warning, "ok", client)
                plan = self.resume_plan(name, cfg=cfg)
                if plan.skipped and plan.how == "move" and plan.resume_from is not None:
                    for c in plan.skipped:
                        moved = _set_aside(c.path)
                        self._audit(who, source, "checkpoint-set-aside", name,
                                    f"torn {c.path} renamed {moved.name}", "ok", client)
                if plan.message:
                    self._audit(who, source, "resume-fallback", name, plan.message, "ok", client)
            if cmd.yaml_text is not None and cmd.yaml_path is not None:
                TrainCommand(argv=cmd.argv, env=cmd.env, cwd=cmd.cwd, generation=cmd.generation.generation or "",
                             output_dir=cmd.output_dir, yaml_text=cmd.yaml_text, yaml_path=cmd.yaml_path).write_yaml()
            make_private_dirs(cmd.output_dir)  # 0700 when Specdeck makes it; a folder already there is left
            spec = self._spec(cfg, cmd)
            # the spec with (or without) --resume must be the one this start uses: no config sync between
            with self.supervisor._lock:
                self.supervisor.register(spec)
                return self.supervisor.start(name, actor=who, source=source)

    def _audit(self, actor: str, source: str, action: str, target: str, detail: str, outcome: str,
               client: str) -> None:
        if self.store is None:
            return
        try:
            from state import audit

            audit.record(self.store, actor, source, action, target, detail, outcome, client=client)
        except Exception:  # the action's result must not depend on the audit write
            log.exception("could not audit %s %s", action, target)


def _set_aside(path: Path) -> Path:
    """Rename a torn checkpoint folder ``NAME`` to ``NAME.torn`` (``NAME.torn-2`` … when taken): a name no
    trainer's checkpoint search matches, kept for a look."""
    n = 1
    while True:
        dest = path.with_name(f"{path.name}.torn" + (f"-{n}" if n > 1 else ""))
        if not dest.exists():
            os.rename(path, dest)
            return dest
        n += 1


# -- why a run ended ------------------------------------------------------------------------------------

_NO_SPACE = re.compile(r"no space left on device", re.I)
_ERRNO28 = re.compile(r"\[Errno 28\] No space left on device(?:: '(?P<path>[^']+)')?")
_TORCH_SHORT = re.compile(r"unexpected pos|PytorchStreamWriter failed writing|file write failed")
_EXC_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt|Full)\b:?")
_ERROR = re.compile(r"\b(ERROR|Error|error:|Exception|FATAL|Fatal)\b")
LOW_FREE_BYTES = 64 << 20  # a short write with less than this left is taken for a full disk


def _free(path: str | Path) -> int | None:
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        return shutil.disk_usage(p).free
    except OSError:
        return None


def failure_reason(lines: list[str], output_dir: str | Path | None = None) -> str | None:
    """Why a run ended, from its log's last ``lines``: a full disk said as "no space left on device in
    PATH" (the trainer's own line; Python's ``[Errno 28]``; torch's "unexpected pos" short write while
    ``output_dir``'s disk has under :data:`LOW_FREE_BYTES` free), else the last traceback's exception line,
    else the last error line.  None when nothing in them says."""
    text = [ln.rstrip() for ln in lines]
    for ln in reversed(text):
        if "no space left on device in " in ln:
            return ln.strip()
    for ln in reversed(text):
        m = _ERRNO28.search(ln)
        if m:
            where = Path(m.group("path")).parent if m.group("path") else output_dir
            return f"no space left on device in {where}" if where else "no space left on device"
        if _NO_SPACE.search(ln):
            return f"no space left on device in {output_dir}" if output_dir else ln.strip()
    short = next((ln for ln in reversed(text) if _TORCH_SHORT.search(ln)), None)
    if short is not None and output_dir is not None:
        free = _free(output_dir)
        if free is not None and free < LOW_FREE_BYTES:
            return f"no space left on device in {output_dir} (torch: {short.strip()[:200]})"
        return (f"torch could not write a file in {output_dir}: {short.strip()[:200]} (a short write: was the "
                f"disk full? {free / 2**30:.1f} GiB free now)" if free is not None else
                f"torch could not write a file in {output_dir}: {short.strip()[:200]}")
    tb = max((i for i, ln in enumerate(text) if ln.startswith("Traceback (most recent call last)")), default=None)
    if tb is not None:
        for ln in reversed(text[tb + 1:]):
            if _EXC_LINE.match(ln.strip()) and not ln.startswith((" ", "\t")):
                return ln.strip()
    for ln in reversed(text):
        if _ERROR.search(ln) and not ln.startswith("Traceback"):
            return ln.strip()
    return None


def _abs(path: str | None, root: Path) -> str | None:
    from backend.train.config import resolve_path

    return resolve_path(path, Path(root))


def _is_020(version: str) -> bool:
    from backend.pyprobe import parse_version

    try:
        v = parse_version(version)
    except ValueError:
        return False
    return (v + (0, 0, 0))[:3] == (0, 2, 0)


__all__ = ["ResumeNeedsConfirmation", "ResumePlan", "RunCommand", "TrainRuns", "config_problems", "failure_reason"]
