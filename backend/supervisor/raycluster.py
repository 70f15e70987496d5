"""The workspace's Ray cluster: its ``[cluster]`` config, its address and token, the local head
Specdeck owns, and the entrypoint that wraps a process's argv for Ray.

``address = "local"``: ``python -m backend.cli cluster up`` starts
``<cluster python's dir>/ray start --head --block ...`` as the supervised process ``ray-head``
(its pid is known, so ``cluster down`` ends it by pid: SIGTERM, grace, SIGKILL; never ``ray stop``,
which ends every Ray process of the machine), with free ports on 127.0.0.1, its own temp dir and
HOME, and ``RAY_AUTH_MODE`` set explicitly.  Its ports and address are written to
``run/ray-head.json``, which the Ray backend reads.

A remote address needs ``token_file``; the token is sent as ``Authorization: Bearer``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shlex
import socket
import stat
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from backend.filemodes import make_private_dirs, write_private
from backend.supervisor.rayjobs import RayApiError, RayJobsClient
from backend.workspace import CONFIG_NAME, REPO_ROOT, ClusterConfig
from specdeck_types.process import Kind, ProcessSpec, ReadinessProbe

HEAD_NAME = "ray-head"  # the supervised process of the local head
HEAD_FILE = "ray-head.json"  # under run/: the local head's address and ports
_MAX_TEMP_LEN = 40  # Ray's socket paths (<temp>/session_…/sockets/plasma_store) must fit in 107 bytes


class ClusterError(Exception):
    """The workspace's cluster cannot be used as asked; ``str(e)`` is for the user."""


