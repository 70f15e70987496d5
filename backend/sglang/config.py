"""The launch config of one SGLang server, as written in the workspace file.

A ``[[server]]`` table in ``specdeck.toml`` validates into :class:`ServerConfig`;
unknown keys are errors (``extra='forbid'``) so a misspelt flag never passes
silently.  Example::

    [[server]]
    name = "kimi-eagle3"
    model_path = "/models/Kimi-K2"
    tp_size = 8
    gpus = [0, 1, 2, 3, 4, 5, 6, 7]
    baseline_tok_s = 90.0

    [server.speculative]
    algorithm = "EAGLE3"
    draft_model_path = "/drafts/kimi-k2-eagle3"
    num_steps = 3
    eagle_topk = 1
    num_draft_tokens = 4
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from backend.validation import check_gpu_indices, check_name
from specdeck_types.process import LOG_KEEP, LOG_MAX_BYTES

Algorithm = Literal["EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM"]
ALGORITHMS: tuple[str, ...] = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM")



class _Model(BaseModel):
    # nan and inf are never a speed, a fraction or a size: "Input should be a finite number".
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class SpeculativeConfig(_Model):
    """``--speculative-*`` settings; ``algorithm = None`` turns speculation off."""

    algorithm: Algorithm | None = None
    draft_model_path: str | None = None
    num_steps: int | None = Field(None, ge=1, le=64)
    eagle_topk: int | None = Field(None, ge=1, le=64)
    num_draft_tokens: int | None = Field(None, ge=1, le=1024)

    @field_validator("algorithm", mode="before")
    @classmethod
    def _upper(cls, v: object) -> object:
        # SGLang upper-cases the algorithm name; accept "eagle3" the same way.
        if isinstance(v, str):
            v = v.strip().upper()
            return v or None
        return v

    @property
    def enabled(self) -> bool:
        return self.algorithm is not None


class CudaGraphConfig(_Model):
    disable: bool = False
    max_bs: int | None = Field(None, ge=1, le=4096)


class ServerConfig(_Model):
    name: str
    model_path: str
    served_model_name: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(30000, ge=1, le=65535)
    tp_size: int = Field(1, ge=1, le=64)
    gpus: list[int] | None = None  # CUDA_VISIBLE_DEVICES; None leaves it unset
    mem_fraction_static: float | None = Field(None, gt=0.0, lt=1.0)
    page_size: int | None = Field(None, ge=1)
    attention_backend: str | None = None
    trust_remote_code: bool = False  # --trust-remote-code (Kimi-K2 and GLM targets need it)
    speculative: SpeculativeConfig = Field(default_factory=SpeculativeConfig)
    cuda_graph: CudaGraphConfig = Field(default_factory=CudaGraphConfig)
    enable_metrics: bool = True
    decode_log_interval: int | None = Field(None, ge=1, le=100000)
    extra_args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    python: str = "python3"  # interpreter of the serving environment
    sglang_version: str | None = None  # overrides detection
    baseline_tok_s: float | None = Field(None, gt=0)
    simulate: bool = False  # launch backend.sim.server with the same flags
    autostart: bool = False  # started (through preflight) when the workspace first opens (never-started only)
    where: Literal["local", "ray"] = "local"  # "ray": a job on the workspace's [cluster]
    # the log is rotated at this size (0: never), keeping log_keep older files NAME.log.1 … NAME.log.<keep>
    log_max_mb: float = Field(LOG_MAX_BYTES / 2**20, ge=0, le=2**20)
    log_keep: int = Field(LOG_KEEP, ge=1, le=1000)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_name(v)

    @field_validator("model_path", "python")
    @classmethod
    def _non_empty(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be empty")
        return v

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, v: list[int] | None) -> list[int] | None:
        return v if v is None else check_gpu_indices(v)

    @field_validator("sglang_version")
    @classmethod
    def _version(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^\d+\.\d+", v.strip()):
            raise ValueError("write a version like '0.5.4' or '0.5.3.post3'")
        return v.strip() if v else v

    @model_validator(mode="after")
    def _gpus_vs_tp(self) -> "ServerConfig":
        if self.gpus is not None and len(self.gpus) < self.tp_size:
            raise ValueError(f"tp_size {self.tp_size} needs at least {self.tp_size} GPUs, gpus lists {len(self.gpus)}")
        return self

    @property
    def spec_enabled(self) -> bool:
        return self.speculative.enabled


def describe_validation_error(exc: ValidationError, source: str) -> list[str]:
    """One ``source: field: message`` line per problem, for configs not read from TOML."""
    out = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err.get("loc", ())) or "(top level)"
        msg = "unknown key (check its spelling)" if err.get("type") == "extra_forbidden" else err.get("msg", "invalid")
        out.append(f"{source}: {loc}: {msg}")
    return out


def _flat(d: dict, prefix: str = "") -> dict:
    out: dict = {}
    for key, value in d.items():
        if isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def config_changes(old: ServerConfig, new: ServerConfig) -> list[tuple[str, object, object]]:
    """Each field an edit changes, as (dotted key, old value, new value), in the new config's order."""
    a, b = _flat(old.model_dump(mode="json")), _flat(new.model_dump(mode="json"))
    return [(key, a.get(key), b.get(key)) for key in b if a.get(key) != b.get(key)]
