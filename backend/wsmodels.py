"""The workspace file's sections for work beyond this machine: ``[cluster]`` (the Ray cluster that
processes with ``where = "ray"`` run on) and ``[telemetry.prometheus]`` (the Prometheus server other
nodes are read from), with the strict model every section of the file is typed by.  The reader
(:mod:`backend.workspace`) composes them into the whole file."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class _Model(BaseModel):
    # nan and inf are never a duration or a count: "Input should be a finite number".
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


def _check_resources(v: dict[str, float]) -> dict[str, float]:
    for k, n in v.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.:-]{0,99}", k):
            raise ValueError(f"resource name {k!r}: letters, digits and _ . : - only, starting with a letter or _")
        if not (0 <= n <= 1e9):
            raise ValueError(f"resource {k}: {n} is not between 0 and 1e9")
    return v


class ClusterConfig(_Model):
    """``[cluster]``: the Ray cluster that processes with ``where = "ray"`` run on.

    ``address = "local"``: a head started and owned by Specdeck (``python -m backend.cli cluster up``),
    with its own temp dir under the workspace's run/ and free ports on 127.0.0.1, ``num_cpus``,
    ``num_gpus`` (may exceed the real GPUs: Ray only counts them) and custom ``resources``.
    ``address = "http://HOST:8265"``: a running cluster's dashboard; ``token_file`` (required) holds the
    token it checks (``Authorization: Bearer``).  ``python``: the interpreter on the cluster's nodes that
    runs the small entrypoint wrapper; ``cluster_python``: the environment whose ``ray`` starts the
    local head (default: $SPECDECK_CLUSTER_PYTHON, else the checkout's .venv-cluster)."""

    kind: Literal["ray"] = "ray"
    address: str = "local"
    token_file: str | None = None
    num_cpus: int = Field(2, ge=1, le=4096)
    num_gpus: int = Field(0, ge=0, le=1024)
    resources: dict[str, float] = Field(default_factory=dict)
    python: str = "python3"
    cluster_python: str | None = None
    request_timeout_s: float = Field(10.0, gt=0, le=300)
    log_tail_lines: int = Field(1000, ge=1, le=100_000)

    @field_validator("address")
    @classmethod
    def _address(cls, v: str) -> str:
        v = v.strip()
        if v != "local" and not re.fullmatch(r"https?://[^\s/]+/?", v):
            raise ValueError(f"address is \"local\" or the dashboard's URL such as \"http://HOST:8265\" (got {v!r})")
        return v.rstrip("/")

    @field_validator("resources")
    @classmethod
    def _resources(cls, v: dict[str, float]) -> dict[str, float]:
        return _check_resources(v)

    @model_validator(mode="after")
    def _token(self) -> "ClusterConfig":
        if self.address != "local" and not self.token_file:
            raise ValueError("a remote cluster needs token_file = '<file holding its auth token>' "
                             "(start it with RAY_AUTH_MODE=token)")
        return self

    @property
    def is_local(self) -> bool:
        return self.address == "local"


class PrometheusConfig(_Model):
    """``[telemetry.prometheus]``: a Prometheus server to read every node's GPUs and every server's
    SGLang metrics from (``url``, with an optional bearer token in ``token_file``), the ``file_sd``
    targets file Specdeck writes for the servers it starts (``targets_file``, relative to the
    workspace), and the address its own sampler exports on in the exporters' names (``export``,
    "HOST:PORT"; unset: no export)."""

    url: str | None = None
    token_file: str | None = None
    targets_file: str = "run/prometheus-targets.json"
    export: str | None = None
    query_timeout_s: float = Field(5.0, gt=0, le=120)
    max_age_s: float = Field(30.0, gt=0, le=3600)
