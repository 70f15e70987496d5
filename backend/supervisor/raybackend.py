"""The Ray Jobs backend of the supervisor: processes whose spec says ``where = "ray"``.

A mixin of :class:`backend.supervisor.supervisor.Supervisor`, beside the local path (wrapper,
identity and exit files, signals).  It talks to the workspace's cluster through the dashboard's REST
API (:mod:`backend.supervisor.rayjobs`) and never imports ray.

- Start: the run id is Ray's ``submission_id``; metadata carries the Specdeck user, kind, name and
  workspace; ``entrypoint_num_gpus``/``_num_cpus``/``_resources`` place it; the environment gets the
  spec's variables and ``RAY_JOB_STOP_WAIT_TIME_S`` = the spec's stop grace; the entrypoint runs
  the argv in its own process group and ends that group when the argv exits
  (:func:`backend.supervisor.raycluster.entrypoint`).
- States: Ray's PENDING is STARTING with a detail "pending: waiting for resources" or "pending:
  setting up" (from Ray's message); RUNNING once Ray runs it *and* the spec's readiness passes,
  against the node address Ray reports; SUCCEEDED/FAILED/STOPPED end the run with Ray's exit code
  and error type (the restart policy applies as for local runs); STOPPING between a stop and Ray's
  answer.  A stop of a queued job is recorded at once (Ray would start it before stopping it; it is
  told to stop, so it ends as soon as it is placed).  A job Ray no longer knows (its head restarted)
  is FATAL, "lost", with the reason.
- Logs: the driver log is copied by offset into the process's log file in the workspace (the last
  ``log_tail_lines`` lines first, when a run is first seen with a longer log), so the log views and
  log readiness probes work as for local runs.
- Re-adoption: the state store holds the submission id (the run id); any supervisor that polls
  follows the job from there.  Specdeck's records stay the source of truth.
"""

from __future__ import annotations

import fcntl
import logging
import math
import time
import urllib.parse
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil

from backend.filemodes import make_private_dirs, open_private
from backend.supervisor.logrotate import RotatingLog
from backend.supervisor.raycluster import Cluster, ClusterError, entrypoint, exit_code_of, load_cluster
from backend.supervisor.rayjobs import JobInfo, RayApiError, RayJobsClient
from backend.supervisor.runfiles import ExitRecord, read_json, write_json_atomic
from backend.supervisor.stopping import RunProgress, SupervisorError
from specdeck_types.process import ProcessSpec, ProcState
from state.processes import ProcessRecord

log = logging.getLogger("backend.supervisor.supervisor")

S = ProcState
RAY_POLL_S = 1.0  # the least time between two looks at a running job (and between two log copies)
RAY_POLL_FAST_S = 0.25  # the same while it starts or stops
_POLL_TIMEOUT_S = 3.0  # a look that takes longer is left for the next poll
PENDING_PREFIX = "pending: "
_LOOPBACK = {"127.0.0.1", "localhost", "0.0.0.0", "::1", "[::1]"}


def _key(name: str) -> str:
    # Ray's dashboard reports resource names in camelCase (node_a -> nodeA): compare without case and "_".
    return name.replace("_", "").lower()


def requested(spec: ProcessSpec) -> dict[str, float]:
    """What the job asks Ray for, by resource name."""
    want = dict(spec.resources)
    if spec.num_gpus:
        want["GPU"] = spec.num_gpus
    if spec.num_cpus:
        want["CPU"] = spec.num_cpus
    return {k: v for k, v in want.items() if v > 0}


