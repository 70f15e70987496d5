"""A ``[[router]]`` entry: an ``sglang-router`` in front of some of the workspace's servers.

Example::

    [[router]]
    name = "fleet"
    port = 31000                 # required: clients, the readiness probe and the spec need it fixed
    servers = ["a", "b", "c"]    # default: every [[server]] of the workspace
    policy = "cache_aware"       # round_robin, power_of_two, random
    health_check_interval_s = 5
    health_failure_threshold = 2
    control_plane_key_file = "router.key"   # optional; protects the router's /workers API

The router is a supervised process (kind ``other``) run by the cluster environment's interpreter
(``python``, default ``$SPECDECK_CLUSTER_PYTHON``, else ``<repo>/.venv-cluster/bin/python``) through
:mod:`backend.sglang.router_launch`, which hands the control-plane key to the router without putting
it on the command line.  It starts with no workers: the servers join through its ``/workers`` API when
they are RUNNING and leave when they stop (``backend/flows/router_sync.py``), so its spec never
changes with the servers' states.

``port`` has no default on purpose: a port chosen afresh at each start would change the URL that
regeneration jobs and benchmarks were given.  ``metrics_port`` (the router's Prometheus exporter)
defaults to ``port + 1``; both listen on ``host`` (default 127.0.0.1).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from backend.validation import check_name
from specdeck_types.process import LOG_KEEP, LOG_MAX_BYTES, Kind, ProcessSpec, ReadinessProbe

REPO_ROOT = Path(__file__).resolve().parents[2]
CLUSTER_PYTHON_ENV = "SPECDECK_CLUSTER_PYTHON"
LAUNCHER = Path(__file__).resolve().with_name("router_launch.py")
KEY_FILE_ENV = "SPECDECK_ROUTER_KEY_FILE"
POLICIES: tuple[str, ...] = ("cache_aware", "round_robin", "power_of_two", "random")
# How long the router keeps trying to reach a worker that was added: a server joins only once it
# answers /health, so a minute is plenty; the router's own default is half an hour.
WORKER_STARTUP_TIMEOUT_S = 60


def cluster_python() -> str:
    """The interpreter of the cluster environment (ray, sglang-router)."""
    return os.environ.get(CLUSTER_PYTHON_ENV) or str(REPO_ROOT / ".venv-cluster" / "bin" / "python")


class RouterConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    name: str
    servers: list[str] | None = None  # names of [[server]] entries; None: all of them
    policy: Literal["cache_aware", "round_robin", "power_of_two", "random"] = "cache_aware"
    host: str = "127.0.0.1"
    port: int = Field(ge=1, le=65535)
    metrics_port: int | None = Field(None, ge=1, le=65535)
    health_check_interval_s: int = Field(5, ge=1, le=3600)
    health_failure_threshold: int = Field(2, ge=1, le=100)
    python: str | None = None
    where: Literal["local", "ray"] = "local"  # "ray": a job on the workspace's [cluster]
    control_plane_key_file: str | None = None
    stop_grace_s: float = Field(10.0, ge=0, le=3600)
    drain_timeout_s: float = Field(120.0, ge=0, le=86400)  # a relaunch waits at most this for in-flight requests
    extra_args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    log_max_mb: float = Field(LOG_MAX_BYTES / 2**20, ge=0, le=2**20)
    log_keep: int = Field(LOG_KEEP, ge=1, le=1000)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_name(v)

    @field_validator("host")
    @classmethod
    def _host(cls, v: str) -> str:
        if not v.strip() or any(c.isspace() or c in "/:" for c in v):
            raise ValueError(f"a host name or address without scheme or port (got {v!r})")
        return v

    @field_validator("python")
    @classmethod
    def _python(cls, v: str | None) -> str | None:
        if v is not None and not v.strip():
            raise ValueError("must not be empty (leave it out for the cluster environment's python)")
        return v

    @field_validator("servers")
    @classmethod
    def _servers(cls, v: list[str] | None) -> list[str] | None:
        if v is None:
            return v
        if not v:
            raise ValueError("lists no server (leave it out for every [[server]] of the workspace)")
        if len(set(v)) != len(v):
            raise ValueError("a server is listed twice")
        return v

    @field_validator("extra_args")
    @classmethod
    def _extra(cls, v: list[str]) -> list[str]:
        owned = {"--host", "--port", "--policy", "--prometheus-host", "--prometheus-port", "--worker-urls",
                 "--control-plane-api-keys", "--health-check-interval-secs", "--health-failure-threshold"}
        for a in v:
            if a.split("=", 1)[0] in owned:
                raise ValueError(f"{a.split('=', 1)[0]} is set from this entry's own keys; use them instead")
        return v

    @model_validator(mode="after")
    def _ports(self) -> "RouterConfig":
        if self.metrics_port is None and self.port >= 65535:
            raise ValueError("port 65535 leaves no port + 1 for the metrics; set metrics_port")
        if self.metrics_port is not None and self.metrics_port == self.port:
            raise ValueError("metrics_port is the same as port")
        return self

    @property
    def metrics(self) -> int:
        return self.metrics_port if self.metrics_port is not None else self.port + 1

    @property
    def url(self) -> str:
        """Where clients reach the router (a wildcard listen address is reached on 127.0.0.1)."""
        return f"http://{reach_host(self.host)}:{self.port}"

    def members(self, server_names: list[str]) -> list[str]:
        """The servers behind this router, of the workspace's ``server_names``."""
        if self.servers is None:
            return list(server_names)
        return [n for n in self.servers if n in server_names]

    def key_path(self, root: Path | str) -> Path | None:
        if not self.control_plane_key_file:
            return None
        p = Path(self.control_plane_key_file).expanduser()
        return p if p.is_absolute() else Path(root) / p


