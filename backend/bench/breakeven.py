"""The break-even model: what a speculative round costs, and what accept_len pays for it.

From two runs of one target at one load (same concurrency and lengths, and
the same dataset unless both lengths were fixed and recorded), one without
speculation and one with:

* a plain decode step takes ``c / baseline tok/s`` (each step gives one token
  to each of the ``c`` sequences in flight; ``c = 1`` when unknown);
* a speculative round takes ``c * accept_len / speculative tok/s`` (each round
  gives ``accept_len`` tokens per sequence, the bonus token included);
* the cost ratio ``round / step`` is how many plain steps a round costs, and
  also the accept_len at which speculation breaks even;
* at another accept_len the same round would give ``c * accept_len / round`` tok/s.

The concurrency cancels out of the ratio; it only scales the step times.

Pure functions, no I/O.  :func:`explain` words the result for the page, which
shows it verbatim; :data:`ASSUMPTIONS` are the model's assumptions, shown beside it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from specdeck_types.bench import BenchResult

ASSUMPTIONS = (
    "A plain decode step and a speculative round each take a fixed time at this load, "
    "whatever number of draft tokens is accepted.",
    "A round yields accept_len tokens per sequence (the verified bonus token included); a plain step yields one.",
    "Both runs were measured at the same load (concurrency, input and output lengths), "
    "so prefill and queueing weigh the same in both.",
    "Predictions hold for this draft configuration (steps, top-k, draft tokens): changing it changes the round's cost.",
)


@dataclass(frozen=True)
class BreakEven:
    baseline_tok_s: float
    spec_tok_s: float
    accept_len: float
    concurrency: int = 1

    def __post_init__(self) -> None:
        for name in ("baseline_tok_s", "spec_tok_s", "accept_len"):
            v = getattr(self, name)
            if v is None or not math.isfinite(v) or v <= 0:
                raise ValueError(f"{name} must be a positive number, got {v!r}")
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency!r}")

    @property
    def plain_step_s(self) -> float:
        return self.concurrency / self.baseline_tok_s

    @property
    def round_s(self) -> float:
        return self.concurrency * self.accept_len / self.spec_tok_s

    @property
    def cost_ratio(self) -> float:
        """A round's cost in plain steps."""
        return self.round_s / self.plain_step_s

    @property
    def break_even_accept_len(self) -> float:
        return self.cost_ratio

    @property
    def speedup(self) -> float:
        return self.spec_tok_s / self.baseline_tok_s

    @property
    def pays(self) -> bool:
        return self.accept_len > self.break_even_accept_len

    def predicted_tok_s(self, accept_len: float) -> float:
        """Output tok/s this round would give at ``accept_len``."""
        if accept_len <= 0:
            raise ValueError(f"accept_len must be positive, got {accept_len!r}")
        return self.concurrency * accept_len / self.round_s

    def round_budget_s(self, accept_len: float) -> float:
        """The longest round that would still match the baseline at ``accept_len``."""
        return accept_len * self.plain_step_s


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def explain(m: BreakEven, *, better_accept_lens: Iterable[float] = ()) -> str:
    """The model's verdict in words (the page shows this text as it is)."""
    c = m.concurrency
    per = "" if c == 1 else f" (at concurrency {c}, each step serves {c} sequences)"
    round_expr = f"{m.accept_len:.2f} / {m.spec_tok_s:.1f} s" if c == 1 else \
        f"{c} × {m.accept_len:.2f} / {m.spec_tok_s:.1f} s"
    step_expr = f"1 / {m.baseline_tok_s:.1f} s" if c == 1 else f"{c} / {m.baseline_tok_s:.1f} s"
    text = (
        f"A speculative round took {round_expr} = {_ms(m.round_s)} against {_ms(m.plain_step_s)} "
        f"for a plain decode step ({step_expr}){per}, so a round cost {m.cost_ratio:.1f} plain steps"
    )
    be = m.break_even_accept_len
    if m.pays:
        text += (
            f" and accept_len {m.accept_len:.2f} paid for it: {m.speedup:.2f}× the baseline "
            f"({m.spec_tok_s:.1f} against {m.baseline_tok_s:.1f} tok/s). Break-even is accept_len {be:.2f}."
        )
    else:
        text += (
            f" and accept_len {m.accept_len:.2f} could not pay for it: {m.spec_tok_s:.1f} against "
            f"{m.baseline_tok_s:.1f} tok/s without speculation. Break-even is accept_len {be:.2f}. "
            f"Reaching it takes a better draft (more and closer training data raise accept_len) "
            f"or a cheaper round (fewer draft tokens or steps); a round would have to take under "
            f"{_ms(m.round_budget_s(m.accept_len))} to pay at accept_len {m.accept_len:.2f}."
        )
    for a in better_accept_lens:
        text += f" At accept_len {a:.2f} this round would give {m.predicted_tok_s(a):.1f} tok/s."
    return text


