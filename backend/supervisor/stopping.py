"""Stopping, for :class:`backend.supervisor.supervisor.Supervisor`: SIGTERM to
the process group, the grace period, SIGKILL to a fresh scan of the tree.

A mixin of the supervisor (it uses the supervisor's store, killer, clock and
records); kept apart because it is the one part that signals processes.
"""

from __future__ import annotations

import logging
import re
import signal
from concurrent.futures import Future
from dataclasses import dataclass

from backend.supervisor import machine
from backend.supervisor.logtail import LogTailer
from backend.supervisor.osproc import Ident
from backend.supervisor.runfiles import read_exit
from specdeck_types.process import ProcState
from state.processes import ProcessRecord

log = logging.getLogger("backend.supervisor.supervisor")

S = ProcState
IDENTITY_WAIT_S = 10.0  # how long a fresh run may take to report its child's pid


class SupervisorError(Exception):
    """A control action that cannot be done; ``str(e)`` is for the user."""


@dataclass
class RunProgress:
    """In-memory progress of one run (probes, stop escalation)."""

    run_id: str | None
    probe_future: "Future[bool] | None" = None
    last_probe_at: float | None = None
    tailer: LogTailer | None = None
    pattern: re.Pattern[str] | None = None
    overdue_noted: bool = False
    stop_targets: list[Ident] | None = None
    kill_sent: bool = False
    ray_polled_at: float | None = None  # a Ray job: when its state was last read
    ray_node: str | None = None  # a Ray job: the address of the node its driver runs on
    ray_log_at: float | None = None  # a Ray job: when its driver log was last copied


