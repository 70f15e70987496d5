"""Deploying a checkpoint: what to launch, at which load to measure it, and how it compares.

The guided flow (run by :mod:`backend.flows.deploy_job` as a supervised process) takes one checkpoint
through these steps, each recorded in the job's state file with its outcome:

1. ``inspect``    the checkpoint folder, without loading weights (a Gen-3 runtime checkpoint stops here);
2. ``preflight``  against the serving server's target: fc width = aux layers × target hidden size, the
                  vocab mapping, the architecture, steps / top-k / draft tokens (errors stop here, the
                  server untouched);
3. ``load``       the load to measure at: the stored baseline's (its concurrency and lengths), or the
                  one given;
4. ``baseline``   only when asked and none is stored at that load: the server without speculation, measured;
5. ``relaunch``   the server with the checkpoint as its EAGLE3 draft, waited for until ready;
6. ``benchmark``  at that load, each result stored labelled with the checkpoint (run, epoch, step);
7. ``compare``    the speedup against the baseline at the same load, the break-even accept_len
                  (:mod:`backend.bench.breakeven`), beside the previous draft's row;
8. ``restore``    the server's previous config, after a failure, a stop, or when asked to.

This module holds the pure parts: the state file's form, the configs, the load and the comparison.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

from backend.bench.breakeven import BreakEven, explain
from backend.sglang.config import ServerConfig
from backend.supervisor.runfiles import read_json, write_json_atomic
from specdeck_types.bench import BenchResult

STEPS = ("inspect", "preflight", "load", "baseline", "relaunch", "benchmark", "compare", "restore")
STEP_TITLES = {
    "inspect": "Inspect the checkpoint",
    "preflight": "Preflight against the server's target",
    "load": "Choose the load",
    "baseline": "Measure the baseline",
    "relaunch": "Relaunch the server with the checkpoint",
    "benchmark": "Benchmark the checkpoint at that load",
    "compare": "Compare with the baseline and the previous draft",
    "restore": "Restore the previous server",
}
PENDING, RUNNING, DONE, FAILED, SKIPPED = "pending", "running", "done", "failed", "skipped"
STOPPED = "stopped"
KEEP, RESTORE = "keep", "restore"
DEFAULT_STEPS, DEFAULT_TOPK = 3, 1
DEFAULT_NUM_PROMPTS, DEFAULT_INPUT_LEN, DEFAULT_OUTPUT_LEN = 200, 1024, 512


class DeployError(Exception):
    """A step that cannot go on; ``str(e)`` says why, for the user."""

    def __init__(self, step: str, message: str):
        super().__init__(message)
        self.step = step


# -- what was asked -------------------------------------------------------------------------------

@dataclass(frozen=True)
class DeployRequest:
    checkpoint: str
    server: str
    num_steps: int | None = None  # None: the server's own, else 3
    eagle_topk: int | None = None
    num_draft_tokens: int | None = None
    concurrency: tuple[int, ...] = ()  # empty: the stored baseline's
    num_prompts: int | None = None  # None: the baseline's, else 200
    input_len: int | None = None
    output_len: int | None = None
    measure_baseline: bool = False  # measure a missing baseline first (the server without speculation)
    after: str = KEEP  # keep the checkpoint on the server, or restore the previous config
    mode: str = "auto"  # benchmark client: auto | builtin | sglang
    run_name: str | None = None  # the training run, for the label (default: the checkpoint's parent folder)
    ready_timeout_s: float = 900.0  # for the server to come up with the checkpoint (or without speculation)
    restore_timeout_s: float = 900.0  # for it to come back up with its previous config

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["concurrency"] = list(self.concurrency)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "DeployRequest":
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        known["concurrency"] = tuple(known.get("concurrency") or ())
        return cls(**known)


def speculative_values(cfg: ServerConfig, req: DeployRequest) -> tuple[int, int, int]:
    """(steps, top-k, draft tokens): the request's, else the server's, else 3, 1 and steps + 1."""
    sp = cfg.speculative
    steps = req.num_steps or sp.num_steps or DEFAULT_STEPS
    topk = req.eagle_topk or sp.eagle_topk or DEFAULT_TOPK
    ndt = req.num_draft_tokens or sp.num_draft_tokens or steps + 1
    return steps, topk, ndt


def deploy_config(cfg: ServerConfig, checkpoint: str | Path, steps: int, topk: int, ndt: int) -> ServerConfig:
    """``cfg`` serving ``checkpoint`` as its EAGLE3 draft; everything else as it was."""
    spec = cfg.speculative.model_copy(update=dict(algorithm="EAGLE3", draft_model_path=str(checkpoint),
                                                  num_steps=steps, eagle_topk=topk, num_draft_tokens=ndt))
    return cfg.model_copy(update={"speculative": spec})


def baseline_config(cfg: ServerConfig) -> ServerConfig:
    """``cfg`` without speculation (the baseline of the same target)."""
    spec = cfg.speculative.model_copy(update=dict(algorithm=None, draft_model_path=None, num_steps=None,
                                                  eagle_topk=None, num_draft_tokens=None))
    return cfg.model_copy(update={"speculative": spec})


def checkpoint_label(checkpoint: str | Path, run_name: str | None, epoch: int | None, step: int | None) -> str:
    """``checkpoint RUN/NAME (epoch E, step S)``: what the stored result is labelled with."""
    p = Path(checkpoint)
    run = run_name or p.parent.name or "?"
    where = ", ".join(f"{k} {v}" for k, v in (("epoch", epoch), ("step", step)) if v is not None)
    return f"checkpoint {run}/{p.name}" + (f" ({where})" if where else "")


# -- the load -------------------------------------------------------------------------------------

def _same_target(r: BenchResult, server: str, target_model: str | None) -> bool:
    if r.server:
        return r.server == server
    return bool(target_model) and r.config.target_model == target_model


def _newest_first(results: Iterable[BenchResult]) -> list[BenchResult]:
    return sorted(results, key=lambda r: (r.started_at or r.created_at or 0.0, r.id or 0), reverse=True)


def stored_baselines(results: Iterable[BenchResult], server: str, target_model: str | None) -> list[BenchResult]:
    """Baselines (runs without speculation, with a tok/s) of ``server`` or its target, newest first."""
    return _newest_first(r for r in results if r.is_baseline and r.results.output_tok_s
                         and _same_target(r, server, target_model))


@dataclass(frozen=True)
class PlannedLoad:
    concurrency: int
    num_prompts: int
    input_len: int
    output_len: int
    baseline_id: int | None  # the stored baseline at this load, if any

    def key(self) -> tuple[int, int, int]:
        return (self.concurrency, self.input_len, self.output_len)


def plan_loads(req: DeployRequest, baselines: list[BenchResult]) -> tuple[list[PlannedLoad], str]:
    """The loads to measure at and a sentence saying where they come from.

    Without an explicit concurrency the newest stored baseline's load is used (its lengths too);
    raises :class:`DeployError` (step ``load``) when there is none, or when it does not record
    what is needed to offer the same load again."""
    def baseline_at(c: int, i: int, o: int) -> BenchResult | None:
        return next((b for b in baselines if b.load.key() == (c, i, o)), None)

    if req.concurrency:
        ref = baselines[0] if baselines else None
        i = req.input_len or (ref.load.input_len if ref else None) or DEFAULT_INPUT_LEN
        o = req.output_len or (ref.load.output_len if ref else None) or DEFAULT_OUTPUT_LEN
        n = req.num_prompts or (ref.load.num_prompts if ref else None) or DEFAULT_NUM_PROMPTS
        loads = []
        for c in req.concurrency:
            b = baseline_at(c, i, o)
            loads.append(PlannedLoad(c, n, i, o, b.id if b else None))
        return loads, f"the load given: concurrency {', '.join(map(str, req.concurrency))}, {n} prompts of {i}/{o} tokens"
    if not baselines:
        raise DeployError("load", f"No baseline of server {req.server} is stored, so there is no load to "
                                  "compare at. Give the load (concurrency, input and output lengths) and measure "
                                  "the baseline first (--measure-baseline), or benchmark the server without "
                                  "speculation (bench run) and deploy again.")
    b = baselines[0]
    c, i, o = b.load.concurrency, req.input_len or b.load.input_len, req.output_len or b.load.output_len
    missing = [name for name, v in (("concurrency", c), ("input length", i), ("output length", o)) if v is None]
    if missing:
        raise DeployError("load", f"The newest baseline of {req.server} (result #{b.id}) does not record its "
                                  f"{' and '.join(missing)}, so its load cannot be offered again. Give the load "
                                  "explicitly (and --measure-baseline to measure the baseline at it).")
    n = req.num_prompts or b.load.num_prompts or DEFAULT_NUM_PROMPTS
    found = baseline_at(c, i, o)
    return [PlannedLoad(c, n, i, o, found.id if found else None)], \
        f"the baseline's load (result #{b.id}): concurrency {c}, {n} prompts of {i}/{o} tokens"


# -- the comparison -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Row:
    """One load's outcome: the new result, the baseline and the previous draft at the same load."""

    concurrency: int
    input_len: int | None
    output_len: int | None
    result_id: int | None
    tok_s: float | None
    accept_len: float | None
    baseline_id: int | None = None
    baseline_tok_s: float | None = None
    previous_id: int | None = None
    previous_draft: str | None = None
    previous_tok_s: float | None = None
    previous_accept_len: float | None = None
    previous_speedup: float | None = None
    previous_break_even_accept_len: float | None = None
    speedup: float | None = None
    break_even_accept_len: float | None = None
    pays: bool | None = None
    explanation: str = ""
    reason: str = ""  # why a figure is missing