def pending_reason(info: JobInfo, want: dict[str, float] | None = None,
                   usage: list[dict[str, tuple[float, float]]] | None = None) -> str:
    """Why a PENDING job waits: ``waiting for resources`` when no node has what it asks for free
    (``usage``: each node's {resource: (used, total)}), else ``setting up`` (its runtime environment
    and driver are being started).  Ray 2.60 gives both the same message, so without ``usage`` its
    message decides."""
    msg = " ".join(info.message.split())
    if usage is not None and want is not None:
        def free(node: dict[str, tuple[float, float]], name: str) -> float:
            for k, (used, total) in node.items():
                if _key(k) == _key(name):
                    return total - used
            return 0.0

        fits = any(all(free(node, k) >= v for k, v in want.items()) for node in usage)
        if not fits:
            asked = ", ".join(f"{k} {v:g}" for k, v in sorted(want.items()))
            return f"waiting for resources: no node has {asked} free"
        return "setting up: its resources are free; Ray is starting its environment and driver"
    if "resources" in msg.lower():
        return f"waiting for resources ({msg})" if msg else "waiting for resources"
    return f"setting up ({msg})" if msg else "setting up"


def _local_addresses() -> set[str]:
    out = set(_LOOPBACK)
    try:
        for addrs in psutil.net_if_addrs().values():
            out.update(a.address for a in addrs if a.address)
    except OSError:
        pass
    return out


def probe_url(url: str, node_host: str | None, local: set[str] | None = None) -> str | None:
    """The readiness URL for a job on ``node_host``: a loopback URL is sent to the node's address
    unless that node is this machine; None while the node is not known."""
    if node_host is None:
        return None
    parts = urllib.parse.urlsplit(url)
    if (parts.hostname or "") not in _LOOPBACK:
        return url
    if node_host in (local if local is not None else _local_addresses()):
        return url
    netloc = node_host if parts.port is None else f"{node_host}:{parts.port}"
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def _submitted_after_all(client: Any, run_id: str) -> bool:
    """After a submit whose answer never came (a timeout, a cut connection): whether Ray has the job
    after all.  Where that cannot be told, the job is stopped should it exist, so that nothing runs that
    Specdeck does not follow; False then."""
    try:
        return client.info(run_id) is not None
    except RayApiError:
        pass
    try:
        client.stop(run_id)
    except RayApiError:
        log.warning("Ray job %s: its submit went unanswered and neither a look nor a stop got through", run_id)
    return False


def stop_wait_s(grace_s: float) -> int:
    """The spec's stop grace as Ray's ``RAY_JOB_STOP_WAIT_TIME_S``: whole seconds, rounded up (Ray reads
    it with ``int()``), at least 1."""
    return max(1, math.ceil(grace_s))


