"""One benchmark result: the server's configuration, the load, and the figures.

A result comes from a run Specdeck drove (``source == "run"``) or from a file
it imported (``source == "import:<format>"``, with the file and line it came
from).  Every figure is optional: a missing value is ``None``, never 0.

``to_dict`` gives a JSON-safe form (infinite request rate as ``"inf"``, NaN as
``None``); ``from_dict`` reads it back, and also accepts plain floats.  It reads
whatever a store holds without raising: each field is taken as its declared type
(a number written as ``"inf"`` is a float again, a number where text belongs or
text where a number belongs is ``None``), so one odd row never breaks a listing.

``tool`` names the program that wrote an imported result (``"vLLM bench
serve"``, ``"SGLang bench_serving"``, ``"SpecForge benchmarks/bench_eagle3.py"``);
``None`` when the file did not show which.  A result stored before the field
existed reads its tool from its format (:data:`TOOL_OF_FORMAT`).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

RUN = "run"
IMPORT_PREFIX = "import:"

# What a record writes for "no speculation".  An absent algorithm (None) means
# *unknown* (a file that does not say), not a baseline.
NO_SPECULATION = "NONE"
_NO_SPECULATION_WORDS = {"NONE", "NULL", "OFF", "BASELINE", "DISABLED", "NO", "FALSE"}
NO_SPECULATION_WORDS = frozenset(_NO_SPECULATION_WORDS)

# What a record writes when the report shows that speculation was on (an accept
# length above 1, a draft's verify count) but not which algorithm.
UNNAMED_SPECULATION = "speculative (unnamed)"

# The tool each import format comes from, for results stored without a tool.
TOOL_OF_FORMAT = {
    "bench_serving_jsonl": "SGLang bench_serving",
    "bench_serving_report": "SGLang bench_serving",
    "vllm_bench_serve_json": "vLLM bench serve",
    "vllm_bench_serve_report": "vLLM bench serve",
    "one_batch_server_jsonl": "SGLang bench_one_batch_server",
    "one_batch_server_report": "SGLang bench_one_batch_server",
    "one_batch_server_table": "SGLang bench_one_batch_server",
    "bench_speculative_jsonl": "SGLang bench_speculative (or SpecForge's copy of it)",
    "specforge_json": "SpecForge specforge benchmark",
    "specforge_report": "SpecForge specforge benchmark",
    "specforge_bench_eagle3": "SpecForge benchmarks/bench_eagle3.py",
    "specforge_speedup_jsonl": "SpecForge benchmarks/bench_model_speedup.py",
    "specforge_eval_report": "SpecForge benchmarks (run_*.py / bench_eagle3.py)",
    "csv": "hand-entered (CSV)",
}


@dataclass(frozen=True)
class Percentiles:
    """Latency distribution in milliseconds."""

    mean: float | None = None
    median: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None

    def is_empty(self) -> bool:
        return all(getattr(self, f.name) is None for f in fields(self))


@dataclass(frozen=True)
class BenchConfig:
    """The server's configuration while the benchmark ran."""

    target_model: str | None = None
    draft_model: str | None = None
    algorithm: str | None = None  # e.g. "EAGLE3"; "NONE" = no speculation; None = not known
    num_steps: int | None = None
    topk: int | None = None
    num_draft_tokens: int | None = None
    cuda_graph: bool | None = None
    tp: int | None = None
    sglang_version: str | None = None

    @property
    def speculative(self) -> bool | None:
        """True with a speculative algorithm, False for a run without one, None when not known."""
        if self.algorithm is None or not self.algorithm.strip():
            return None
        return self.algorithm.strip().upper() not in _NO_SPECULATION_WORDS


@dataclass(frozen=True)
class BenchLoad:
    """The load the benchmark offered."""

    concurrency: int | None = None
    num_prompts: int | None = None
    input_len: int | None = None
    output_len: int | None = None
    dataset: str | None = None
    request_rate: float | None = None  # requests/s; math.inf = all at once

    def key(self) -> tuple[int | None, int | None, int | None]:
        """What "the same load" means: concurrency and lengths."""
        return (self.concurrency, self.input_len, self.output_len)


