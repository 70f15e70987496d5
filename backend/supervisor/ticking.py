"""The supervisor's periodic tick, for :class:`backend.supervisor.supervisor.Supervisor`:
re-adoption, ``poll()`` and the reconcile of one record (identity and exit
files, liveness by pid plus create time, readiness probes, the restart policy).

A mixin of the supervisor (it uses the supervisor's store, spawner, killer,
prober, clock and records); kept apart because it is the part that watches,
where the supervisor itself holds the control actions.
"""

from __future__ import annotations

import logging
import re
from concurrent.futures import wait as futures_wait

import psutil

from backend.supervisor import machine
from backend.supervisor.logtail import LogTailer
from backend.supervisor.runfiles import ExitRecord, Identity, RunPaths, read_exit, read_json
from backend.supervisor.stopping import IDENTITY_WAIT_S, RunProgress
from specdeck_types.process import Kind, ProcessSpec, ProcState
from state.processes import ProcessRecord

log = logging.getLogger("backend.supervisor.supervisor")

S = ProcState
_LOG_PROBE_READ = 1024 * 1024  # bytes of log a readiness pattern scans per poll
_SYNC_PROBE_S = 0.5  # one-shot polls: how long due HTTP probes may take, all together


class TickMixin:
    """Adoption and the reconcile pass; run by whichever supervisor polls."""

    def adopt(self) -> None:
        """Reconcile every record with what the OS and the run dir say.

        Still-running children are re-adopted when pid *and* create time
        match; ended ones get the exit code their wrapper recorded; records
        that match neither become UNKNOWN (a reused pid is never adopted).
        Due readiness probes are answered before it returns (see ``poll``),
        so a one-shot caller such as the command line sees readiness too.

        A live run that the store does not know (a store restored from a
        backup, or rebuilt after it was moved aside) is re-adopted from its
        run files first (see :meth:`readopt`), so a stop reaches it.
        """
        with self._lock:
            self._version = None
            self._runs.clear()
        self.readopt()
        self.ray_readopt()
        self.poll(sync_probes=True)

    # -- re-adoption from the run files ------------------------------------

    def readopt(self) -> list[str]:
        """Re-adopt every live run in the run dir that its record does not describe.

        Each run folder holds the run's identity (child pid and create time,
        wrapper, run id) and its launch file (the spec it was started with).
        A run whose child is alive by pid *and* create time, with no exit
        record, while the store's record names another run (or is not active,
        or is missing) is recorded as that run, STARTING, so its readiness is
        checked again.  A record missing altogether is made from the launch
        file.  Returns the names re-adopted.
        """
        adopted: list[str] = []
        try:
            folders = sorted(p for p in self.run_dir.iterdir() if p.is_dir() and not p.name.startswith("."))
        except OSError:
            return adopted
        with self._lock:
            if self._closed:
                return adopted
            self._refresh()
            now = self._clock()
            for folder in folders:
                try:
                    if self._readopt_one(folder.name, now):
                        adopted.append(folder.name)
                except Exception:
                    log.exception("supervisor: re-adopting %s from %s failed", folder.name, folder)
        return adopted

    def _readopt_one(self, name: str, now: float) -> bool:
        paths = RunPaths.for_name(self.run_dir, name)
        data = read_json(paths.identity)
        if not data:
            return False
        try:
            ident = Identity(**data)
        except TypeError:
            return False
        rec = self._records.get(name)
        if rec is not None and rec.run_id == ident.run_id:
            return False  # the store knows this run: the reconcile pass follows it
        if rec is not None and rec.state.is_active and rec.pid is not None \
                and self._killer.is_alive(rec.pid, rec.create_time):
            return False  # the record's own run is alive: leave both alone
        if read_exit(paths, ident.run_id) is not None or not self._killer.is_alive(ident.pid, ident.create_time):
            return False
        launch = read_json(paths.launch) or {}
        if launch.get("run_id") not in (None, ident.run_id):
            launch = {}
        if rec is None:
            spec = _spec_from_launch(name, launch)
            if spec is None:
                log.warning("supervisor: %s runs (pid %s) but %s does not say how it was started; not adopted",
                            name, ident.pid, paths.launch)
                return False
            rec = self._put(self._repo.upsert(ProcessRecord(
                name=name, kind=spec.kind.value, spec=spec, state=S.NEVER, state_since=now,
                log_path=spec.log_path, detail="made from its run files",
            )))
            if rec is None:
                return False
        why = ("the state store had no record of it" if rec.state == S.NEVER and rec.run_id is None
               else f"the state store had it {rec.state.value}" + (f" as run {rec.run_id}" if rec.run_id else ""))
        new = self._put(self._repo.transition(
            name, S.STARTING, at=now, expect=rec.state, expect_run_id=rec.run_id,
            detail=f"re-adopted from {paths.dir}: pid {ident.pid} of run {ident.run_id} ({why})",
            pid=ident.pid, create_time=ident.create_time, wrapper_pid=ident.wrapper_pid,
            wrapper_create_time=ident.wrapper_create_time, run_id=ident.run_id, started_at=ident.started_at,
            ended_at=None, exit_code=None, log_start=ident.log_offset, term_at=None, pending_restart=None,
            log_path=str(launch.get("log_path") or rec.log_path),
        ))
        if new is None:
            return False
        self._runs.pop(name, None)
        log.warning("supervisor: %s", new.detail)
        return True

    # -- the state store ---------------------------------------------------

    def _store_upkeep(self) -> None:
        """Write back what was held in memory while the store refused writes, or, with nothing held,
        try the store again after it refused one; its health clears once a write goes through."""
        if self._repo.held:
            if self._repo.flush():
                self._version = None
        elif self.store.health().state == "unwritable":
            self.store.recheck()

    def poll(self, sync_probes: bool = False) -> None:
        """One reconcile pass over all records; cheap when nothing changed.

        HTTP readiness probes run on background threads and are collected by
        a later poll.  With ``sync_probes`` (one-shot callers with no
        :class:`SupervisorLoop`), due probes are answered within this call,
        waiting at most ``_SYNC_PROBE_S`` for all of them together.
        """
        with self._lock:
            if self._closed:
                return
            self._spawner.reap()
            self._store_upkeep()
            self._refresh()
            now = self._clock()
            self._sync_probes = sync_probes
            try:
                for rec in list(self._records.values()):
                    try:
                        self._reconcile(rec, now)
                    except Exception:
                        log.exception("supervisor: reconciling %s failed", rec.name)
            finally:
                self._sync_probes = False
            waiting = {name: run.probe_future for name, run in self._runs.items()
                       if sync_probes and run.probe_future is not None and not run.probe_future.done()}
        if not waiting:
            return
        futures_wait(list(waiting.values()), timeout=_SYNC_PROBE_S)
        with self._lock:
            if self._closed:
                return
            self._refresh()
            now = self._clock()
            for name, fut in waiting.items():
                rec = self._records.get(name)
                run = self._runs.get(name)
                if rec is None or run is None or run.probe_future is not fut or not fut.done():
                    continue
                try:
                    self._reconcile(rec, now)
                except Exception:
                    log.exception("supervisor: reconciling %s failed", rec.name)

    def _reconcile(self, rec: ProcessRecord, now: float) -> None:
        st = rec.state
        if st == S.BACKOFF:
            if self._act and machine.backoff_due(rec.state_since, rec.tries, rec.effective_spec.restart, now):
                self._spawn(rec, tries=rec.tries + 1,
                            reason=f"restart {rec.tries + 1} of {rec.effective_spec.restart.max_tries}")
            return
        if rec.spec.on_ray and (st.is_active or st == S.UNKNOWN):
            self._ray_reconcile(rec, now)
            return
        if st == S.UNKNOWN:
            ex = read_exit(self._paths(rec.name), rec.run_id) if rec.run_id else None
            if ex is not None:
                self._finish(rec, ex, now)
            return
        if not st.is_active:
            return
        if st == S.STOPPING:
            self._reconcile_stopping(rec, now)
            return
        paths = self._paths(rec.name)
        if rec.pid is None:
            rec = self._note_identity(rec) or rec
            if rec.state != st:  # another supervisor moved it meanwhile (a stop, say)
                if rec.state == S.STOPPING:
                    self._reconcile_stopping(rec, now)
                return
        ex = read_exit(paths, rec.run_id)
        if ex is not None:
            self._finish(rec, ex, now)
            return
        if rec.pid is not None and self._killer.is_alive(rec.pid, rec.create_time):
            if rec.state == S.STARTING:
                self._check_ready(rec, self._run(rec), now)
            return
        if self._wrapper_may_still_report(rec, now):
            return
        ex = read_exit(paths, rec.run_id)  # written between our two looks?
        if ex is not None:
            self._finish(rec, ex, now)
            return
        if rec.pid is None:
            why = "its wrapper ended without starting the child (see the log)"
        elif self._pid_reused(rec):
            why = f"pid {rec.pid} now belongs to another process; not adopted"
        else:
            why = f"pid {rec.pid} is gone and no exit code was recorded"
        self._move(rec, S.UNKNOWN, at=now, detail=why)

    def _wrapper_may_still_report(self, rec: ProcessRecord, now: float) -> bool:
        """The child is gone or not yet known, but its wrapper may still write
        the identity or exit record (it is alive, or still being spawned)."""
        if rec.wrapper_pid is not None and self._killer.is_alive(rec.wrapper_pid, rec.wrapper_create_time):
            return True
        # Reserved by another supervisor that is spawning it right now?
        return (rec.pid is None and rec.wrapper_pid is None and rec.started_at is not None
                and now - rec.started_at < IDENTITY_WAIT_S)

    @staticmethod
    def _pid_reused(rec: ProcessRecord) -> bool:
        # The pid exists, yet is_alive() said it is not our child: reused.
        return rec.pid is not None and psutil.pid_exists(rec.pid)

    def _finish(self, rec: ProcessRecord, ex: ExitRecord, now: float) -> None:
        """Record the exit the wrapper wrote, and start again if a restart
        was asked for with the stop (whichever supervisor gets here)."""
        decision = machine.decide_exit(rec.state, ex.exit_code, rec.effective_spec.restart, rec.tries, now)
        parts = [ex.error] if ex.error else []
        parts.append(decision.detail)
        if ex.leftovers:
            parts.append(f"ended {ex.leftovers} leftover process{'es' if ex.leftovers != 1 else ''} of its group"
                         + (f" ({ex.leftovers_killed} after SIGKILL)" if ex.leftovers_killed else ""))
        restart_reason = rec.pending_restart if rec.state == S.STOPPING else None
        if restart_reason and not self._act:
            return  # recording the exit would drop the restart request; an acting supervisor does both
        new = self._move(rec, decision.state, at=now, detail="; ".join(parts),
                         exit_code=ex.exit_code, ended_at=ex.ended_at)
        self._runs.pop(rec.name, None)
        if new is not None and restart_reason and new.state in machine.STARTABLE:
            self._spawn(new, tries=0, reason=restart_reason)

    def _check_ready(self, rec: ProcessRecord, run: RunProgress, now: float) -> None:
        probe = rec.spec.readiness
        ready_detail = None
        if probe.kind == "none":
            ready_detail = "running (no readiness probe)"
        elif probe.kind == "http" and probe.url:
            f = run.probe_future
            if f is not None and f.done():
                run.probe_future = None
                try:
                    ok = bool(f.result())
                except Exception:
                    ok = False
                if ok:
                    ready_detail = f"ready: {probe.describe()}"
            if ready_detail is None and run.probe_future is None and machine.probe_due(run.last_probe_at, probe, now):
                run.last_probe_at = now
                timeout_s = min(2.0, max(0.2, probe.interval_s))
                if self._sync_probes:
                    timeout_s = min(timeout_s, _SYNC_PROBE_S)
                run.probe_future = self._prober.submit(probe.url, timeout_s)
        elif probe.kind == "log" and probe.pattern:
            if run.tailer is None:
                run.tailer = LogTailer(rec.log_path, rec.log_start or 0, max_bytes=_LOG_PROBE_READ)
                run.pattern = re.compile(probe.pattern, re.MULTILINE)
            chunk = run.tailer.read()
            if chunk.text and run.pattern is not None and run.pattern.search(chunk.text):
                ready_detail = f"ready: {probe.describe()}"
        if ready_detail is not None:
            self._move(rec, S.RUNNING, at=now, detail=ready_detail)
            self._runs.pop(rec.name, None)
            return
        if not run.overdue_noted and machine.readiness_overdue(rec.started_at, probe, now):
            run.overdue_noted = True
            self._put(self._repo.update(
                rec.name, expect_run_id=rec.run_id,
                detail=f"readiness overdue: no {probe.describe()} after {probe.timeout_s:g} s",
            ))


def _spec_from_launch(name: str, launch: dict) -> ProcessSpec | None:
    """The spec a run was started with, from its launch file (older launch files carry no
    ``spec``: then a spec of kind ``other`` from the argv, folder, environment and log)."""
    if launch.get("name") != name:
        return None
    try:
        if isinstance(launch.get("spec"), dict):
            spec = ProcessSpec.from_dict(launch["spec"])
            return spec if spec.name == name else None
        return ProcessSpec(
            name=name, kind=Kind.OTHER, argv=tuple(str(a) for a in launch["argv"]),
            log_path=str(launch["log_path"]), cwd=launch.get("cwd") or None,
            env={str(k): str(v) for k, v in (launch.get("env") or {}).items()},
            stop_grace_s=float(launch.get("stop_grace_s", 10.0)),
        )
    except (KeyError, TypeError, ValueError):
        return None