# -- pairing runs with their baseline --------------------------------------

@dataclass(frozen=True)
class Pairing:
    """A speculative run, the baseline at its load (if any), and the model (if it can be built)."""

    run: BenchResult
    baseline: BenchResult | None
    model: BreakEven | None
    reason: str = ""  # why there is no model


def _norm(name: str | None) -> str:
    """A model or dataset name as compared: no case, no separators, a path's last folder."""
    s = (name or "").strip().rstrip("/").lower()
    s = s.rsplit("/", 1)[-1]
    return "".join(c for c in s if c.isalnum())


def _same_target(a: BenchResult, b: BenchResult) -> bool:
    """Both name their target and it is the same; where either does not, the same server."""
    if a.config.target_model and b.config.target_model:
        return _norm(a.config.target_model) == _norm(b.config.target_model)
    if a.server and b.server:
        return a.server == b.server
    return False


def same_dataset(a: BenchResult, b: BenchResult) -> bool:
    """Runs whose baseline step cost compares: the same dataset ("mt-bench" is "mtbench"; two results
    that name none count as the same), or, on other datasets, the same recorded input and output
    lengths: a fixed-length load, where a plain decode step costs the same whatever the prompts say.
    Without recorded lengths (SpecForge's mtbench and humaneval answer at their own length) the
    datasets must match."""
    if _norm(a.load.dataset) == _norm(b.load.dataset):
        return True
    la, lb = a.load, b.load
    return None not in (la.input_len, la.output_len) and (la.input_len, la.output_len) == (lb.input_len, lb.output_len)


def _newest(results: list[BenchResult]) -> BenchResult:
    return max(results, key=lambda r: (r.started_at or r.created_at or 0.0, r.id or 0))


def _no_baseline_reason(run: BenchResult, baselines: list[BenchResult], unknown: int) -> str:
    """Why no baseline pairs with ``run``: no baseline of its target at all, baselines only on other
    datasets, or none at its load; and how many stored results do not say whether they speculated."""
    target = run.config.target_model or run.server or "this target"
    tail = (f"; {unknown} stored result{'s' if unknown != 1 else ''} do not record whether they speculated "
            "(set it when importing)") if unknown else ""
    same_target = [b for b in baselines if _same_target(b, run)]
    if not same_target:
        return f"no run without speculation of {target} is stored{tail}"
    if not any(same_dataset(b, run) for b in same_target):
        others = sorted({b.load.dataset or "no dataset recorded" for b in same_target})
        return (f"the runs without speculation of {target} are on other datasets ({', '.join(others)}), "
                f"this run is on {run.load.dataset or 'no dataset recorded'}{tail}")
    c = run.load.concurrency
    return f"no baseline of this server at concurrency {c if c is not None else 'unknown'} and the same lengths{tail}"


def pair_with_baselines(results: Iterable[BenchResult]) -> list[Pairing]:
    """For each speculative run, the newest baseline of the same target, dataset and load
    (concurrency, input and output lengths), and why there is none where none is."""
    results = list(results)
    baselines = [r for r in results if r.is_baseline and r.results.output_tok_s]
    unknown = sum(1 for r in results if r.speculative is None)
    out: list[Pairing] = []
    for run in results:
        if run.speculative is not True:
            continue
        same = [b for b in baselines if _same_target(b, run) and same_dataset(b, run)
                and b.load.key() == run.load.key()]
        base = _newest(same) if same else None
        acc = run.accept_len
        tok = run.results.output_tok_s
        if base is None:
            out.append(Pairing(run, None, None, _no_baseline_reason(run, baselines, unknown)))
        elif acc is None:
            out.append(Pairing(run, base, None, "accept_len of this run was not recorded"))
        elif not tok:
            out.append(Pairing(run, base, None, "tok/s of this run was not recorded"))
        else:
            try:
                model = BreakEven(base.results.output_tok_s, tok, acc, run.load.concurrency or 1)
            except ValueError as exc:
                out.append(Pairing(run, base, None, f"its figures cannot be modelled: {exc}"))
                continue
            out.append(Pairing(run, base, model))
    return out
