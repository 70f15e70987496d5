"""The supervisor: one API over managed processes for the dashboard and the CLI.

Stopping (SIGTERM, grace, SIGKILL) lives in :mod:`backend.supervisor.stopping`,
the reconcile pass (``adopt``/``poll``) in :mod:`backend.supervisor.ticking`
and the background thread that runs it in :mod:`backend.supervisor.loop`.

All durable state lives in the state store (``state.processes``) and in the
files the wrappers leave in the run dir, so any number of supervisors (the
dashboard, a command-line call) can work on one workspace, and a new
supervisor re-adopts what an earlier one started.  In memory there are only
caches and the progress of readiness probes.

``poll()`` is the periodic tick: it reads identity and exit files, checks
liveness by pid plus create time, runs readiness probes without waiting on
them (a one-shot caller passes ``sync_probes=True``; ``adopt()`` does), applies
the restart policy and carries stops forward, including a stop or restart
that another supervisor asked for.  It writes to SQLite only when something
changed.  :class:`SupervisorLoop` runs it on a thread.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from backend.filemodes import make_private_dirs
from backend.supervisor import machine
from backend.supervisor.logtail import TailChunk, read_last, read_tail
from backend.supervisor.raybackend import PENDING_PREFIX, RayMixin
from backend.supervisor.raycluster import Cluster
from backend.supervisor.osproc import HttpProber, Killer, Launch, OsKiller, Prober, Spawner, WrapperSpawner
from backend.supervisor.runfiles import RunPaths, read_identity
from backend.supervisor.stopping import RunProgress, StopMixin, SupervisorError
from backend.supervisor.ticking import TickMixin
from specdeck_types.process import Kind, ProcessSpec, ProcState
from state import audit
from state.processes import HeldRepo, ProcessRecord, StateEvent
from state.store import Store, StoreError

log = logging.getLogger(__name__)

S = ProcState
# After a restart's stop, the exit and the new start are two writes of whichever supervisor recorded the exit
# (another process, such as the dashboard, may be the one): a restart waiting for its new run gives that
# supervisor this long between the two before it says the server did not start again.
RESTART_SEEN_S = 5.0


class UnknownProcess(SupervisorError):
    pass


class ActionRefused(SupervisorError):
    pass


@dataclass(frozen=True)
class ProcessView:
    """A snapshot of one managed process, for pages and the CLI."""

    name: str
    kind: Kind
    state: ProcState
    state_since: float
    pid: int | None  # the child's pid while it exists
    uptime_s: float | None
    exit_code: int | None
    ready: bool
    readiness: str  # what the readiness probe waits for
    log_path: str
    tries: int
    detail: str
    spec: ProcessSpec
    started_at: float | None = None
    ended_at: float | None = None
    run_id: str | None = None
    spec_pending: bool = False  # the config changed; applies at next start
    restart_pending: bool = False  # STOPPING, and starts again once stopped
    backend: str = "local"  # "local" or "ray" (the spec's where)
    submission_id: str | None = None  # Ray: the job's submission id (the run id)
    pending: str | None = None  # Ray: why the job is queued (waiting for resources, setting up)

    @property
    def active(self) -> bool:
        return self.state.is_active

    @property
    def live(self) -> bool:
        """Running, starting, stopping or waiting to restart: a Stop has something to end."""
        return self.state.is_active or self.state == S.BACKOFF


class Supervisor(RayMixin, TickMixin, StopMixin):
    """Start, stop, restart and watch the processes of one workspace.

    >>> sup = Supervisor(store, workspace.run_dir)
    >>> sup.sync_specs(workspace.process_specs())
    >>> sup.start("sim-server", actor="alice", source="dashboard")
    >>> sup.poll()                 # or SupervisorLoop(sup).start()
    >>> [v.state for v in sup.views()]
    """

    def __init__(
        self,
        store: Store,
        run_dir: str | os.PathLike[str],
        *,
        clock: Callable[[], float] = time.time,
        spawner: Spawner | None = None,
        killer: Killer | None = None,
        prober: Prober | None = None,
        sleep: Callable[[float], None] = time.sleep,
        stop_timeout_s: float = 10.0,
        default_cwd: str | os.PathLike[str] | None = None,
        act: bool = True,
        cluster: Cluster | None = None,
    ):
        """``default_cwd``: where a spec without ``cwd`` runs (default: the
        workspace folder, ``run_dir``'s parent).  ``cluster``: the Ray cluster for
        ``where = "ray"`` specs (default: the ``[cluster]`` of the workspace config
        beside ``run_dir``, read when needed).  ``act=False`` makes a
        supervisor that only observes: its polls record what happened
        (identities, exits, readiness) but start, signal and restart
        nothing, and its control actions are refused; reading commands use it.
        """
        self.store = store
        self.run_dir = Path(run_dir)
        self.default_cwd = str(Path(default_cwd) if default_cwd is not None else self.run_dir.parent)
        self._act = act
        make_private_dirs(self.run_dir)
        self._clock = clock
        self._sleep = sleep
        self._spawner = spawner if spawner is not None else WrapperSpawner()
        self._killer = killer if killer is not None else OsKiller()
        self._prober = prober if prober is not None else HttpProber()
        self._stop_timeout_s = stop_timeout_s  # after SIGKILL, how long stop(wait=True) waits
        self._repo = HeldRepo(store, clock)
        self._backup_tried_at: float | None = None
        self._lock = threading.RLock()
        self._records: dict[str, ProcessRecord] = {}
        self._version: tuple[int, int] | None = None
        self._runs: dict[str, RunProgress] = {}
        self._sync_probes = False  # set for the duration of a poll(sync_probes=True)
        self._closed = False
        self._ray_cluster_given = cluster
        self._ray_cache = None
        self.adopt()

    # -- records -----------------------------------------------------------

    def _refresh(self) -> None:
        version = self._repo.version()
        if version != self._version:
            self._records = {r.name: r for r in self._repo.list()}
            self._version = version

    def _put(self, rec: ProcessRecord | None) -> ProcessRecord | None:
        if rec is not None:
            self._records[rec.name] = rec
        return rec

    def _move(self, rec: ProcessRecord, to: ProcState, *, at: float, detail: str, **changes) -> ProcessRecord | None:
        """Record the transition ``rec.state -> to`` if the store still holds
        ``rec``'s state and run (else None: another supervisor moved first)."""
        machine.check_transition(rec.state, to)
        if to != S.STOPPING:
            changes["pending_restart"] = None  # a restart request lives only as long as its stop
        return self._put(self._repo.transition(
            rec.name, to, at=at, expect=rec.state, expect_run_id=rec.run_id, detail=detail, **changes
        ))

    def _paths(self, name: str) -> RunPaths:
        return RunPaths.for_name(self.run_dir, name)

    def _run(self, rec: ProcessRecord) -> RunProgress:
        run = self._runs.get(rec.name)
        if run is None or run.run_id != rec.run_id:
            run = self._runs[rec.name] = RunProgress(rec.run_id)
        return run

    # -- config ------------------------------------------------------------

    def register(self, spec: ProcessSpec) -> None:
        """Add or update one process spec (see :meth:`sync_specs`)."""
        self.sync_specs([spec], prune=False)

    def sync_specs(self, specs: Iterable[ProcessSpec], *, prune: bool = True) -> None:
        """Make the records match the workspace config.

        A new name is registered as NEVER started.  A changed spec replaces
        the stored one at once when nothing runs, else it waits for the next
        start.  With ``prune``, records whose name left the config are
        dropped unless their process still runs (it can still be stopped).
        """
        specs = list(specs)
        names = [s.name for s in specs]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate process names: {', '.join(dupes)}")
        with self._lock:
            self._refresh()
            now = self._clock()
            for spec in specs:
                rec = self._records.get(spec.name)
                if rec is None:
                    self._put(self._repo.upsert(ProcessRecord(
                        name=spec.name, kind=spec.kind.value, spec=spec, state=S.NEVER, state_since=now,
                        log_path=spec.log_path, detail="from the workspace config",
                    )))
                elif rec.state.is_active or rec.state == S.BACKOFF:
                    pending = None if spec == rec.spec else spec
                    if pending != rec.pending_spec:
                        self._put(self._repo.update(spec.name, pending_spec=pending))
                elif spec != rec.spec or rec.pending_spec is not None:
                    self._put(self._repo.update(
                        spec.name, spec=spec, pending_spec=None, kind=spec.kind.value, log_path=spec.log_path
                    ))
            if prune:
                wanted = set(names)
                for name, rec in list(self._records.items()):
                    if name in wanted:
                        continue
                    if rec.state.is_active or rec.state == S.BACKOFF:
                        continue
                    self._repo.delete(name)
                    self._records.pop(name, None)
                    self._runs.pop(name, None)

    # -- control actions -----------------------------------------------------

    def _audit(self, actor: str, source: str, action: str, target: str, detail: str, outcome: str) -> None:
        try:
            audit.record(self.store, actor, source, action, target, detail, outcome, at=self._clock())
        except StoreError as exc:  # said once by the store; the action itself goes on
            log.warning("audit entry for %s %s not written: %s", action, target, exc.problem)
        except Exception:  # the action itself must not fail because of the audit write
            log.exception("could not write the audit entry for %s %s", action, target)

    def _refuse(self, actor: str, source: str, action: str, name: str, message: str, exc=ActionRefused):
        self._audit(actor, source, action, name, message, "refused")
        raise exc(message)

    def _get_for(self, actor: str, source: str, action: str, name: str) -> ProcessRecord:
        if not self._act:
            raise ActionRefused(f"{action} {name}: this supervisor only reads (act=False)")
        self._refresh()
        rec = self._records.get(name)
        if rec is None:
            known = ", ".join(sorted(self._records)) or "none"
            self._refuse(actor, source, action, name, f"no managed process named {name!r} (known: {known})",
                         UnknownProcess)
        return rec  # type: ignore[return-value]

    def start(self, name: str, actor: str = "cli", source: str = "cli") -> ProcessView:
        """Start ``name``; refused if it is already STARTING, RUNNING or STOPPING."""
        with self._lock:
            rec = self._get_for(actor, source, "start", name)
            if rec.state not in machine.STARTABLE:
                pid = f" (pid {rec.pid})" if rec.pid else ""
                self._refuse(actor, source, "start", name, f"{name} is already {rec.state.value}{pid}; stop it first")
            self._check_launchable(rec, actor, source, "start")
            new = self._spawn(rec, tries=0, reason=f"started by {actor} via {source}", actor=actor)
            ok = new is not None and new.state == S.STARTING
            self._audit(actor, source, "start", name, new.detail if new else "state changed meanwhile",
                        "ok" if ok else "error")
            if not ok:
                raise SupervisorError(f"could not start {name}: {new.detail if new else 'state changed meanwhile'}")
            return self._view(new, self._clock())

    def stop(self, name: str, actor: str = "cli", source: str = "cli", wait: bool = True) -> ProcessView:
        """SIGTERM to the process group (and descendants that left it), then
        SIGKILL after the spec's grace period.

        Works in every active state.  A process waiting to restart (BACKOFF)
        goes to EXITED at once; one whose child has not reported its pid yet
        is recorded STOPPING and ``poll()`` delivers SIGTERM once the pid is
        known; stopping a STOPPING process cancels a restart that was to
        follow.  With ``wait``, returns once it has ended (EXITED); without,
        it never waits on the process and ``poll()`` finishes the job.
        """
        with self._lock:
            rec = self._get_for(actor, source, "stop", name)
            if rec.state not in machine.STOPPABLE and rec.state != S.STOPPING:
                self._refuse(actor, source, "stop", name, f"{name} is not running (state {rec.state.value})")
            if rec.state in (S.STARTING, S.RUNNING):
                # Catch up first: it may have ended, or reported its pid, since the last poll.
                self._reconcile(rec, self._clock())
                rec = self._records.get(name, rec)
            if rec.state == S.BACKOFF:
                new = self._move(rec, S.EXITED, at=self._clock(),
                                 detail=f"stopped by {actor} via {source} while waiting to restart")
                self._audit(actor, source, "stop", name, "cancelled the pending restart", "ok")
                return self._view(new or rec, self._clock())
            if rec.state == S.STOPPING:
                what = "already stopping"
                if rec.pending_restart is not None and self._put(self._repo.update(
                        name, expect_run_id=rec.run_id, expect_fields={"state": S.STOPPING}, pending_restart=None)):
                    what += "; cancelled the restart that was to follow"
                self._audit(actor, source, "stop", name, what, "ok")
            elif rec.state in (S.STARTING, S.RUNNING):
                self._begin_stop(rec, actor, source)
            else:
                # It ended by itself (or was stopped elsewhere) just now.
                self._audit(actor, source, "stop", name, f"already {rec.state.value}", "ok")
                return self._view(rec, self._clock())
        if wait:
            self._wait_stopped(name)
        with self._lock:
            self._refresh()
            return self._view(self._records[name], self._clock())

    def restart(self, name: str, actor: str = "cli", source: str = "cli", wait: bool = True) -> ProcessView:
        """Stop (if running) and start again.

        The restart is recorded in the state store with the stop, before any
        signal is sent, and whichever supervisor records the exit (this
        one's, the dashboard's, any command-line call that acts) starts it
        again: a caller that dies half-way never leaves it stopped for good.
        With ``wait``, returns once the new run has started (or raises).  A
        program that cannot start (see :func:`launch_problem`) is refused
        before anything is stopped.
        """
        reason = f"restarted by {actor} via {source}"
        with self._lock:
            rec = self._get_for(actor, source, "restart", name)
            self._check_launchable(rec, actor, source, "restart")
            if rec.state in machine.STARTABLE:
                return self._restart_now(rec, actor, source, reason)
            if rec.state in (S.STARTING, S.RUNNING):
                self._reconcile(rec, self._clock())  # it may have ended since the last poll
                rec = self._records.get(name, rec)
            if rec.state in machine.STARTABLE:  # it ended just now
                return self._restart_now(rec, actor, source, reason)
            if rec.state == S.STOPPING:
                new = self._put(self._repo.update(name, expect_run_id=rec.run_id,
                                                  expect_fields={"state": S.STOPPING}, pending_restart=reason))
                if new is None:
                    self._audit(actor, source, "restart", name, "state changed meanwhile", "error")
                    raise SupervisorError(f"{name} changed state meanwhile; try again")
                self._audit(actor, source, "restart", name, "already stopping; starts once stopped", "ok")
            else:
                self._audit(actor, source, "restart", name, "stopping, then starting", "ok")
                self._begin_stop(rec, actor, source, restart_reason=reason)
            old_run = rec.run_id
            if not wait:
                return self._view(self._records.get(name, rec), self._clock())
        self._wait_stopped(name)
        deadline = self._clock() + RESTART_SEEN_S
        while True:
            with self._lock:
                self._refresh()
                rec = self._records[name]
                if rec.run_id != old_run and rec.state in (S.STARTING, S.RUNNING):
                    return self._view(rec, self._clock())
                if rec.state == S.STOPPING:
                    raise SupervisorError(f"{name} has not stopped yet (state STOPPING); "
                                          "it starts again once it has stopped")
                # the old run's exit recorded, and (by another supervisor) the new start not yet
                if rec.run_id != old_run or self._clock() >= deadline:
                    raise SupervisorError(f"{name} did not start again (state {rec.state.value}: {rec.detail})")
            self._sleep(0.05)

    def _restart_now(self, rec: ProcessRecord, actor: str, source: str, reason: str) -> ProcessView:
        new = self._spawn(rec, tries=0, reason=reason, actor=actor)
        ok = new is not None and new.state == S.STARTING
        self._audit(actor, source, "restart", rec.name, new.detail if new else "state changed meanwhile",
                    "ok" if ok else "error")
        if not ok:
            raise SupervisorError(f"could not start {rec.name}: {new.detail if new else 'state changed meanwhile'}")
        return self._view(new, self._clock())

    def _launch_problem(self, spec: ProcessSpec) -> str | None:
        if spec.on_ray:
            return self._ray_launch_problem(spec)
        return self._spawner.check(spec.argv, spec.cwd or self.default_cwd, dict(spec.env))

    def _check_launchable(self, rec: ProcessRecord, actor: str, source: str, action: str) -> None:
        """Refuse (audited) a start whose cwd or program does not exist, before any state changes."""
        problem = self._launch_problem(rec.effective_spec)
        if problem:
            left = "" if action == "start" else "; it was left as it is"
            self._refuse(actor, source, action, rec.name, f"{rec.name} cannot start: {problem}{left}")

    # -- spawning and stopping ----------------------------------------------

    def _spawn(self, rec: ProcessRecord, *, tries: int, reason: str, actor: str = "specdeck") -> ProcessRecord | None:
        spec = rec.effective_spec
        now = self._clock()
        run_id = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now)) + "-" + uuid.uuid4().hex[:8]
        # Reserve the run first, so no other supervisor starts it too.
        new = self._move(
            rec, S.STARTING, at=now, detail=reason,
            spec=spec, pending_spec=None, kind=spec.kind.value, log_path=spec.log_path, pid=None,
            create_time=None, wrapper_pid=None, wrapper_create_time=None, run_id=run_id, started_at=now,
            ended_at=None, exit_code=None, tries=tries, log_start=None, term_at=None,
        )
        if new is None:
            self._refresh()
            return None
        problem = self._launch_problem(spec)
        if problem:  # a restart whose program or folder went away meanwhile
            return self._move(new, S.FATAL, at=self._clock(), detail=f"cannot start: {problem}")
        if spec.on_ray:
            return self._ray_spawn(new, spec, run_id, actor)
        paths = self._paths(rec.name)
        launch = Launch(
            name=spec.name, run_id=run_id, argv=spec.argv, cwd=spec.cwd or self.default_cwd,
            env=dict(spec.env), log_path=spec.log_path, paths=paths, stop_grace_s=spec.stop_grace_s,
            spec_json=spec.to_json(),
        )
        try:
            paths.clear()
            handle = self._spawner.spawn(launch)
        except (OSError, ValueError) as exc:
            return self._move(new, S.FATAL, at=self._clock(), detail=f"could not spawn: {exc}")
        self._runs.pop(rec.name, None)
        return self._put(self._repo.update(
            rec.name, expect_run_id=run_id, wrapper_pid=handle.wrapper_pid,
            wrapper_create_time=handle.wrapper_create_time,
        )) or new

    def _note_identity(self, rec: ProcessRecord) -> ProcessRecord | None:
        ident = read_identity(self._paths(rec.name), rec.run_id)
        if ident is None:
            return None
        return self._put(self._repo.update(
            rec.name, expect_run_id=rec.run_id, pid=ident.pid, create_time=ident.create_time,
            wrapper_pid=ident.wrapper_pid, wrapper_create_time=ident.wrapper_create_time,
            log_start=ident.log_offset,
        ))

    # -- reading -------------------------------------------------------------

    def _view(self, rec: ProcessRecord, now: float) -> ProcessView:
        active = rec.state.is_active
        return ProcessView(
            name=rec.name,
            kind=rec.spec.kind,
            state=rec.state,
            state_since=rec.state_since,
            pid=rec.pid if active else None,
            uptime_s=max(0.0, now - rec.started_at) if active and rec.started_at else None,
            exit_code=rec.exit_code,
            ready=rec.state == S.RUNNING,
            readiness=rec.spec.readiness.describe(),
            log_path=rec.log_path,
            tries=rec.tries,
            detail=rec.detail,
            spec=rec.spec,
            started_at=rec.started_at,
            ended_at=rec.ended_at,
            run_id=rec.run_id,
            spec_pending=rec.pending_spec is not None,
            restart_pending=rec.pending_restart is not None,
            backend=rec.spec.where,
            submission_id=rec.run_id if rec.spec.on_ray else None,
            pending=(rec.detail[len(PENDING_PREFIX):] if rec.spec.on_ray and rec.state == S.STARTING
                     and rec.detail.startswith(PENDING_PREFIX) else None),
        )

    def views(self) -> list[ProcessView]:
        """Every managed process, by name (no OS calls; poll() keeps it current)."""
        with self._lock:
            self._refresh()
            now = self._clock()
            return [self._view(r, now) for _, r in sorted(self._records.items())]

    def view(self, name: str) -> ProcessView | None:
        with self._lock:
            self._refresh()
            rec = self._records.get(name)
            return self._view(rec, self._clock()) if rec is not None else None

    def names(self) -> list[str]:
        with self._lock:
            self._refresh()
            return sorted(self._records)

    def history(self, name: str, limit: int = 200) -> list[StateEvent]:
        """State transitions of ``name``, oldest first."""
        return self._repo.history(name, limit)

    def _log_path(self, name: str) -> str:
        with self._lock:
            self._refresh()
            rec = self._records.get(name)
            if rec is None:
                raise UnknownProcess(f"no managed process named {name!r}")
            return rec.log_path

    def tail(self, name: str, offset: int = 0, max_bytes: int = 64 * 1024, *, inode: int | None = None) -> TailChunk:
        """Log text of ``name`` appended since ``offset`` (see logtail.read_tail)."""
        return read_tail(self._log_path(name), offset, max_bytes, inode=inode)

    def tail_last(self, name: str, lines: int = 200) -> tuple[str, int]:
        """The last ``lines`` lines of the log and the offset to tail from.  A Ray process whose
        log has no copy here yet gets them from Ray's state API (offset 0: the copy follows)."""
        path = self._log_path(name)
        chunk = read_last(path, lines)
        if not chunk.text:
            rec = self._records.get(name)
            if rec is not None and rec.spec.on_ray and rec.run_id:
                try:
                    return self.ray_log_tail(rec, lines), 0
                except Exception as exc:  # the local (empty) copy is still the answer
                    log.info("no log tail of %s from Ray: %s", name, exc)
        return chunk.text, chunk.offset

    # -- the state store -------------------------------------------------------

    def held_changes(self) -> int:
        """How many process records changed in memory only, because the store refused the write."""
        return self._repo.held

    def memory_note(self) -> str | None:
        """While the store cannot be written and records are held in memory: a sentence saying so."""
        n = self._repo.held
        if not n:
            return None
        since = self._repo.held_since
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(since)) if since is not None else "now"
        return (f"the supervisor keeps supervising from memory: {n} process record{'s' if n != 1 else ''} "
                f"changed since {when} {'are' if n != 1 else 'is'} not saved yet, and will be written once "
                "the state store can be written again")

    def daily_backup(self, min_interval_s: float = 60.0) -> Path | None:
        """Make today's automatic backup of the store beside it, when none is there yet (tried at
        most once a ``min_interval_s``; only by a supervisor that acts).  Never raises: a backup
        that cannot be made is logged and tried again later."""
        now = self._clock()
        if not self._act or (self._backup_tried_at is not None and now - self._backup_tried_at < min_interval_s):
            return None
        self._backup_tried_at = now
        try:
            made = self.store.backup_daily(now)
        except (OSError, StoreError) as exc:
            log.warning("the daily backup of %s could not be made: %s", self.store.path, exc)
            return None
        if made is not None:
            log.info("daily backup of the state store: %s", made)
        return made

    # -- lifecycle -------------------------------------------------------------

    def close(self) -> None:
        """Stop the probe threads; managed processes keep running."""
        with self._lock:
            self._closed = True
        self._prober.close()


__all__ = ["ActionRefused", "ProcessView", "Supervisor", "SupervisorError", "UnknownProcess"]