class StopMixin:
    """SIGTERM, grace, SIGKILL; carried forward by whichever supervisor polls."""

    def _begin_stop(self, rec: ProcessRecord, actor: str, source: str, restart_reason: str | None = None) -> None:
        """Record STOPPING and, when the child is known and alive, SIGTERM it.

        Never waits: without a pid yet, the stop is recorded with ``term_at``
        unset and ``poll()`` delivers SIGTERM once the identity appears.
        """
        name = rec.name
        if rec.spec.on_ray:
            self._ray_begin_stop(rec, actor, source, restart_reason)
            return
        if rec.pid is None:
            rec = self._note_identity(rec) or rec
        root_alive = rec.pid is not None and self._killer.is_alive(rec.pid, rec.create_time)
        now = self._clock()
        # Only a verified live root has its tree and group collected.
        targets = self._killer.collect(Ident(rec.pid, rec.create_time)) if root_alive else []
        grace = f"SIGKILL after {rec.spec.stop_grace_s:g} s"
        if root_alive:
            detail = f"SIGTERM by {actor} via {source}; {grace}"
        elif rec.pid is None:
            detail = f"stop by {actor} via {source}; SIGTERM once its child has reported its pid, then {grace}"
        else:
            detail = f"stop by {actor} via {source}; its child had already ended"
        if restart_reason:
            detail += "; then started again"
        new = self._move(rec, S.STOPPING, at=now, detail=detail,
                         term_at=now if root_alive else None, pending_restart=restart_reason)
        if new is None:
            self._audit(actor, source, "stop", name, "state changed meanwhile", "error")
            raise SupervisorError(f"{name} changed state meanwhile; try again")
        run = self._run(new)
        if not root_alive:
            self._audit(actor, source, "stop", name, detail, "ok")
            return
        run.stop_targets = targets
        sent = self._killer.signal(targets, signal.SIGTERM, pgid=rec.pid)
        self._audit(actor, source, "stop", name,
                    f"SIGTERM to process group {rec.pid} ({sent} process{'es' if sent != 1 else ''})", "ok")

    def _wait_stopped(self, name: str) -> None:
        while True:
            with self._lock:
                self._refresh()
                rec = self._records.get(name)
                if rec is None or rec.state != S.STOPPING:
                    return
                now = self._clock()
                self._reconcile(rec, now)
                rec = self._records.get(name)
                if rec is None or rec.state != S.STOPPING:
                    return
                if rec.term_at is not None:
                    limit = rec.term_at + rec.spec.stop_grace_s + self._stop_timeout_s
                else:  # still waiting for the child's pid
                    limit = rec.state_since + IDENTITY_WAIT_S + rec.spec.stop_grace_s + self._stop_timeout_s
                if now > limit:
                    log.warning("%s: still stopping %.0f s after the stop", name, now - rec.state_since)
                    return
            self._sleep(0.02)

    def _reconcile_stopping(self, rec: ProcessRecord, now: float) -> None:
        """Carry a stop forward, whoever asked for it.

        The exit record is read before anything is signalled.  SIGTERM and
        the group scan only ever go to a root verified alive by pid *and*
        create time; a pid that now leads some other group gets nothing.
        SIGKILL only follows a delivered SIGTERM (``term_at``) by the grace
        period, and only to processes verified the same way.
        """
        if rec.spec.on_ray:
            self._ray_reconcile(rec, now)
            return
        paths = self._paths(rec.name)
        if rec.pid is None:
            rec = self._note_identity(rec) or rec
        run = self._run(rec)
        ex = read_exit(paths, rec.run_id)
        if ex is None and rec.pid is not None and self._killer.is_alive(rec.pid, rec.create_time):
            if not self._act:
                return  # signals are for a supervisor that acts
            root = Ident(rec.pid, rec.create_time)
            if rec.term_at is None:
                self._deliver_term(rec, run, root, now)
                return
            if run.stop_targets is None:
                # SIGTERM came from another supervisor (or before a restart of
                # this one); the root is ours and alive, so its group is too.
                run.stop_targets = self._killer.collect(root)
            self._escalate(rec, run, now)
            return
        # The child has ended (or is not known yet).  Its wrapper ends what
        # is left of its process group; descendants that left the group and
        # were sent SIGTERM by this supervisor are followed up here.
        if run.stop_targets and self._killer.alive(run.stop_targets):
            if self._act:
                self._escalate(rec, run, now)
            return
        if ex is not None:
            self._finish(rec, ex, now)
            return
        if self._wrapper_may_still_report(rec, now):
            return
        ex = read_exit(paths, rec.run_id)
        if ex is not None:
            self._finish(rec, ex, now)
            return
        if rec.pending_restart and not self._act:
            return  # leave the restart request to a supervisor that acts
        new = self._move(rec, S.EXITED, at=now,
                         detail="stopped; its wrapper was gone, so the exit code was not recorded")
        if new is not None and rec.pending_restart:
            self._spawn(new, tries=0, reason=rec.pending_restart)

    def _deliver_term(self, rec: ProcessRecord, run: RunProgress, root: Ident, now: float) -> None:
        """SIGTERM for a stop recorded before the child's pid was known
        (claimed in the store first, so only one supervisor sends it)."""
        claimed = self._put(self._repo.update(
            rec.name, expect_run_id=rec.run_id, expect_fields={"state": S.STOPPING, "term_at": None},
            term_at=now, detail=f"SIGTERM; SIGKILL after {rec.spec.stop_grace_s:g} s",
        ))
        if claimed is None:
            self._version = None  # someone else moved first; reload next time
            return
        run.stop_targets = self._killer.collect(root)
        self._killer.signal(run.stop_targets, signal.SIGTERM, pgid=rec.pid)

    def _escalate(self, rec: ProcessRecord, run: RunProgress, now: float) -> None:
        """SIGKILL what is still alive of the stop targets once the grace
        period after SIGTERM is over."""
        if run.kill_sent or rec.term_at is None or not run.stop_targets:
            return
        if not machine.stop_overdue(rec.term_at, rec.spec.stop_grace_s, now):
            return
        alive = self._killer.alive(run.stop_targets)
        if not alive:
            return
        more = {t.pid: t for t in alive}
        for t in alive:  # each is verified alive, so its own tree and group are safe to scan
            for c in self._killer.collect(t):
                more.setdefault(c.pid, c)
        run.stop_targets = list(more.values())
        n = self._killer.signal(run.stop_targets, signal.SIGKILL, pgid=rec.pid)
        run.kill_sent = True
        self._put(self._repo.update(
            rec.name, expect_run_id=rec.run_id,
            detail=f"SIGKILL to {n} process{'es' if n != 1 else ''} after the {rec.spec.stop_grace_s:g} s grace period",
        ))