def reach_host(host: str) -> str:
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host


def server_url(host: str, port: int) -> str:
    """The URL a router uses for a server listening on ``host:port``."""
    h = reach_host(host)
    if ":" in h and not h.startswith("["):
        h = f"[{h}]"
    return f"http://{h}:{port}"


def read_key(path: Path) -> str:
    """The control-plane secret in ``path`` (its first line); ValueError naming the file when unusable."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the control-plane key: {exc.strerror or exc}") from None
    key = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not key:
        raise ValueError(f"{path}: the control-plane key file is empty")
    if any(c.isspace() or c == ":" for c in key):
        raise ValueError(f"{path}: the control-plane key must not hold spaces or ':'")
    return key


def build_argv(cfg: RouterConfig) -> list[str]:
    """The router's command line (the key, when set, is read by the launcher from its file)."""
    return [cfg.python or cluster_python(), str(LAUNCHER),
            "--host", cfg.host, "--port", str(cfg.port), "--policy", cfg.policy,
            "--prometheus-host", cfg.host, "--prometheus-port", str(cfg.metrics),
            "--health-check-interval-secs", str(cfg.health_check_interval_s),
            "--health-failure-threshold", str(cfg.health_failure_threshold),
            "--worker-startup-timeout-secs", str(WORKER_STARTUP_TIMEOUT_S),
            "--shutdown-grace-period-secs", str(max(1, int(cfg.stop_grace_s))),
            *cfg.extra_args]


def to_process_spec(cfg: RouterConfig, logs_dir: Path | str, root: Path | str) -> ProcessSpec:
    """The router as a supervised process: RUNNING once its ``/liveness`` answers 200."""
    env = dict(cfg.env)
    key = cfg.key_path(root)
    if key is not None:
        env[KEY_FILE_ENV] = str(key)
    return ProcessSpec(
        name=cfg.name,
        kind=Kind.OTHER,
        argv=tuple(build_argv(cfg)),
        log_path=str(Path(logs_dir) / f"{cfg.name}.log"),
        cwd=str(REPO_ROOT),
        env=env,
        readiness=ReadinessProbe(kind="http", url=f"{cfg.url}/liveness", interval_s=0.5, timeout_s=120.0),
        stop_grace_s=cfg.stop_grace_s + 5.0,  # the router's own grace for in-flight requests, and a margin
        log_max_bytes=int(cfg.log_max_mb * 2**20),
        log_keep=cfg.log_keep,
        where=cfg.where,  # "ray": a job on the workspace's [cluster] (no GPU)
    )
