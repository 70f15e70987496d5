"""What a sweep measures: configurations (steps x top-k x draft tokens, and the baseline) and loads.

A :class:`SweepPlan` is what the user asks for; :func:`expand` turns it into the list of
:class:`SweepConfig` to run against one server, given that server's own config:

* an axis left empty keeps the server's own value (``--steps 3,5`` varies the steps only);
* at top-k 1 SGLang sets the draft tokens to steps + 1 whatever was asked, so the plan does
  the same and says so, and combinations that become the same configuration run once;
* the baseline (speculation off) runs first, so every speculative result has its baseline
  at the same load as soon as it exists.

Bad values raise :class:`PlanError`, one line per problem naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from backend.bench.client import BACKENDS
from backend.sglang.config import ServerConfig

MAX_CONFIGS = 64
MODES = ("auto", "builtin", "sglang")
_BOUNDS = {"steps": (1, 64), "topk": (1, 64), "draft_tokens": (1, 1024), "concurrency": (1, 100_000)}


class PlanError(ValueError):
    """A plan that cannot run; ``problems`` has one line per field."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("; ".join(self.problems))


class SweepPlan(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    server: str
    steps: list[int] = Field(default_factory=list)
    topk: list[int] = Field(default_factory=list)
    draft_tokens: list[int] = Field(default_factory=list)
    baseline: bool = False
    baseline_only: bool = False
    concurrency: list[int] = Field(default_factory=lambda: [1])
    num_prompts: int = Field(200, ge=1, le=1_000_000)
    input_len: int = Field(1024, ge=1, le=10_000_000)
    output_len: int = Field(512, ge=1, le=10_000_000)
    mode: Literal["auto", "builtin", "sglang"] = "auto"
    backend: str = "sglang"
    ready_timeout_s: float = Field(1800.0, gt=0, le=86_400)

    @field_validator("steps", "topk", "draft_tokens", "concurrency")
    @classmethod
    def _in_bounds(cls, v: list[int], info) -> list[int]:
        lo, hi = _BOUNDS[info.field_name]
        bad = [x for x in v if not lo <= x <= hi]
        if bad:
            raise ValueError(f"values must be between {lo} and {hi} (got {', '.join(map(str, bad))})")
        if len(set(v)) != len(v):
            raise ValueError(f"a value is listed twice ({', '.join(map(str, v))})")
        return v

    @field_validator("concurrency")
    @classmethod
    def _some_load(cls, v: list[int]) -> list[int]:
        if not v:
            raise ValueError("give at least one concurrency")
        return v

    @field_validator("backend")
    @classmethod
    def _backend(cls, v: str) -> str:
        if v not in BACKENDS:
            raise ValueError(f"use one of {', '.join(BACKENDS)}")
        return v

    @classmethod
    def build(cls, **values: Any) -> "SweepPlan":
        """Validate ``values``; problems raise :class:`PlanError` naming each field."""
        try:
            plan = cls(**values)
        except ValidationError as exc:
            raise PlanError([f"{'.'.join(str(p) for p in e.get('loc', ())) or 'plan'}: "
                             f"{'unknown field' if e.get('type') == 'extra_forbidden' else e.get('msg')}"
                             .replace("Value error, ", "") for e in exc.errors()]) from None
        if plan.baseline_only and (plan.steps or plan.topk or plan.draft_tokens):
            raise PlanError(["baseline_only: runs the baseline alone; leave steps, topk and draft_tokens empty"])
        return plan

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


@dataclass(frozen=True)
class SweepConfig:
    """One configuration of the sweep: the baseline, or a speculative one."""

    baseline: bool
    steps: int | None = None
    topk: int | None = None
    draft_tokens: int | None = None

    @property
    def key(self) -> str:
        if self.baseline:
            return "baseline"
        return f"s{self.steps or 'auto'}-k{self.topk or 'auto'}-d{self.draft_tokens or 'auto'}"

    @property
    def label(self) -> str:
        if self.baseline:
            return "baseline (speculation off)"
        steps = "auto steps" if self.steps is None else f"{self.steps} step{'s' if self.steps != 1 else ''}"
        drafts = "auto draft tokens" if self.draft_tokens is None else \
            f"{self.draft_tokens} draft token{'s' if self.draft_tokens != 1 else ''}"
        return f"{steps} · top-k {self.topk or 'auto'} · {drafts}"

    def apply(self, cfg: ServerConfig) -> ServerConfig:
        """``cfg`` with this configuration's speculative settings."""
        spec = cfg.speculative
        if self.baseline:
            new = spec.model_copy(update={"algorithm": None})
        else:
            new = spec.model_copy(update={"num_steps": self.steps, "eagle_topk": self.topk,
                                          "num_draft_tokens": self.draft_tokens})
        return cfg.model_copy(update={"speculative": new})

    def to_dict(self) -> dict[str, Any]:
        return {"baseline": self.baseline, "steps": self.steps, "topk": self.topk,
                "draft_tokens": self.draft_tokens, "key": self.key, "label": self.label}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SweepConfig":
        return cls(bool(d["baseline"]), d.get("steps"), d.get("topk"), d.get("draft_tokens"))


def expand(plan: SweepPlan, server: ServerConfig) -> tuple[list[SweepConfig], list[str]]:
    """The configurations to run, in order, and notes on what was adjusted or merged."""
    notes: list[str] = []
    configs: list[SweepConfig] = []
    if plan.baseline or plan.baseline_only:
        configs.append(SweepConfig(True))
    if not plan.baseline_only:
        spec = server.speculative
        if not spec.enabled:
            raise PlanError([f"server {server.name}: speculation is off in its config (no "
                             "[server.speculative] algorithm), so there is no draft to sweep; set its algorithm "
                             "and draft in the workspace file, or run the baseline alone (baseline_only)"])
        steps = plan.steps or [spec.num_steps]
        topks = plan.topk or [spec.eagle_topk]
        drafts = plan.draft_tokens or [spec.num_draft_tokens]
        seen: set[SweepConfig] = set()
        for s in steps:
            for k in topks:
                for d in drafts:
                    if (k or 1) == 1 and s is not None and d != s + 1:
                        if d is not None and plan.draft_tokens:
                            notes.append(f"{s} steps at top-k 1: {d} draft tokens become {s + 1} "
                                         "(SGLang sets steps + 1 at top-k 1)")
                        d = s + 1
                    if s is None and (k is not None or d is not None):
                        raise PlanError([f"server {server.name}: its steps are chosen by SGLang (num_steps is "
                                         "not set), and then top-k and draft tokens must not be set either; "
                                         "give steps too"])
                    c = SweepConfig(False, s, k, d)
                    if c in seen:
                        continue
                    seen.add(c)
                    configs.append(c)
    if not configs:
        raise PlanError(["plan: no configuration to run; give steps, topk or draft_tokens, or the baseline"])
    if len(configs) > MAX_CONFIGS:
        raise PlanError([f"plan: {len(configs)} configurations; at most {MAX_CONFIGS} (each is a relaunch "
                         "and a benchmark)"])
    return configs, sorted(set(notes), key=notes.index)


def parse_int_list(text: str, field: str) -> list[int]:
    """``"3,5"`` or ``"3 5"`` -> ``[3, 5]``; anything else raises :class:`PlanError` naming ``field``."""
    out = []
    for part in text.replace(",", " ").split():
        try:
            out.append(int(part))
        except ValueError:
            raise PlanError([f"{field}: {part!r} is not a whole number"]) from None
    return out
