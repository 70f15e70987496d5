"""A training run as written in the workspace file: one ``[[train]]`` table per run.

Validated like a ``[[server]]`` entry: unknown keys are errors, every problem is reported as
``file:line: train[i].field: reason`` (backend.workspace), and an edit made on the Training page is
written back into the same table with its comments kept.  Example::

    [[train]]
    name = "llama8b-eagle3"
    python = "/opt/specforge/.venv/bin/python"
    generation = "auto"                    # auto | gen1 | gen2 | gen3
    specforge_dir = "/opt/SpecForge"       # the checkout whose scripts/ Gen-1 and Gen-2 run
    target_model = "meta-llama/Llama-3.1-8B-Instruct"
    draft_config = "/opt/SpecForge/configs/llama3-8B-eagle3.json"
    train_data = "outputs/regen/sharegpt-regen.jsonl"
    num_epochs = 10
    batch_size = 1
    learning_rate = 1e-4
    max_length = 4096
    tp_size = 1
    gpus = [0, 1, 2, 3]

    [train.tracker]
    report_to = "tensorboard"

``entry`` names what runs instead of SpecForge's own entry point of the generation:
``"module:PKG.MOD [ARG ...]"`` runs ``python -m PKG.MOD ARG ...`` with the generation's flags (the
project's CPU trainer is ``"module:backend.flows.tiny train"``, which takes Gen-2's flags), and
``"script:PATH"`` runs a script (relative to ``specforge_dir``).  Relative data and output paths are
relative to the workspace folder; ``output_dir`` defaults to ``<outputs>/train/<name>``.
"""

from __future__ import annotations

import math
import re
import shlex
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from backend.validation import check_gpu_indices, check_name

Generation = Literal["auto", "gen1", "gen2", "gen3"]
GENERATIONS: tuple[str, ...] = ("auto", "gen1", "gen2", "gen3")
TRACKERS: tuple[str, ...] = ("none", "tensorboard", "wandb", "mlflow", "swanlab")

_MODULE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class _Model(BaseModel):
    # nan and inf are never a rate or a size: "Input should be a finite number".
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)


class TrackerConfig(_Model):
    """SpecForge's ``--report-to`` and the options of each back-end (reference §1.1, §2.4).

    API keys are not kept here: give them through ``env`` (``WANDB_API_KEY``, ``SWANLAB_API_KEY``), so
    they never appear in a process list.
    """

    report_to: Literal["none", "tensorboard", "wandb", "mlflow", "swanlab"] = "none"
    project: str | None = None          # wandb / swanlab project
    run_name: str | None = None         # wandb / swanlab / mlflow run name
    offline: bool = False               # wandb: --wandb-offline (no key needed)
    wandb_dir: str | None = None        # wandb: --wandb-dir
    mlflow_tracking_uri: str | None = None
    mlflow_experiment_name: str | None = None

    @model_validator(mode="after")
    def _fits_backend(self) -> "TrackerConfig":
        used = {k for k in ("project", "run_name", "wandb_dir", "mlflow_tracking_uri", "mlflow_experiment_name")
                if getattr(self, k)}
        if self.offline:
            used.add("offline")
        allowed = {"none": set(), "tensorboard": set(),
                   "wandb": {"project", "run_name", "offline", "wandb_dir"},
                   "swanlab": {"project", "run_name"},
                   "mlflow": {"run_name", "mlflow_tracking_uri", "mlflow_experiment_name"}}[self.report_to]
        extra = sorted(used - allowed)
        if extra:
            raise ValueError(f"{', '.join(extra)} {'is' if len(extra) == 1 else 'are'} not an option of "
                             f"report_to = {self.report_to!r}")
        return self


