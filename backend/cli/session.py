"""What every command of the CLI shares: the workspace session, the actor,
errors to report, starting a job on the workspace's Ray cluster, and small
formatting helpers."""

from __future__ import annotations

import getpass
from typing import TYPE_CHECKING, Any, TextIO

# The supervisor, the workspace reader and the state store are imported where a session opens, so a
# command's --help and the commands that need no session do not pay for them.
if TYPE_CHECKING:
    from backend.supervisor.spec import ProcessSpec
    from backend.workspace import Workspace

SOURCE = "cli"


class CommandError(Exception):
    """A failure to report to the user (exit status 1)."""


def actor() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry in some containers
        return "unknown"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def report(v, out: TextIO) -> None:
    from backend.supervisor.machine import describe_exit

    pid = f" pid {v.pid}" if v.pid else ""
    code = f" ({describe_exit(v.exit_code)})" if v.state.value in ("EXITED", "FATAL") and v.exit_code is not None else ""
    out.write(f"{v.name}: {v.state.value}{pid}{code}\n")


def print_findings(findings, out: TextIO) -> None:
    for f in findings:
        out.write(f"{f.severity.upper():8} {f.code}: {f.found}\n")
        if f.fix:
            out.write(f"{'':8} fix: {f.fix}\n")


class Session:
    """The workspace, its store, a supervisor and the server fleet, closed together."""

    def __init__(self, workspace: str | None, *, act: bool = True):
        """``act=False`` for reading commands: they observe and record what
        happened, but never start, signal or restart a process."""
        from backend.supervisor.supervisor import Supervisor
        from backend.flows.workspace import load_workspace
        from state import Store
        from backend.sglang.fleet import ServerFleet

        self.ws = load_workspace(workspace)
        self.store = Store(self.ws.store_path)
        try:
            self.store.writable()  # a write that changes nothing: a refusing store is said after the command
            self.sup = Supervisor(self.store, self.ws.run_dir, default_cwd=self.ws.root, act=act)
            self._telemetry = None
            self.fleet = ServerFleet(self.ws, self.sup, self.store, background=False, gpu_probe=self.gpu_probe)
            # Not pruning: a dashboard of an older config may still own records;
            # the dashboard prunes when it syncs.
            self.sup.sync_specs(self.ws.process_specs() + self.fleet.specs(), prune=False)
            self._train = None
        except BaseException:
            self.store.close()
            raise

    @property
    def train(self):
        """The workspace's training runs (backend.train.runs.TrainRuns), their specs registered."""
        if self._train is None:
            from backend.train.runs import TrainRuns

            self._train = TrainRuns(self.ws, self.sup, self.store)
            self.sup.sync_specs(self._train.specs(), prune=False)
        return self._train

    def gpu_probe(self, exclude: str | None = None) -> list[tuple[int, int, int]] | None:
        """GPUs and free memory for preflight, from the workspace's telemetry source
        (as the dashboard sees them): read once per command, and afresh whenever a
        server's own memory is to count as free (a relaunch; see probe_free_memory)."""
        from backend.telemetry.attribution import probe_free_memory
        from backend.telemetry.sampler import make_workspace_sampler

        if self._telemetry is None:
            self._telemetry = make_workspace_sampler(self.ws, None, managed=self.sup.views)
            self._telemetry.sample_once()
        return probe_free_memory(self._telemetry, exclude)

    def require_writable(self) -> None:
        """Refuse (:class:`StoreUnwritable`) when the store cannot be written: a command that starts
        or changes processes would act on state it cannot record."""
        from state import StoreUnwritable

        if not self.store.health().ok and not self.store.writable():
            h = self.store.health()
            if h.state == "unwritable":
                raise StoreUnwritable(h.path, h.problem + "; this command changes state, so nothing was done",
                                      h.remedy)
            raise CommandError(h.message)

    def store_note(self) -> str | None:
        """What to tell the user after a command when the store is not sound (None when it is)."""
        h = self.store.health()
        if h.ok:
            return None
        held = self.sup.memory_note()
        if h.state == "unwritable":
            return (f"state store {h.path} cannot be written ({h.problem}); the states shown come from the "
                    "run files and the OS, held in memory only" + (f" ({held})" if held else "")
                    + f". {h.remedy}")
        return h.message

    def close(self) -> None:
        self.fleet.close()
        self.sup.close()
        self.store.close()


# -- --where ray ----------------------------------------------------------------------------


def need_cluster(ws: Workspace, error: type[Exception] = CommandError) -> None:
    """Refuse ``--where ray`` (``error``) when workspace ``ws`` has no [cluster] section."""
    if ws.config.cluster is None:
        raise error(f"--where ray: {ws.config_path} has no [cluster] section (kind = \"ray\", "
                    "address = \"local\" or \"http://HOST:8265\")")


def start_on_ray(s: Session, spec: ProcessSpec, meta: dict[str, Any], follow: str) -> str:
    """Save job ``spec`` (with ``meta``) with the dashboard's jobs, so its page follows it, register it and
    start it in ``s``, an acting session (``spec`` says where: the workspace's Ray cluster); returns, once
    Ray has the job, the line that says which job runs it, its log and ``follow`` (where to see its progress)."""
    from backend.supervisor.adhoc import save_job

    save_job(s.ws.run_dir, spec, meta)
    s.sup.register(spec)
    v = s.sup.start(spec.name, actor=actor(), source=SOURCE)
    return f"{spec.name}: {v.state.value} on the Ray cluster as job {v.submission_id}; log {spec.log_path}, {follow}\n"
