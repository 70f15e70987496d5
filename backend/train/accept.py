"""The accept length a draft should reach when served, predicted from its per-position acceptance.

With chain drafting, position ``i`` is only verified when positions ``0 … i-1`` were accepted, so with
``a_i`` the acceptance at TTT position ``i`` the expected tokens per verify step are

    τ = 1 + a0 + a0·a1 + a0·a1·a2 + …

the ``1`` being the bonus token every verification yields (SGLang's ``accept len`` counts it;
SpecForge's own ``eval/simulated_acc_len`` does not, so a served accept length is ≈ 1 + that figure).
This is a prediction, stated as one: it treats each ``a_i`` as the chance of acceptance given that the
earlier positions were accepted, while SpecForge measures ``a_i`` over all tokens of the training-time
test, and training metrics are known not to match serving exactly (SpecForge#365, #533).

Which metric is ``a_i`` (reference §2.5):

* greedy serving (temperature 0): ``acc_i``, the share of tokens where the draft's argmax equals the
  target's token at TTT position ``i`` — printed by every generation (Gen-1 ``Train/Eval Epoch … Acc``,
  Gen-2 ``Eval - Step … Acc``, Gen-3 ``acc_{i}``);
* sampling (temperature > 0): ``acceptance_rate_i``, the expected acceptance ``Σ min(p_target, p_draft)``
  of speculative sampling — printed by Gen-2 since 2026-03 and by Gen-3; Gen-1 and Gen-2 v0.2.0 have only
  ``acc_i``, which is then used and said so.

With ``num_steps`` draft steps only the first ``num_steps`` positions can be accepted, so the prediction
is capped there (SGLang chain drafting with 3 steps cannot exceed 4).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from backend.train.logparse import TrainRecord

FORMULA = "1 + a0 + a0·a1 + a0·a1·a2 + …"


def predicted_accept_length(rates: Sequence[float], num_steps: int | None = None) -> float:
    """``1 + a0 + a0·a1 + …`` over ``rates`` (the first ``num_steps`` of them when given)."""
    if num_steps is not None:
        if num_steps < 0:
            raise ValueError(f"num_steps must be 0 or more, got {num_steps}")
        rates = rates[:num_steps]
    total, run = 1.0, 1.0
    for i, a in enumerate(rates):
        if not 0.0 <= a <= 1.0:
            raise ValueError(f"acceptance at position {i} is {a}, outside 0..1")
        run *= a
        total += run
    return total


def metric_for(generation: int | None, temperature: float = 0.0, *,
               seen: Iterable[str] = ()) -> tuple[str, str]:
    """(metric base name, why) to use as ``a_i`` for a run of ``generation`` served at ``temperature``.

    ``seen``: metric names the run's log actually has; sampling falls back to ``acc`` when the log has
    no ``acceptance_rate_{i}`` (Gen-1, Gen-2 v0.2.0)."""
    seen = list(seen)
    if temperature <= 0:
        return "acc", "greedy serving accepts a draft token when it is the target's argmax: acc_i"
    has_rate = any(name.startswith("acceptance_rate_") for name in seen)
    if has_rate or (generation == 3 and not seen):
        return "acceptance_rate", "sampling accepts with probability Σ min(p_target, p_draft): acceptance_rate_i"
    gen = f"Gen-{generation}" if generation else "this run"
    return "acc", f"{gen} logs no acceptance_rate_i; acc_i (greedy acceptance) is used instead"


@dataclass(frozen=True)
class Prediction:
    step: int | None
    epoch: int | None
    split: str | None
    metric: str
    rates: tuple[float, ...]  # a_0 … a_{k-1}, contiguous from position 0
    accept_length: float

    @property
    def positions(self) -> int:
        return len(self.rates)


def predictions(records: Iterable[TrainRecord], metric: str = "acc", *, split: str | None = "train",
                num_steps: int | None = None, min_positions: int = 1) -> list[Prediction]:
    """The predicted accept length at every step (epoch for Gen-1) where the log gives ``{metric}_0``.

    Per-position values of one step may come from one record (Gen-3) or one line each (Gen-1, Gen-2);
    they are gathered by (split, step, epoch).  Positions are used from 0 up to the first one missing —
    a missing position is unknown, not 0 — so ``rates`` may be shorter than the TTT length."""
    groups: dict[tuple, dict[int, float]] = {}
    order: list[tuple] = []
    prefix = metric + "_"
    for r in records:
        if r.kind != "metrics" or (split is not None and r.split != split):
            continue
        if r.step is None and r.epoch is None:
            continue
        key = (r.split, r.step, r.epoch if r.step is None else None)
        for name, value in r.metrics.items():
            if not name.startswith(prefix):
                continue
            tail = name[len(prefix):]
            if not tail.isdigit():
                continue
            if key not in groups:
                groups[key] = {}
                order.append(key)
            groups[key][int(tail)] = value
    out: list[Prediction] = []
    for key in order:
        pos = groups[key]
        rates: list[float] = []
        while len(rates) in pos:
            rates.append(pos[len(rates)])
        if len(rates) < min_positions:
            continue
        sp, step, epoch = key
        out.append(Prediction(step, epoch, sp, metric, tuple(rates), predicted_accept_length(rates, num_steps)))
    return out

