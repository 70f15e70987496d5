"""The parameters of a regeneration run and its ``OUT.job.json``.

``JobConfig`` is what ``regen run`` was given: the inputs (files, each its own dataset named after
the file) or a mix of the workspace (stored resolved, with its files), the servers, sampling
(temperature, top_p, max_tokens), the reasoning mode (SpecForge's: ``none``; ``save`` keeps
``reasoning_content``; ``disable`` sends ``chat_template_kwargs.enable_thinking = false``), an
optional system prompt, the concurrency per server.  It is written to ``OUT.job.json`` at every
start, so a resume with no arguments runs with the same parameters.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from backend.filemodes import make_private_dirs, write_private
from backend.readcap import CONFIG_JSON_MAX, load_json_capped
from backend.regen.catalog import MixConfig, MixEntry
from backend.regen.output import RunFiles

REASONING = ("none", "save", "disable")


@dataclass(kw_only=True)
class Sampling:
    """What a run asks of its servers, with the defaults and limits: requests at once per server, the
    answer's length, sampling, the reasoning mode and a system prompt.  ``regen run``'s
    :class:`JobConfig` and the page's start form (:class:`backend.regen.control.RunForm`) both hold them."""

    concurrency: int = 64
    max_tokens: int = 4096
    temperature: float = 0.7
    top_p: float | None = None
    reasoning: str = "none"
    system_prompt: str | None = None

    def check_limits(self) -> None:
        """:class:`ValueError` naming the first parameter outside its limits."""
        if self.concurrency < 1:
            raise ValueError(f"concurrency: {self.concurrency} is not >= 1")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens: {self.max_tokens} is not >= 1")
        if not 0.0 <= self.temperature <= 2.0:
            raise ValueError(f"temperature: {self.temperature} is not in [0, 2]")
        if self.top_p is not None and not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p: {self.top_p} is not in (0, 1]")
        if self.reasoning not in REASONING:
            raise ValueError(f"reasoning: {self.reasoning!r} is not one of {', '.join(REASONING)}")


@dataclass
class ServerSpec:
    url: str
    name: str | None = None


@dataclass
class JobConfig(Sampling):
    out: Path
    servers: list[ServerSpec]
    inputs: list[str] = field(default_factory=list)   # input files (each its own dataset)
    mix: dict[str, Any] | None = None                 # a MixConfig as a dict (entries with files)
    root: str | None = None                           # where the mix's relative files are
    model: str | None = None
    request_timeout: float = 3600.0
    max_attempts: int = 10

    def check(self) -> None:
        if not self.servers:
            raise ValueError("no server: give --server URL_OR_NAME")
        if bool(self.inputs) == bool(self.mix):
            raise ValueError("give the inputs (--input FILE ...) or a mix (--mix NAME), one of the two")
        self.check_limits()
        if self.request_timeout <= 0:
            raise ValueError(f"request_timeout: {self.request_timeout} is not > 0")
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts: {self.max_attempts} is not >= 1")

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["out"] = str(self.out)
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "JobConfig":
        d = dict(d)
        d["out"] = Path(d["out"])
        d["servers"] = [ServerSpec(**s) for s in d.get("servers") or []]
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})

    def mix_config(self) -> MixConfig:
        if self.mix is not None:
            return MixConfig.model_validate(self.mix)
        entries, names = [], set()
        for p in self.inputs:
            name = dataset_name(Path(p), names)
            names.add(name)
            entries.append(MixEntry(name="inputs", dataset=name, file=str(Path(p).expanduser().resolve())))
        return MixConfig(name="inputs", entries=entries)


def dataset_name(path: Path, taken: set[str]) -> str:
    """The dataset name of an input file: its stem in catalog characters, unique among ``taken``."""
    stem = path.name.split(".")[0] or "input"
    base = re.sub(r"[^A-Za-z0-9_.-]+", "-", stem).strip("-._")[:60] or "input"
    if not base[0].isalnum():
        base = "d" + base
    name, n = base, 2
    while name in taken:
        name, n = f"{base}-{n}", n + 1
    return name


def write_job_json(files: RunFiles, cfg: JobConfig) -> None:
    make_private_dirs(files.job.parent)
    write_private(files.job, json.dumps(cfg.to_json(), indent=2, ensure_ascii=False) + "\n")


def read_job_json(files: RunFiles) -> JobConfig:
    try:
        return JobConfig.from_json(load_json_capped(files.job, CONFIG_JSON_MAX, "a job file"))
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"{files.job}: cannot read the run's parameters: {exc}") from None