def compare(new: BenchResult, stored: Iterable[BenchResult], checkpoint: str | Path) -> Row:
    """``new`` (stored, with its id) against the newest baseline of the same server at the same load and
    the newest speculative run there of another draft (the previous draft), stored before it."""
    stored = [r for r in stored if r.id != new.id]
    key = new.load.key()
    server, target = new.server or "", new.config.target_model
    same_load = [r for r in stored if r.load.key() == key and _same_target(r, server, target)]
    base = next(iter(stored_baselines(same_load, server, target)), None)
    ckpt = str(Path(checkpoint))
    others = _newest_first(r for r in same_load if r.speculative is True and r.results.output_tok_s
                           and (r.config.draft_model or "") != ckpt)
    prev = others[0] if others else None
    tok, acc = new.results.output_tok_s, new.accept_len
    row = dict(concurrency=new.load.concurrency or 1, input_len=new.load.input_len, output_len=new.load.output_len,
               result_id=new.id, tok_s=tok, accept_len=acc)
    if prev is not None:
        row.update(previous_id=prev.id, previous_draft=prev.config.draft_model, previous_tok_s=prev.results.output_tok_s,
                   previous_accept_len=prev.accept_len)
    if base is None:
        return Row(**row, reason=f"no baseline of {server or target} is stored at concurrency "
                                 f"{new.load.concurrency} and {new.load.input_len}/{new.load.output_len} tokens: "
                                 "measure it (deploy with --measure-baseline) to get the speedup")
    bt = base.results.output_tok_s
    row.update(baseline_id=base.id, baseline_tok_s=bt)
    if prev is not None and prev.results.output_tok_s:
        row["previous_speedup"] = prev.results.output_tok_s / bt
        if prev.accept_len:
            row["previous_break_even_accept_len"] = BreakEven(bt, prev.results.output_tok_s, prev.accept_len,
                                                              new.load.concurrency or 1).break_even_accept_len
    if not tok:
        return Row(**row, reason="the benchmark recorded no tok/s")
    row["speedup"] = tok / bt
    if acc is None:
        return Row(**row, reason="the benchmark recorded no accept_len, so the break-even cannot be computed")
    m = BreakEven(bt, tok, acc, new.load.concurrency or 1)
    return Row(**row, break_even_accept_len=m.break_even_accept_len, pays=m.pays, explanation=explain(m))