def _check_own_private_dir(d: Path) -> None:
    """The head's folders hold its sockets, logs and session: refuse one that is a link, another user's,
    or open to others (a folder of that name under /tmp may have been made by someone else first)."""
    try:
        st = os.lstat(d)
    except OSError as exc:
        raise ClusterError(f"{d}: cannot use it for the Ray head: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise ClusterError(f"{d}: is not a folder (a link or a file is in its place); remove it or move the workspace")
    if st.st_uid != os.getuid():
        raise ClusterError(f"{d}: belongs to user id {st.st_uid}, not to this user; remove it or move the workspace")
    if st.st_mode & 0o077:
        raise ClusterError(f"{d}: others may read or write it (mode {st.st_mode & 0o777:o}); make it 0700")


def cluster_python() -> str:
    """The interpreter of the environment with Ray (``$SPECDECK_CLUSTER_PYTHON``, else .venv-cluster)."""
    return os.environ.get("SPECDECK_CLUSTER_PYTHON") or str(REPO_ROOT / ".venv-cluster" / "bin" / "python")


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1 right now."""
    socks, ports = [], []
    try:
        while len(ports) < n:
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


@dataclass
class Cluster:
    """The ``[cluster]`` of the workspace at ``root``."""

    config: ClusterConfig
    root: Path

    @property
    def run_dir(self) -> Path:
        return self.root / "run"

    @property
    def head_file(self) -> Path:
        return self.run_dir / HEAD_FILE

    @property
    def is_local(self) -> bool:
        return self.config.is_local

    def temp_dir(self) -> Path:
        """The local head's ``--temp-dir``: run/ray, or a short folder under /tmp named after the
        workspace when that path is too long for Ray's socket names."""
        d = self.run_dir / "ray"
        if len(str(d)) > _MAX_TEMP_LEN:
            d = Path("/tmp") / f"specdeck-ray-{hashlib.sha1(str(self.root).encode()).hexdigest()[:10]}"
        return d

    def token_path(self) -> Path | None:
        """``token_file`` as an absolute path (relative to the workspace), or None without one."""
        tf = self.config.token_file
        if not tf:
            return None
        p = Path(tf).expanduser()
        return p if p.is_absolute() else self.root / p

    def token(self) -> str | None:
        """The token in ``token_file`` (relative to the workspace), or None without one."""
        p = self.token_path()
        if p is None:
            return None
        try:
            text = p.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ClusterError(f"[cluster] token_file {p}: cannot read it: {exc.strerror or exc}") from None
        if not text:
            raise ClusterError(f"[cluster] token_file {p}: the file is empty")
        return text

    def head_info(self) -> dict[str, Any] | None:
        try:
            d = json.loads(self.head_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return d if isinstance(d, dict) else None

    def address(self) -> str:
        """The dashboard URL; for a local head, the one ``cluster up`` recorded."""
        if not self.is_local:
            return self.config.address
        info = self.head_info()
        if not info or not info.get("address"):
            raise ClusterError("the local Ray head is not up: run `python -m backend.cli cluster up`")
        return str(info["address"])

    def client(self, timeout_s: float | None = None) -> RayJobsClient:
        return RayJobsClient(self.address(), token=self.token(), timeout_s=timeout_s or self.config.request_timeout_s)

    def check(self) -> dict[str, Any]:
        """``/api/version`` with the token; raises ClusterError naming what is wrong."""
        try:
            return self.client().version()
        except RayApiError as exc:
            raise ClusterError(str(exc)) from None

    # -- the local head ------------------------------------------------------

    def head_spec(self, ports: dict[str, int] | None = None) -> ProcessSpec:
        """The supervised ``ray start --head --block`` of a local cluster, on free ports."""
        if not self.is_local:
            raise ClusterError(f"[cluster] address is {self.config.address}: Specdeck starts only a local head")
        names = ("gcs", "dashboard", "client", "agent_http", "agent_grpc", "metrics", "runtime_env",
                 "node_manager", "object_manager")
        ports = ports or dict(zip(names, free_ports(len(names))))
        ray_bin = str(Path(self.config.cluster_python or cluster_python()).parent / "ray")
        temp = self.temp_dir()
        c = self.config
        argv = [
            ray_bin, "start", "--head", "--block",
            "--node-ip-address", "127.0.0.1",
            "--num-cpus", str(c.num_cpus), "--num-gpus", str(c.num_gpus),
            "--resources", json.dumps(c.resources),
            "--temp-dir", str(temp),
            "--port", str(ports["gcs"]),
            "--dashboard-host", "127.0.0.1", "--dashboard-port", str(ports["dashboard"]),
            "--include-dashboard", "true",
            "--ray-client-server-port", str(ports["client"]),
            "--dashboard-agent-listen-port", str(ports["agent_http"]),
            "--dashboard-agent-grpc-port", str(ports["agent_grpc"]),
            "--metrics-export-port", str(ports["metrics"]),
            "--runtime-env-agent-port", str(ports["runtime_env"]),
            "--node-manager-port", str(ports["node_manager"]),
            "--object-manager-port", str(ports["object_manager"]),
            "--object-store-memory", str(100 * 1024 * 1024),
            "--disable-usage-stats",
        ]
        home = self.run_dir / "ray-home"
        env = {"HOME": str(home), "RAY_AUTH_MODE": "token" if c.token_file else "disabled",
               "RAY_USAGE_STATS_ENABLED": "0",
               # On SIGTERM the head drains for this long, then ends its processes (Ray's default: 30 s).
               "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "5"}
        if self.token():  # readable and not empty; the head reads it from the file, so the token is never
            # in the stored spec, its launch file or the head's environment listing
            env["RAY_AUTH_TOKEN_PATH"] = str(self.token_path())
        return ProcessSpec(
            name=HEAD_NAME, kind=Kind.OTHER, argv=tuple(argv), log_path=str(self.root / "logs" / f"{HEAD_NAME}.log"),
            cwd=str(self.root), env=env,
            readiness=ReadinessProbe(kind="log", pattern=r"Ray runtime started", interval_s=0.5, timeout_s=120.0),
            stop_grace_s=20.0,
        )

    def prepare_head(self, spec: ProcessSpec) -> None:
        """Make the head's folders and record its address and ports before it starts."""
        argv = list(spec.argv)

        def opt(flag: str) -> str:
            return argv[argv.index(flag) + 1]

        for d in (Path(opt("--temp-dir")), Path(spec.env["HOME"])):
            make_private_dirs(d)
            _check_own_private_dir(d)
        info = {
            "address": f"http://127.0.0.1:{opt('--dashboard-port')}",
            "gcs_address": f"127.0.0.1:{opt('--port')}",
            "temp_dir": opt("--temp-dir"),
            "token": bool(self.config.token_file),
        }
        write_private(self.head_file, json.dumps(info, indent=1))

    def forget_head(self) -> None:
        try:
            self.head_file.unlink()
        except FileNotFoundError:
            pass


def load_cluster(root: str | os.PathLike[str]) -> Cluster | None:
    """The ``[cluster]`` of the workspace config at ``root``, or None when it has none.  A bad
    section is a ClusterError naming the file (the workspace reader reports its line)."""
    root = Path(root)
    path = root / CONFIG_NAME
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ClusterError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ClusterError(f"{path}: TOML syntax: {exc}") from None
    section = data.get("cluster")
    if section is None:
        return None
    try:
        return Cluster(ClusterConfig.model_validate(section), root)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err.get("loc", ()))
        raise ClusterError(f"{path}: cluster{'.' + loc if loc else ''}: {err.get('msg')}") from None


# -- the entrypoint ------------------------------------------------------------

# Runs the argv in its own process group, passes SIGTERM/SIGINT on to that group, and when the
# child ends ends what is left of its group (SIGTERM, the grace, SIGKILL): Ray leaves background
# children of a job that exits.  A stop that arrives before the child started means it never starts.
# From then on the stop signals and SIGCHLD stay blocked and are taken one by one with sigwaitinfo
# (unblocked in the child before its exec): a stop that arrives while the child starts, or at any
# moment after, is passed on as soon as the child is known.  (A handler could not promise that: a stop
# caught just before a blocking wait for the child ran only when the child ended.)
# Killed by signal N, it exits 128+N.  Standard library only: it runs on the cluster's nodes.
_WRAPPER = r"""
import base64, json, os, signal, subprocess, sys, time
c = json.loads(base64.b64decode(sys.argv[2]))
def on_signal(sig, frame):
    sys.exit(128 + sig)
signal.signal(signal.SIGTERM, on_signal)
signal.signal(signal.SIGINT, on_signal)
signal.signal(signal.SIGCHLD, lambda sig, frame: None)
if c.get("cwd"):
    os.chdir(c["cwd"])
stops = {signal.SIGTERM, signal.SIGINT}
taken = stops | {signal.SIGCHLD}
signal.pthread_sigmask(signal.SIG_BLOCK, taken)
pending = sorted(signal.sigpending() & stops)
if pending:
    sys.exit(128 + pending[0])
def unblock():
    signal.pthread_sigmask(signal.SIG_UNBLOCK, taken)
try:
    child = subprocess.Popen(c["argv"], start_new_session=True, preexec_fn=unblock)
except OSError as exc:
    print("cannot start %s: %s" % (c["argv"][0], exc), file=sys.stderr, flush=True)
    sys.exit(127)
while True:
    sig = signal.sigwaitinfo(taken).si_signo
    if sig == signal.SIGCHLD:
        if child.poll() is not None:
            break
        continue
    try:
        os.killpg(child.pid, sig)
    except OSError:
        pass
rc = child.returncode
def group_alive():
    try:
        os.killpg(child.pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
if group_alive():
    os.killpg(child.pid, signal.SIGTERM)
    end = time.monotonic() + float(c.get("grace", 10))
    while group_alive() and time.monotonic() < end:
        time.sleep(0.1)
    if group_alive():
        os.killpg(child.pid, signal.SIGKILL)
sys.exit(rc if rc >= 0 else 128 - rc)
"""


_BOOT = "import base64,sys;exec(base64.b64decode(sys.argv[1]))"  # the wrapper's code travels as argv[1]


def entrypoint(spec: ProcessSpec, *, python: str, cwd: str | None) -> str:
    """The shell command Ray runs for ``spec`` (Ray's entrypoint is a shell string: every part is quoted)."""
    # The environment travels in the job's runtime_env, not in the command line Ray shows.
    payload = {"argv": list(spec.argv), "cwd": cwd, "grace": spec.stop_grace_s}
    blob = base64.b64encode(json.dumps(payload).encode()).decode()
    code = base64.b64encode(_WRAPPER.strip().encode()).decode()
    # ``exec``: Ray starts the entrypoint with ``/bin/sh -c`` and stops a job by signalling the shell and the
    # children it has at that moment.  A shell that forks the wrapper can be stopped just after the fork and
    # before the wrapper shows among its children: the wrapper, orphaned and never signalled, then starts the
    # program anyway.  With ``exec`` the shell becomes the wrapper, so the stop always reaches it.
    return "exec " + " ".join(shlex.quote(p) for p in (python, "-c", _BOOT, code, blob))


def exit_code_of(code: int | None) -> int | None:
    """Ray's ``driver_exit_code`` as Specdeck records it: 128+N (the wrapper's killed by signal N) is -N."""
    if code is not None and 128 < code < 128 + 65:
        return -(code - 128)
    return code


__all__ = ["Cluster", "ClusterError", "HEAD_NAME", "cluster_python", "entrypoint", "exit_code_of", "free_ports",
           "load_cluster"]