@dataclass(frozen=True)
class BenchFigures:
    """What the benchmark measured."""

    output_tok_s: float | None = None
    total_tok_s: float | None = None
    request_s: float | None = None
    ttft_ms: Percentiles = field(default_factory=Percentiles)
    tpot_ms: Percentiles = field(default_factory=Percentiles)
    itl_ms: Percentiles = field(default_factory=Percentiles)
    e2e_ms: Percentiles = field(default_factory=Percentiles)
    accept_len: float | None = None  # windowed: this run only
    accept_len_lifetime: float | None = None  # the server's lifetime average (bench_serving's field)
    completed: int | None = None
    duration_s: float | None = None


@dataclass(frozen=True)
class BenchResult:
    """One benchmark result, as stored and shown."""

    source: str  # "run" or "import:<format>"
    config: BenchConfig = field(default_factory=BenchConfig)
    load: BenchLoad = field(default_factory=BenchLoad)
    results: BenchFigures = field(default_factory=BenchFigures)
    server: str | None = None
    source_file: str | None = None
    source_line: int | None = None
    created_at: float | None = None  # when Specdeck stored it
    started_at: float | None = None
    ended_at: float | None = None
    label: str | None = None  # a free-text tag (bench_serving's --tag, a CSV note)
    # why the figures cannot be trusted (the server restarted while it was measured); None: nothing known against them
    invalid: str | None = None
    raw: str = ""  # the original record or text, for audit
    id: int | None = None
    tool: str | None = None  # the program that wrote an imported result; None: not shown by the file

    @property
    def tool_name(self) -> str | None:
        """The tool, or for a result stored without one, the tool of its format (``Specdeck`` for a run here)."""
        if self.tool:
            return self.tool
        if self.source == RUN:
            return "Specdeck"
        return TOOL_OF_FORMAT.get(self.format or "")

    @property
    def imported(self) -> bool:
        return self.source.startswith(IMPORT_PREFIX)

    @property
    def format(self) -> str | None:
        return self.source[len(IMPORT_PREFIX):] if self.imported else None

    @property
    def speculative(self) -> bool | None:
        return self.config.speculative

    @property
    def is_baseline(self) -> bool:
        """A run known to be without speculation."""
        return self.config.speculative is False

    @property
    def accept_len(self) -> float | None:
        """The run's accept length, falling back to the lifetime one when the run's is unknown."""
        r = self.results
        return r.accept_len if r.accept_len is not None else r.accept_len_lifetime

    def with_id(self, id: int, created_at: float | None = None) -> "BenchResult":
        return replace(self, id=id, created_at=created_at if created_at is not None else self.created_at)

    def to_dict(self) -> dict[str, Any]:
        return _json_safe(asdict(self))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "BenchResult":
        d = d if isinstance(d, dict) else {}
        figures = _known(BenchFigures, _dict(d.get("results")))
        for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            figures[name] = Percentiles(**_known(Percentiles, _dict(_dict(d.get("results")).get(name))))
        top = _known(cls, d)
        top.update(
            config=BenchConfig(**_known(BenchConfig, _dict(d.get("config")))),
            load=BenchLoad(**_known(BenchLoad, _dict(d.get("load")))),
            results=BenchFigures(**figures),
        )
        if not isinstance(top.get("source"), str) or not top["source"]:
            top["source"] = IMPORT_PREFIX + "unknown"
        if top.get("raw") is None:
            top["raw"] = ""
        return cls(**top)


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _as(kind: str, v: Any) -> Any:
    """``v`` as the declared type ``kind`` (its annotation), or None where it is not one."""
    if v is None:
        return None
    if "float" in kind:
        if isinstance(v, bool):
            return None
        if isinstance(v, (int, float)):
            try:
                return float(v)
            except OverflowError:  # an integer past the float range
                return None
        if isinstance(v, str) and v.strip().lower() in ("inf", "+inf", "-inf", "infinity", "-infinity", "nan"):
            return float(v.strip().lower().replace("infinity", "inf"))
        return None
    if "int" in kind:
        if isinstance(v, bool):
            return None
        if isinstance(v, int):
            return v
        if isinstance(v, float) and math.isfinite(v) and v == int(v):
            return int(v)
        return None
    if "bool" in kind:
        return v if isinstance(v, bool) else None
    if "str" in kind:
        return v if isinstance(v, str) else None
    return v


def _known(cls: type, d: dict[str, Any]) -> dict[str, Any]:
    kinds = {f.name: str(f.type) for f in fields(cls)}
    out: dict[str, Any] = {}
    for k, v in d.items():
        kind = kinds.get(k)
        if kind is None or kind in ("BenchConfig", "BenchLoad", "BenchFigures", "Percentiles"):
            continue
        out[k] = _as(kind, v)
    return out


def _json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
    return value