# -- the state file -------------------------------------------------------------------------------

@dataclass
class StepState:
    name: str
    status: str = PENDING
    message: str = ""
    started_at: float | None = None
    ended_at: float | None = None

    @property
    def title(self) -> str:
        return STEP_TITLES.get(self.name, self.name)


@dataclass
class DeployState:
    """The job's durable state: rewritten whole (temporary file, then rename) at every change."""

    request: dict[str, Any]
    state: str = RUNNING  # running, then done, failed or stopped
    steps: list[StepState] = field(default_factory=lambda: [StepState(n) for n in STEPS])
    label: str = ""
    checkpoint_info: dict[str, Any] = field(default_factory=dict)
    findings: list[dict[str, Any]] = field(default_factory=list)
    load_source: str = ""
    loads: list[dict[str, Any]] = field(default_factory=list)
    detail: str = ""  # what the current step is doing now
    done: int = 0  # requests done in the current benchmark
    total: int = 0
    rows: list[dict[str, Any]] = field(default_factory=list)
    failed_step: str | None = None
    error: str | None = None
    restore: str = ""  # how the server was left: kept / restored / restore failed, in words
    server_left: str = ""  # "checkpoint", "previous", "unknown"
    started_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    pid: int | None = None

    def step(self, name: str) -> StepState:
        return next(s for s in self.steps if s.name == name)

    @property
    def current(self) -> StepState | None:
        return next((s for s in self.steps if s.status == RUNNING), None)

    @property
    def finished(self) -> bool:
        return self.state != RUNNING

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "DeployState":
        known = {k: v for k, v in d.items() if k in cls.__dataclass_fields__}
        known["steps"] = [StepState(**{k: v for k, v in s.items() if k in StepState.__dataclass_fields__})
                          for s in known.get("steps") or []]
        return cls(**known)

    def row_objects(self) -> list[Row]:
        return [Row(**{k: v for k, v in r.items() if k in Row.__dataclass_fields__}) for r in self.rows]


def write_state(path: Path, st: DeployState) -> None:
    st.updated_at = time.time()
    write_json_atomic(Path(path), st.to_dict())


def read_state(path: str | Path) -> DeployState | None:
    """The job's state, or None when the file is not there (yet) or is not a deploy state."""
    d = read_json(Path(path))
    if not d or "request" not in d:
        return None
    try:
        return DeployState.from_dict(d)
    except (TypeError, ValueError):
        return None