class RayMixin:
    """Start, follow and stop ``where = "ray"`` processes through the workspace's cluster."""

    _ray_cluster_given: Cluster | None
    _ray_cache: tuple[float, Cluster | None, str | None] | None

    # -- the cluster ---------------------------------------------------------

    def ray_cluster(self) -> Cluster | None:
        """The workspace's ``[cluster]`` (re-read when the config file changes), or None."""
        if self._ray_cluster_given is not None:
            return self._ray_cluster_given
        root = self.run_dir.parent
        try:
            mtime = (root / "specdeck.toml").stat().st_mtime
        except OSError:
            return None
        if self._ray_cache is None or self._ray_cache[0] != mtime:
            try:
                self._ray_cache = (mtime, load_cluster(root), None)
            except ClusterError as exc:
                self._ray_cache = (mtime, None, str(exc))
        return self._ray_cache[1]

    def _ray_client(self, timeout_s: float | None = None) -> RayJobsClient:
        cluster = self.ray_cluster()
        if cluster is None:
            why = self._ray_cache[2] if self._ray_cache and self._ray_cache[2] else \
                "the workspace has no [cluster] section"
            raise ClusterError(f"where = \"ray\", but {why}")
        return cluster.client(timeout_s)

    def _ray_launch_problem(self, spec: ProcessSpec) -> str | None:
        try:
            self._ray_client()
        except ClusterError as exc:
            return str(exc)
        return None

    # -- re-adoption -----------------------------------------------------------

    def ray_readopt(self) -> list[str]:
        """Re-adopt live Ray jobs of this workspace that the state store does not describe (a store
        restored from a backup, or rebuilt): a job whose metadata names this workspace and a process
        that has a ``where = "ray"`` record here, while that record is not active or names another
        run, becomes that record's run, STARTING (its readiness is checked again).  Returns the names."""
        adopted: list[str] = []
        with self._lock:
            self._refresh()
            ours = {n: r for n, r in self._records.items() if r.effective_spec.on_ray}
            if not ours or self._closed:
                return adopted
            try:
                jobs = self._ray_client(_POLL_TIMEOUT_S).jobs()
            except (ClusterError, RayApiError):
                return adopted
            workspace = str(self.run_dir.parent)
            now = self._clock()
            for job in sorted(jobs, key=lambda j: j.start_time or 0.0):
                name = job.metadata.get("specdeck_name")
                rec = ours.get(name or "")
                if (job.terminal or rec is None or job.metadata.get("specdeck_workspace") != workspace
                        or rec.run_id == job.submission_id or rec.state.is_active):
                    continue
                if job.submission_id in {e.run_id for e in self._repo.history(rec.name, 1000)}:
                    continue  # a run Specdeck already ended (a stop while queued: Ray still places it briefly)
                why = f"the state store had it {rec.state.value}" + (f" as run {rec.run_id}" if rec.run_id else "")
                new = self._put(self._repo.transition(
                    rec.name, S.STARTING, at=now, expect=rec.state, expect_run_id=rec.run_id,
                    detail=f"re-adopted from Ray: job {job.submission_id} ({why})", spec=rec.effective_spec,
                    pending_spec=None, run_id=job.submission_id, started_at=job.start_time or now, ended_at=None,
                    exit_code=None, pid=None, create_time=None, wrapper_pid=None, wrapper_create_time=None,
                    term_at=None, pending_restart=None))
                if new is not None:
                    ours[rec.name] = new
                    self._runs.pop(rec.name, None)
                    adopted.append(rec.name)
                    log.warning("supervisor: %s", new.detail)
        return adopted

    # -- starting --------------------------------------------------------------

    def _ray_spawn(self, new: ProcessRecord, spec: ProcessSpec, run_id: str, actor: str) -> ProcessRecord | None:
        """Submit the reserved run ``new`` to Ray (its run id is the submission id)."""
        try:
            client = self._ray_client()
            cluster = self.ray_cluster()
        except ClusterError as exc:
            return self._move(new, S.FATAL, at=self._clock(), detail=f"cannot start on Ray: {exc}")
        assert cluster is not None
        cwd = spec.cwd or self.default_cwd
        env = {str(k): str(v) for k, v in spec.env.items()}
        # Ray reads the wait with int(): "7.5" or "1e+06" fail there after the SIGTERM, and no SIGKILL follows
        env.update({"RAY_JOB_STOP_WAIT_TIME_S": str(stop_wait_s(spec.stop_grace_s)), "SPECDECK_PROCESS": spec.name,
                    "SPECDECK_RUN_ID": run_id})
        metadata = {"specdeck_user": str(actor), "specdeck_kind": spec.kind.value, "specdeck_name": spec.name,
                    "specdeck_workspace": str(self.run_dir.parent)}
        try:
            offset = self._ray_log_header(spec, f"run {run_id} submitted to Ray at {client.address} by {actor}: "
                                                f"{' '.join(spec.argv)}")
        except OSError as exc:
            return self._move(new, S.FATAL, at=self._clock(), detail=f"cannot write its log {spec.log_path}: {exc}")
        try:
            sid = client.submit(run_id, entrypoint(spec, python=cluster.config.python, cwd=cwd), env_vars=env,
                                metadata=metadata, num_gpus=spec.num_gpus, num_cpus=spec.num_cpus,
                                resources=spec.resources)
        except RayApiError as exc:
            if not exc.unreachable or not _submitted_after_all(client, run_id):
                return self._move(new, S.FATAL, at=self._clock(), detail=f"could not submit to Ray: {exc}")
            sid = run_id  # the answer was lost, the job was not: follow it as submitted
        self._ray_save_copy(spec.name, run_id, 0)
        self._runs.pop(new.name, None)
        return self._put(self._repo.update(
            new.name, expect_run_id=run_id, log_start=offset,
            detail=f"submitted to Ray at {client.address} as {sid}",
        )) or new

    # -- following -------------------------------------------------------------

    def _ray_reconcile(self, rec: ProcessRecord, now: float) -> None:
        """One look at the job of an active (or UNKNOWN) Ray run."""
        run = self._run(rec)
        last = run.ray_polled_at
        every = RAY_POLL_S if rec.state == S.RUNNING else RAY_POLL_FAST_S
        if last is not None and now - last < every:
            if rec.state == S.STARTING and run.ray_node:
                self._ray_check_ready(rec, run, now)
            return
        run.ray_polled_at = now
        try:
            client = self._ray_client(_POLL_TIMEOUT_S)
            info = client.info(rec.run_id or "")
        except (ClusterError, RayApiError) as exc:
            note = f"Ray not reachable: {exc}"
            if rec.detail != note and not rec.detail.startswith("Ray not reachable"):
                self._put(self._repo.update(rec.name, expect_run_id=rec.run_id, detail=note))
            return
        if info is None:
            self._ray_lost(rec, now, client.address)
            return
        tick = info.terminal or run.ray_log_at is None or now - run.ray_log_at >= RAY_POLL_S
        if tick:  # at most once a second: the log copy, and the look at the cluster's free resources
            run.ray_log_at = now
            self._ray_copy_logs(rec, client, info)
        if info.terminal:
            self._ray_finish(rec, info, now)
            return
        if rec.state == S.STOPPING:
            if rec.term_at is None and self._act:
                self._ray_send_stop(rec, client, now)
            return
        if info.status == "PENDING":
            if not tick and rec.detail.startswith(PENDING_PREFIX):
                return
            detail = PENDING_PREFIX + self._ray_pending_reason(rec, client, info)
            if rec.detail != detail:
                self._put(self._repo.update(rec.name, expect_run_id=rec.run_id, detail=detail))
            return
        run.ray_node = info.node_host
        if rec.state == S.RUNNING and rec.detail.startswith("Ray not reachable"):
            self._put(self._repo.update(rec.name, expect_run_id=rec.run_id,
                                        detail=f"running on Ray node {info.node_host or '?'} (Ray answers again)"))
        if rec.state == S.STARTING:
            if rec.detail.startswith((PENDING_PREFIX, "submitted to Ray", "Ray not reachable")):
                rec = self._put(self._repo.update(
                    rec.name, expect_run_id=rec.run_id,
                    detail=f"running on Ray node {info.node_host or '?'}; waiting for readiness")) or rec
            self._ray_check_ready(rec, run, now)

    def _ray_pending_reason(self, rec: ProcessRecord, client: RayJobsClient, info: JobInfo) -> str:
        try:
            usage = client.usage_by_node()
        except RayApiError:
            usage = None
        return pending_reason(info, requested(rec.spec), usage)

    def _ray_check_ready(self, rec: ProcessRecord, run: RunProgress, now: float) -> None:
        probe = rec.spec.readiness
        if probe.kind == "http" and probe.url:
            url = probe_url(probe.url, run.ray_node)
            if url is None:
                return
            rec = replace(rec, spec=replace(rec.spec, readiness=replace(probe, url=url)))
        self._check_ready(rec, run, now)

    def _ray_finish(self, rec: ProcessRecord, info: JobInfo, now: float) -> None:
        code = exit_code_of(info.driver_exit_code) if info.status != "SUCCEEDED" else 0
        error = ""
        if info.status == "FAILED":
            error = f"Ray: FAILED ({info.error_type or 'no error type'})"
            if info.driver_exit_code is None and info.message:
                error += f": {info.message.strip()[:300]}"
        elif info.status == "STOPPED" and rec.state != S.STOPPING:
            error = "Ray: STOPPED outside Specdeck"
        ended = info.end_time or now
        self._finish(rec, ExitRecord(rec.run_id or "", code, ended, None, error), now)

    def _ray_lost(self, rec: ProcessRecord, now: float, address: str) -> None:
        why = (f"lost: the Ray cluster at {address} no longer knows job {rec.run_id} (its head restarted and "
               "forgot its jobs?); whatever it started there may still run")
        if rec.state == S.STOPPING:
            self._move(rec, S.EXITED, at=now, detail=why)
        elif rec.state in (S.STARTING, S.RUNNING):
            self._move(rec, S.FATAL, at=now, detail=why)
        elif rec.state == S.UNKNOWN:
            self._move(rec, S.FATAL, at=now, detail=why)
        self._runs.pop(rec.name, None)

    # -- stopping --------------------------------------------------------------

    def _ray_begin_stop(self, rec: ProcessRecord, actor: str, source: str, restart_reason: str | None) -> None:
        name = rec.name
        now = self._clock()
        try:
            client = self._ray_client()
            info = client.info(rec.run_id or "")
        except (ClusterError, RayApiError) as exc:
            self._audit(actor, source, "stop", name, f"Ray not reachable: {exc}", "error")
            raise SupervisorError(f"cannot stop {name}: Ray not reachable: {exc}") from None
        if info is None:
            self._ray_lost(rec, now, client.address)
            self._audit(actor, source, "stop", name, "the cluster no longer knows the job", "ok")
            return
        if info.terminal:
            self._ray_finish(rec, info, now)
            self._audit(actor, source, "stop", name, f"already {info.status} on Ray", "ok")
            return
        queued = info.status == "PENDING"
        why = self._ray_pending_reason(rec, client, info) if queued else ""
        try:
            client.stop(rec.run_id or "")
        except RayApiError as exc:
            self._audit(actor, source, "stop", name, f"Ray refused the stop: {exc}", "error")
            raise SupervisorError(f"cannot stop {name}: {exc}") from None
        detail = (f"stop by {actor} via {source}: job {rec.run_id} told to stop on Ray; SIGTERM, then SIGKILL "
                  f"after {rec.spec.stop_grace_s:g} s")
        if restart_reason:
            detail += "; then started again"
        new = self._move(rec, S.STOPPING, at=now, detail=detail, term_at=now, pending_restart=restart_reason)
        if new is None:
            self._audit(actor, source, "stop", name, "state changed meanwhile", "error")
            raise SupervisorError(f"{name} changed state meanwhile; try again")
        if queued:
            # Ray starts a queued job once it is placed and only then stops it: the run ends here.
            ended = self._move(new, S.EXITED, at=now, detail=f"stopped by {actor} via {source} while queued on Ray "
                               f"({why}); Ray ends job {rec.run_id} as soon as it is placed",
                               ended_at=now, exit_code=None)
            self._runs.pop(name, None)
            self._audit(actor, source, "stop", name, "stopped while queued on Ray", "ok")
            if ended is not None and restart_reason:
                self._spawn(ended, tries=0, reason=restart_reason, actor=actor)
            return
        self._audit(actor, source, "stop", name, f"stop of Ray job {rec.run_id} sent", "ok")

    def _ray_send_stop(self, rec: ProcessRecord, client: RayJobsClient, now: float) -> None:
        claimed = self._put(self._repo.update(
            rec.name, expect_run_id=rec.run_id, expect_fields={"state": S.STOPPING, "term_at": None}, term_at=now))
        if claimed is None:
            return
        try:
            client.stop(rec.run_id or "")
        except RayApiError as exc:
            log.warning("stop of Ray job %s (%s) failed: %s", rec.run_id, rec.name, exc)

    def _ray_reconcile_stopping(self, rec: ProcessRecord, now: float) -> None:
        self._ray_reconcile(rec, now)

    # -- logs ------------------------------------------------------------------

    def _ray_copy_path(self, name: str) -> Path:
        return self.run_dir / name / "ray-log.json"

    def _ray_save_copy(self, name: str, run_id: str, copied: int) -> None:
        write_json_atomic(self._ray_copy_path(name), {"run_id": run_id, "copied": copied})

    def _ray_log_header(self, spec: ProcessSpec, text: str) -> int:
        """Append a ``===== specdeck:`` line to the log; returns the offset after it."""
        path = Path(spec.log_path)
        make_private_dirs(path.parent)
        with open_private(path, "ab") as f:
            if f.tell() > 0:
                with open(path, "rb") as r:
                    r.seek(f.tell() - 1)
                    if r.read(1) != b"\n":
                        f.write(b"\n")
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            f.write(f"===== specdeck: {spec.name} {text} at {stamp}\n".encode("utf-8", "replace"))
            return f.tell()

    def _ray_copy_logs(self, rec: ProcessRecord, client: RayJobsClient, info: JobInfo) -> None:
        """Append what Ray's driver log has beyond what was copied for this run (under a lock on the
        run folder, so the dashboard and a command line never both append the same part)."""
        lock_path = self.run_dir / rec.name / "ray-log.lock"
        make_private_dirs(lock_path.parent)
        with open_private(lock_path, "ab") as lock:
            try:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                return  # another supervisor is copying it right now
            try:
                self._ray_copy_locked(rec, client)
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def _ray_copy_locked(self, rec: ProcessRecord, client: RayJobsClient) -> None:
        state = read_json(self._ray_copy_path(rec.name)) or {}
        copied = int(state.get("copied", 0)) if state.get("run_id") == rec.run_id else -1
        try:
            text = client.logs(rec.run_id or "")
        except RayApiError as exc:
            if exc.status not in (None, 404):
                log.warning("logs of Ray job %s (%s): %s", rec.run_id, rec.name, exc)
            return
        if copied >= 0 and len(text) <= copied:
            return
        cluster = self.ray_cluster()
        keep = cluster.config.log_tail_lines if cluster is not None else 1000
        if copied < 0:
            # First seen by this workspace's copy (the run files were lost): its last lines only.
            lines = text.splitlines(keepends=True)
            new = "".join(lines[-keep:])
            if len(lines) > keep:
                new = f"===== specdeck: {len(lines) - keep} earlier lines of Ray's log of {rec.run_id} skipped\n" + new
        else:
            new = text[copied:]
        make_private_dirs(Path(rec.log_path).parent)
        out = RotatingLog(rec.log_path, rec.spec.log_max_bytes, rec.spec.log_keep)  # rotated as a local run's
        try:
            out.write(new.encode("utf-8", "replace"))
        finally:
            out.close()
        self._ray_save_copy(rec.name, rec.run_id or "", len(text))

    def ray_log_tail(self, rec: ProcessRecord, lines: int) -> str:
        """The last ``lines`` lines of the run's driver log, from Ray's state API."""
        client = self._ray_client()
        info = client.info(rec.run_id or "")
        if info is None or not info.driver_node_id:
            return ""  # forgotten by the cluster, or not placed on a node yet
        return client.log_tail(rec.run_id or "", lines, info.driver_node_id)


def ray_metadata_user(info: JobInfo) -> str | None:
    return info.metadata.get("specdeck_user")


def describe_jobs(client: RayJobsClient) -> list[dict[str, Any]]:
    """Every job the cluster knows, as plain dicts (for ``cluster status``)."""
    return [{"submission_id": j.submission_id, "status": j.status, "name": j.metadata.get("specdeck_name"),
             "user": j.metadata.get("specdeck_user"), "exit_code": j.driver_exit_code, "node": j.node_host}
            for j in client.jobs()]


__all__ = ["RayMixin", "describe_jobs", "pending_reason", "probe_url", "requested"]