class TrainRunConfig(_Model):
    name: str
    python: str = "python3"  # interpreter of the training environment
    generation: Generation = "auto"
    specforge_dir: str | None = None
    entry: str = ""  # "" (SpecForge's own), "module:PKG.MOD [ARG ...]" or "script:PATH"
    target_model: str
    draft_config: str | None = None  # None: SpecForge derives one from the target
    train_data: str
    eval_data: str | None = None
    train_hidden_states: str | None = None  # offline training: prepared hidden states
    output_dir: str | None = None
    chat_template: str | None = None
    num_epochs: int = Field(10, ge=1, le=100_000)
    max_steps: int | None = Field(None, ge=1)
    batch_size: int = Field(1, ge=1, le=65_536)
    learning_rate: float = Field(1e-4, gt=0, le=10)
    max_length: int = Field(2048, ge=1, le=10_000_000)
    ttt_length: int = Field(7, ge=1, le=64)
    tp_size: int = Field(1, ge=1, le=64)
    gpus: list[int] | None = None  # CUDA_VISIBLE_DEVICES and the number of processes; None: tp_size processes
    save_interval: int | None = Field(None, ge=1)
    eval_interval: int | None = Field(None, ge=1)
    log_interval: int | None = Field(None, ge=1)
    seed: int | None = Field(None, ge=0)
    tracker: TrackerConfig = Field(default_factory=TrackerConfig)
    capture_servers: list[str] = Field(default_factory=list)  # Gen-3 online: the capture servers' URLs
    gen3_yaml: dict[str, Any] = Field(default_factory=dict)   # Gen-3: merged into the generated YAML
    extra_args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    stop_grace_s: float = Field(30.0, ge=0, le=3600)
    where: Literal["local", "ray"] = "local"  # "ray": a job on the workspace's [cluster]

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return check_name(v)

    @field_validator("python", "target_model", "train_data")
    @classmethod
    def _non_empty(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("must not be empty")
        return v

    @field_validator("generation", mode="before")
    @classmethod
    def _gen(cls, v: object) -> object:
        if isinstance(v, str):
            s = v.strip().lower().replace("-", "")
            return {"1": "gen1", "2": "gen2", "3": "gen3"}.get(s, s)
        return v

    @field_validator("entry")
    @classmethod
    def _entry(cls, v: str) -> str:
        v = v.strip()
        if not v:
            return v
        kind, _, rest = v.partition(":")
        if kind == "module":
            try:
                words = shlex.split(rest)
            except ValueError as exc:
                raise ValueError(f"cannot split the module's words: {exc}") from None
            if not words or not _MODULE_RE.match(words[0]):
                raise ValueError("write entry = 'module:package.module [args]', e.g. 'module:backend.flows.tiny "
                                 "train'")
            return v
        if kind == "script":
            if not rest.strip():
                raise ValueError("write entry = 'script:path/to/train.py'")
            return v
        raise ValueError("entry is '' (SpecForge's own entry point), 'module:PKG.MOD [ARG ...]' or "
                         "'script:PATH'")

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, v: list[int] | None) -> list[int] | None:
        if v is None:
            return v
        if not v:
            raise ValueError("list at least one GPU, or leave gpus out")
        return check_gpu_indices(v)

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        bad = [k for k in v if not _ENV_RE.match(k)]
        if bad:
            raise ValueError(f"not an environment variable name: {', '.join(map(repr, bad))}")
        return v

    @field_validator("capture_servers")
    @classmethod
    def _urls(cls, v: list[str]) -> list[str]:
        bad = [u for u in v if not u.startswith(("http://", "https://"))]
        if bad:
            raise ValueError(f"write capture servers as http://host:port, not {bad[0]!r}")
        return v

    @field_validator("learning_rate")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("must be a finite number")
        return v

    @model_validator(mode="after")
    def _gpus_vs_tp(self) -> "TrainRunConfig":
        if self.gpus is not None and len(self.gpus) % self.tp_size:
            raise ValueError(f"tp_size {self.tp_size} must divide the number of GPUs ({len(self.gpus)}): each "
                             "data-parallel rank holds a whole tensor-parallel group")
        return self

    # -- derived -------------------------------------------------------------

    @property
    def nproc(self) -> int:
        """Processes to start (torchrun --nproc_per_node): one per GPU, else one per TP rank."""
        return len(self.gpus) if self.gpus else self.tp_size

    @property
    def entry_kind(self) -> Literal["specforge", "module", "script"]:
        return "specforge" if not self.entry else self.entry.partition(":")[0]  # type: ignore[return-value]

    @property
    def entry_words(self) -> list[str]:
        """``module:`` → [module, args...]; ``script:`` → [path]; SpecForge's own → []."""
        kind, _, rest = self.entry.partition(":")
        if kind == "module":
            words = shlex.split(rest)
            words[0] = RENAMED_MODULES.get(words[0], words[0])
            return words
        if kind == "script":
            return [rest.strip()]
        return []


# Modules of the project's own trainer that moved: a workspace written before still names the old one.
RENAMED_MODULES = {"backend.train.tiny": "backend.flows.tiny"}


def resolve_path(path: str | None, root: Path) -> str | None:
    """``path`` made absolute against the workspace folder ``root`` (``~`` expanded); None stays None."""
    if path is None:
        return None
    p = Path(path).expanduser()
    return str(p if p.is_absolute() else root / p)


def default_output_dir(outputs_dir: Path, name: str) -> Path:
    return Path(outputs_dir) / "train" / name


__all__ = ["GENERATIONS", "TRACKERS", "Generation", "TrackerConfig", "TrainRunConfig", "default_output_dir",
           "resolve_path"]
