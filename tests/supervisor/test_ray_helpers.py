"""A local Ray cluster for the Ray backend's tests: a head Specdeck starts (``cluster up``, as a
supervised process with explicit temp dir, HOME and free ports; ended by pid with ``cluster down``)
and worker raylets on the same machine with their own custom resources, standing in for other
nodes.  Every process is ended by its process group at teardown, never with ``ray stop``."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest

from backend.cli import main as cli_main
from backend.supervisor.raycluster import HEAD_NAME, Cluster, cluster_python, free_ports, load_cluster
from backend.supervisor.runfiles import read_json

HAVE_RAY = (Path(cluster_python()).parent / "ray").exists()
needs_ray = pytest.mark.skipif(not HAVE_RAY, reason=f"no ray next to {cluster_python()} (.venv-cluster)")


def cli(ws: Path, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli_main(["-w", str(ws), *argv], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


JOIN_TRIES = 4


class WorkerEnded(AssertionError):
    pass


@dataclass
class RayCluster:
    root: Path  # the workspace
    cluster: Cluster
    workers: list[subprocess.Popen] = field(default_factory=list)
    head_pid: int | None = None

    @property
    def client(self):
        return self.cluster.client()

    def add_worker(self, resources: dict[str, float], num_gpus: int = 0) -> None:
        info = self.cluster.head_info() or {}
        p = free_ports(6)
        argv = [str(Path(cluster_python()).parent / "ray"), "start", "--address", info["gcs_address"], "--block",
                "--node-ip-address", "127.0.0.1", "--num-cpus", "1", "--num-gpus", str(num_gpus),
                "--resources", json.dumps(resources), "--temp-dir", info["temp_dir"],
                "--dashboard-agent-listen-port", str(p[0]), "--dashboard-agent-grpc-port", str(p[1]),
                "--metrics-export-port", str(p[2]), "--runtime-env-agent-port", str(p[3]),
                "--node-manager-port", str(p[4]), "--object-manager-port", str(p[5]),
                "--object-store-memory", str(100 * 1024 * 1024), "--disable-usage-stats"]
        env = dict(os.environ, HOME=str(self.root / "run" / "ray-home"), RAY_USAGE_STATS_ENABLED="0",
                   RAY_AUTH_MODE="token" if self.cluster.config.token_file else "disabled",
                   RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S="2")
        token = self.cluster.token()
        if token:
            env["RAY_AUTH_TOKEN"] = token
        log = open(self.root / "logs" / f"ray-worker-{len(self.workers)}.log", "ab")
        self.workers.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                             start_new_session=True, cwd=self.root))
        log.close()

    def wait_nodes(self, n: int, timeout_s: float = 120.0) -> list[dict]:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                nodes = [x for x in self.client.nodes() if x["alive"]]
                if len(nodes) >= n:
                    return nodes
            except Exception:
                pass
            ended = [i for i, w in enumerate(self.workers) if w.poll() is not None]
            if ended:
                log = (self.root / "logs" / f"ray-worker-{ended[0]}.log").read_text(errors="replace")[-1500:]
                raise WorkerEnded(f"worker raylet {ended[0]} ended while joining: {log}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{n} Ray nodes did not register within {timeout_s} s")
            time.sleep(1.0)

    def close(self) -> None:
        for w in self.workers:
            _end_group(w.pid)
            try:
                w.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        try:
            cli(self.root, "cluster", "down")
        finally:
            if self.head_pid is not None:
                _end_group(self.head_pid)


def _end_group(pid: int, grace_s: float = 8.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            try:
                if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                    return
            except psutil.NoSuchProcess:
                return
            time.sleep(0.1)


def make_workspace(extra: str, *, token: str | None = None) -> Path:
    """A workspace under a short /tmp path (Ray's socket paths must stay under 107 bytes)."""
    root = Path(tempfile.mkdtemp(prefix="sdray-", dir="/tmp"))
    (root / "logs").mkdir()
    cluster = '[cluster]\nkind = "ray"\naddress = "local"\nnum_cpus = 2\nnum_gpus = 2\n'
    if token:
        (root / "ray.token").write_text(token + "\n")
        os.chmod(root / "ray.token", 0o600)
        cluster += 'token_file = "ray.token"\n'
    (root / "specdeck.toml").write_text(f'[workspace]\nname = "raytest"\n\n{cluster}\n{extra}')
    return root


def start_cluster(root: Path, workers: list[dict[str, float]] = ()) -> RayCluster:
    code, out, err = cli(root, "cluster", "up")
    cluster = load_cluster(root)
    assert cluster is not None
    rc = RayCluster(root, cluster)
    rec = read_json(root / "run" / HEAD_NAME / "identity.json")
    rc.head_pid = rec["pid"] if rec else None
    if code != 0:
        try:
            log_tail = (root / "logs" / f"{HEAD_NAME}.log").read_text(errors="replace")[-3000:]
        except OSError:
            log_tail = "(no log)"
        rc.close()
        raise AssertionError(f"cluster up failed: {out} {err}\n{log_tail}")
    try:
        for i, res in enumerate(workers):  # one at a time: raylets joining at once race for socket names
            # on a loaded machine (another suite beside this one) a raylet can miss Ray's fixed 30 s to
            # register with the head and end: it is started again, up to JOIN_TRIES times in all
            for attempt in range(JOIN_TRIES):
                rc.add_worker(res)
                try:
                    rc.wait_nodes(2 + i)
                    break
                except WorkerEnded:
                    _end_group(rc.workers.pop().pid)  # what it started in its group goes with it
                    if attempt == JOIN_TRIES - 1:
                        raise
    except BaseException:
        rc.close()
        raise
    return rc


def remove_workspace(root: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)


def test_make_workspace_is_short_enough_for_rays_sockets():
    root = make_workspace("")
    try:
        assert len(str(root / "run" / "ray")) <= 40
        c = load_cluster(root)
        assert c is not None and c.temp_dir() == root / "run" / "ray"
    finally:
        remove_workspace(root)
