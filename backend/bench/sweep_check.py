"""The sweep checks the break-even model: predicted tok/s from the measured accept_len against measured tok/s.

The break-even model (:mod:`backend.bench.breakeven`) measures a speculative round's cost in
plain decode steps from one run and its baseline; fed that same run's accept_len it gives back
that run's tok/s by construction.  A sweep measures several draft configurations at one load,
so the model can be tested on a configuration it has not seen:

* each configuration's own round cost ``r = c * accept_len / tok/s`` over the plain step
  ``c / baseline tok/s`` (the model's cost ratio, which is also its break-even accept_len);
* the round cost of configuration *i* predicted from the *other* configurations at that
  load, as one plain step plus a cost per draft forward (steps) and per extra verified token
  (draft tokens - 1), fitted by least squares through the others' measured costs (with a
  single cost per step when the others cannot tell the two apart, as at top-k 1 where the
  draft tokens are always steps + 1);
* predicted tok/s = baseline tok/s x measured accept_len / predicted cost ratio, against the
  measured tok/s.

Pure functions over plain dicts (the sweep's state file rows); no I/O.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Iterable

from backend.bench.breakeven import BreakEven


@dataclass(frozen=True)
class Measured:
    """One speculative configuration measured at one load, with the baseline at that load."""

    key: str
    label: str
    steps: int
    draft_tokens: int
    concurrency: int
    tok_s: float
    accept_len: float
    baseline_tok_s: float

    @property
    def cost_ratio(self) -> float:
        return BreakEven(self.baseline_tok_s, self.tok_s, self.accept_len, self.concurrency).cost_ratio


@dataclass(frozen=True)
class CheckRow:
    key: str
    label: str
    concurrency: int
    baseline_tok_s: float | None
    measured_tok_s: float | None
    accept_len: float | None
    cost_ratio: float | None  # this run's round in plain steps = its break-even accept_len
    pays: bool | None  # faster than the baseline at this load
    predicted_tok_s: float | None  # from the other configurations' round costs
    error_pct: float | None  # (predicted - measured) / measured x 100
    basis: str  # how the prediction was made, or why there is none

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _fit(points: list[Measured]) -> tuple[float, float, str] | None:
    """(cost per draft forward, cost per extra verified token, words) through ``points``, or None."""
    xs = [(p.steps, p.draft_tokens - 1, p.cost_ratio - 1.0) for p in points]
    s11 = sum(a * a for a, _, _ in xs)
    s22 = sum(b * b for _, b, _ in xs)
    s12 = sum(a * b for a, b, _ in xs)
    y1 = sum(a * y for a, _, y in xs)
    y2 = sum(b * y for _, b, y in xs)
    det = s11 * s22 - s12 * s12
    if len(points) >= 2 and det > 1e-9 * max(1.0, s11 * s22):
        a = (y1 * s22 - y2 * s12) / det
        b = (y2 * s11 - y1 * s12) / det
        return a, b, f"round = 1 + {a:.3f} x steps + {b:.3f} x (draft tokens - 1) plain steps"
    # the others cannot separate steps from draft tokens: one cost per step (draft tokens follow)
    t = [(a + b, y) for a, b, y in xs]
    den = sum(x * x for x, _ in t)
    if den <= 0:
        return None
    k = sum(x * y for x, y in t) / den
    return k, k, f"round = 1 + {k:.3f} x (steps + draft tokens - 1) plain steps"


def check(rows: Iterable[Measured]) -> list[CheckRow]:
    """One :class:`CheckRow` per measured speculative configuration and load."""
    rows = list(rows)
    out: list[CheckRow] = []
    for m in rows:
        others = [o for o in rows if o.concurrency == m.concurrency and o.key != m.key]
        fit = _fit(others) if others else None
        pred = err = None
        if fit is None:
            basis = "needs another speculative configuration measured at this load"
        else:
            a, b, words = fit
            cost = 1.0 + a * m.steps + b * (m.draft_tokens - 1)
            if cost <= 0 or not math.isfinite(cost):
                basis = f"the fit of the other configurations gives no usable cost ({words})"
            else:
                pred = m.baseline_tok_s * m.accept_len / cost
                err = (pred - m.tok_s) / m.tok_s * 100.0
                names = ", ".join(o.label for o in others)
                basis = f"{words}, fitted on {names}; this round predicted at {cost:.2f} plain steps"
        out.append(CheckRow(m.key, m.label, m.concurrency, m.baseline_tok_s, m.tok_s, m.accept_len,
                            m.cost_ratio, m.tok_s > m.baseline_tok_s, pred, err, basis))
    return out


def check_sweep(configs: list[dict[str, Any]], results: list[dict[str, Any]],
                outside_baselines: dict[int, float] | None = None) -> list[dict[str, Any]]:
    """The check for a sweep's state: ``configs`` (SweepConfig dicts, with the steps and draft
    tokens the server really ran) and ``results`` (one summary per stored result).  The
    baseline at each concurrency is the sweep's own, else ``outside_baselines``."""
    by_key = {c["key"]: c for c in configs}
    baselines = dict(outside_baselines or {})
    for r in results:
        if by_key.get(r["config"], {}).get("baseline") and r.get("output_tok_s"):
            baselines[r["concurrency"]] = r["output_tok_s"]
    measured: list[Measured] = []
    missing: list[CheckRow] = []
    for r in results:
        c = by_key.get(r["config"])
        if c is None or c.get("baseline"):
            continue
        steps = r.get("num_steps") or c.get("steps")
        drafts = r.get("num_draft_tokens") or c.get("draft_tokens") or ((steps + 1) if steps else None)
        base = baselines.get(r["concurrency"])
        tok, acc = r.get("output_tok_s"), r.get("accept_len")
        why = ("no baseline at this concurrency" if base is None else "accept_len not measured" if acc is None
               else "tok/s not measured" if not tok else "steps not known" if not steps else None)
        if why:
            missing.append(CheckRow(c["key"], c["label"], r["concurrency"], base, tok, acc, None,
                                    None if base is None or not tok else tok > base, None, None, why))
            continue
        measured.append(Measured(c["key"], c["label"], int(steps), int(drafts), int(r["concurrency"]),
                                 float(tok), float(acc), float(base)))
    rows = check(measured) + missing
    order = {c["key"]: i for i, c in enumerate(configs)}
    rows.sort(key=lambda x: (order.get(x.key, 0), x.concurrency))
    return [x.to_dict() for x in rows]


def describe_row(row: dict[str, Any]) -> str:
    """One line for the command line."""
    def f(v, d):
        return "N/A" if v is None else f"{v:.{d}f}"

    text = (f"{row['label']} at concurrency {row['concurrency']}: measured {f(row['measured_tok_s'], 1)} tok/s "
            f"at accept_len {f(row['accept_len'], 2)} against baseline {f(row['baseline_tok_s'], 1)} tok/s")
    if row.get("cost_ratio") is not None:
        text += f"; a round cost {row['cost_ratio']:.2f} plain steps (break-even accept_len {row['cost_ratio']:.2f})"
    if row.get("predicted_tok_s") is not None:
        e = row["error_pct"]
        text += f"; the model predicted {row['predicted_tok_s']:.1f} tok/s ({e:+.{1 if abs(e) < 10 else 0}f} %)"
    else:
        text += f"; no prediction: {row['basis']}"
    return text
