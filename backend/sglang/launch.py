"""Turn a :class:`ServerConfig` into the argv, environment and process spec of a server.

The argv is what follows ``python -m sglang.launch_server``, right for the
version (``--cuda-graph-max-bs`` became ``--cuda-graph-max-bs-decode`` in 0.5.14).  A
simulated server gets exactly the same flags, run by ``backend.sim.server``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from backend.sglang.config import ServerConfig
from backend.sglang.version import Capabilities, capabilities
from specdeck_types.process import Kind, ProcessSpec, ReadinessProbe

REPO_ROOT = Path(__file__).resolve().parents[2]
SIM_MODULE = "backend.sim.server"
SERVER_MODULE = "sglang.launch_server"
# The simulator reads the SGLang version whose log format and endpoints it imitates here.
SIM_VERSION_ENV = "SPECDECK_SIM_SGLANG_VERSION"


def _caps(version: Capabilities | str | None) -> Capabilities:
    return version if isinstance(version, Capabilities) else capabilities(version)


def build_argv(cfg: ServerConfig, version: Capabilities | str | None = None) -> list[str]:
    """The full argv (interpreter first) that launches ``cfg``."""
    caps = _caps(version)
    python = sys.executable if cfg.simulate else cfg.python
    module = SIM_MODULE if cfg.simulate else SERVER_MODULE
    argv = [python, "-m", module, *server_args(cfg, caps)]
    return argv


def server_args(cfg: ServerConfig, version: Capabilities | str | None = None) -> list[str]:
    """The flags alone, as ``sglang.launch_server`` takes them."""
    caps = _caps(version)
    a: list[str] = ["--model-path", cfg.model_path, "--host", cfg.host, "--port", str(cfg.port)]
    if cfg.served_model_name:
        a += ["--served-model-name", cfg.served_model_name]
    if cfg.tp_size != 1:
        a += ["--tp-size", str(cfg.tp_size)]
    if cfg.mem_fraction_static is not None:
        a += ["--mem-fraction-static", _num(cfg.mem_fraction_static)]
    if cfg.page_size is not None:
        a += ["--page-size", str(cfg.page_size)]
    if cfg.attention_backend:
        a += ["--attention-backend", cfg.attention_backend]
    if cfg.trust_remote_code:
        a += ["--trust-remote-code"]
    spec = cfg.speculative
    if spec.algorithm:
        a += ["--speculative-algorithm", spec.algorithm]
        if spec.draft_model_path:
            a += ["--speculative-draft-model-path", spec.draft_model_path]
        if spec.num_steps is not None:
            a += ["--speculative-num-steps", str(spec.num_steps)]
        if spec.eagle_topk is not None:
            a += ["--speculative-eagle-topk", str(spec.eagle_topk)]
        if spec.num_draft_tokens is not None:
            a += ["--speculative-num-draft-tokens", str(spec.num_draft_tokens)]
    if cfg.cuda_graph.disable:
        a += ["--disable-cuda-graph"]
    elif cfg.cuda_graph.max_bs is not None:
        a += [caps.cuda_graph_max_bs_flag, str(cfg.cuda_graph.max_bs)]
    if cfg.enable_metrics:
        a += ["--enable-metrics"]
    if cfg.decode_log_interval is not None:
        a += ["--decode-log-interval", str(cfg.decode_log_interval)]
    a += [str(x) for x in cfg.extra_args]
    return a


def _num(x: float) -> str:
    return repr(float(x))


def build_env(cfg: ServerConfig, version: Capabilities | str | None = None) -> dict[str, str]:
    """Environment additions for the server process (the supervisor merges them into its own)."""
    env: dict[str, str] = {}
    if cfg.gpus is not None and cfg.where != "ray":  # on Ray, Ray assigns the GPUs it grants the job
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in cfg.gpus)
    if cfg.simulate:
        caps = _caps(version)
        env[SIM_VERSION_ENV] = caps.version
    env["PYTHONUNBUFFERED"] = "1"  # log lines reach the file as they are printed
    env.update(cfg.env)
    return env


@dataclass(frozen=True)
class Endpoints:
    base_url: str
    health: str
    health_generate: str
    metrics: str
    server_info: str
    model_info: str
    models: str
    ready: str | None


def _connect_host(host: str) -> str:
    if host in ("0.0.0.0", "", "::", "[::]"):
        return "127.0.0.1"
    if ":" in host and not host.startswith("["):
        return f"[{host}]"
    return host


def endpoints(cfg: ServerConfig, version: Capabilities | str | None = None) -> Endpoints:
    caps = _caps(version)
    base = f"http://{_connect_host(cfg.host)}:{cfg.port}"
    return Endpoints(
        base_url=base,
        health=base + "/health",
        health_generate=base + "/health_generate",
        metrics=base + "/metrics",
        server_info=base + caps.server_info_path,
        model_info=base + caps.model_info_path,
        models=base + "/v1/models",
        ready=base + "/ready" if caps.has_ready_endpoint else None,
    )


def log_path_for(cfg: ServerConfig, logs_dir: str | Path) -> Path:
    return Path(logs_dir) / f"{cfg.name}.log"


def to_process_spec(cfg: ServerConfig, workspace_logs_dir: str | Path,
                    version: Capabilities | str | None = None, *,
                    startup_timeout_s: float = 1800.0, stop_grace_s: float = 30.0) -> ProcessSpec:
    """A supervisor spec: kind server, RUNNING once ``/health`` answers 200."""
    caps = _caps(version)
    return ProcessSpec(
        name=cfg.name,
        kind=Kind.SERVER,
        argv=tuple(build_argv(cfg, caps)),
        log_path=str(log_path_for(cfg, workspace_logs_dir)),
        cwd=str(REPO_ROOT) if cfg.simulate else None,
        env=build_env(cfg, caps),
        readiness=ReadinessProbe(kind="http", url=endpoints(cfg, caps).health,
                                 interval_s=1.0 if cfg.simulate else 2.0, timeout_s=startup_timeout_s),
        stop_grace_s=stop_grace_s,
        log_max_bytes=int(cfg.log_max_mb * 2**20),
        log_keep=cfg.log_keep,
        # a job on the workspace's Ray cluster asks for its tp_size GPUs (a simulated server for none)
        where=cfg.where,
        num_gpus=float(cfg.tp_size) if cfg.where == "ray" and not cfg.simulate else 0.0,
    )
