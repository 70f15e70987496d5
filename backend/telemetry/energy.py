"""Energy from NVML's total energy counter (``nvmlDeviceGetTotalEnergyConsumption``: mJ since the driver
was loaded, Volta and newer).

The sampler reads the counter of every GPU every few seconds (:meth:`NvmlAdapter.read_energy`,
``energy_log.py``) and keeps it at full rate for the last hour, and in the stored minute buckets, whose min
and max are the bucket's first and last reading while the counter only grows.  A GPU's energy
over a span is then the counter's rise over it: ``counter(end) - counter(start)``, read as the sum of the
rises between neighbouring readings, so that

* a counter that goes down (the driver was reloaded, the GPU reset) counts nothing for the step where it
  fell, and the readings after it go on from the new value: the step is left uncovered, never negative;
* a step longer than ``max_gap_s`` (the dashboard was down, readings are missing) is left uncovered;
* a GPU whose counter is not supported has no readings at all: it is covered nowhere, and the caller
  falls back to integrating the power readings (``backend.flows.cost``).

A step that straddles the span's edge counts in proportion to the part inside.  :func:`rise` gives the
joules and the seconds covered; the caller decides whether the coverage is enough.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

FIELD = "energy_mj"
FIELD_SERIES = (FIELD,)
MAX_WATTS = 10_000.0  # a rise faster than this within a stored bucket is a reset inside it, not energy


@dataclass(frozen=True)
class Step:
    """The counter read ``c0`` mJ at ``t0`` and ``c1`` at ``t1`` (``t0 == t1``: a jump between two stored
    buckets, counted where it lies); ``ok`` False: not to be counted (a reset, a gap)."""

    t0: float
    c0: float
    t1: float
    c1: float
    ok: bool = True
    reset: bool = False  # the counter went down here


@dataclass(frozen=True)
class CounterTrace:
    """One GPU's energy counter over a span, as steps; ``why``: why there are no readings (the counter is
    not supported, no telemetry was recorded), for the fallback's reason."""

    steps: tuple[Step, ...] = ()
    resets: int = 0  # steps where the counter went down
    why: str = ""


@dataclass(frozen=True)
class Rise:
    joules: float
    covered_s: float
    resets: int


def rise(trace: CounterTrace, start: float, end: float,
         shape: Callable[[float, float], float | None] | None = None) -> Rise:
    """The counter's rise over ``[start, end]`` in joules and the seconds its steps cover there.

    A step that straddles an edge of the span counts the part of its rise inside: in proportion to
    ``shape(a, b)`` (the energy the power readings give from ``a`` to ``b``) where it answers for the step and
    its part inside, else in proportion to time.  The counter gives the sum, the power readings only where
    within a step the job began or ended: a job that starts at full load just after a reading at idle is
    not given the idle share of that step."""
    joules = covered = 0.0
    resets = 0
    for s in trace.steps:
        if s.reset and s.t0 < end and s.t1 >= start:
            resets += 1
        if not s.ok:
            continue
        if s.t1 <= s.t0:  # a jump between buckets: inside the span or not
            if start <= s.t0 < end:
                joules += (s.c1 - s.c0) / 1000.0
            continue
        lo, hi = max(s.t0, start), min(s.t1, end)
        if hi <= lo:
            continue
        part = (hi - lo) / (s.t1 - s.t0)
        if part < 1.0 and shape is not None:
            whole, inside = shape(s.t0, s.t1), shape(lo, hi)
            if whole and inside is not None and whole > 0:
                part = min(1.0, inside / whole)
        joules += (s.c1 - s.c0) / 1000.0 * part
        covered += hi - lo
    return Rise(joules, covered, resets)


def from_readings(ts: Sequence[float], vs: Sequence[float | None], *, max_gap_s: float,
                  why: str = "") -> CounterTrace:
    """Steps between neighbouring full-rate readings (``None``: not read, a gap)."""
    steps: list[Step] = []
    resets = 0
    prev: tuple[float, float] | None = None
    for t, v in zip(ts, vs):
        if v is None or v != v:
            prev = None
            continue
        if prev is not None:
            t0, c0 = prev
            down = v < c0
            resets += down
            steps.append(Step(t0, c0, t, v, ok=not down and t - t0 <= max_gap_s, reset=down))
        prev = (t, float(v))
    return CounterTrace(tuple(steps), resets, why if not steps else "")


def from_buckets(buckets: Iterable[Any], *, max_gap_s: float, after: tuple[float, float] | None = None,
                 why: str = "") -> CounterTrace:
    """Steps from stored min/max buckets (``t0``, ``width_s``, ``n``, ``vmin``, ``vmax``): each bucket's
    first-to-last rise spread over its width, and the jump to the next adjacent bucket at their edge.

    A counter that fell between two buckets, or inside one, shows as a next bucket's min below the last
    one's max: the jump and both buckets beside it are left out (within one bucket the order of readings
    is not kept, so neither can be trusted).  A rise faster than :data:`MAX_WATTS` is a fall inside the
    bucket as well.  ``after``: the first full-rate reading (t, mJ) that follows the buckets, joined to the
    last one when it is close enough."""
    rows = sorted((b for b in buckets if getattr(b, "n", 1) > 0), key=lambda b: b.t0)
    bad = [False] * len(rows)
    for k, b in enumerate(rows):
        if b.vmax - b.vmin > MAX_WATTS * 1000.0 * b.width_s:
            bad[k] = True
        if k and rows[k].vmin < rows[k - 1].vmax:
            bad[k] = bad[k - 1] = True
    steps: list[Step] = []
    resets = 0
    for k, b in enumerate(rows):
        end = b.t0 + b.width_s
        steps.append(Step(b.t0, b.vmin, end, b.vmax, ok=not bad[k]))
        nxt = rows[k + 1] if k + 1 < len(rows) else None
        if nxt is None:
            continue
        down = nxt.vmin < b.vmax
        resets += down
        if abs(nxt.t0 - end) < 1e-6:
            steps.append(Step(end, b.vmax, end, nxt.vmin, ok=not down, reset=down))
        elif nxt.t0 - end <= max_gap_s:
            steps.append(Step(end, b.vmax, nxt.t0, nxt.vmin, ok=not down, reset=down))
    if rows and after is not None:
        last = rows[-1]
        end = last.t0 + last.width_s
        t, v = after
        down = v < last.vmax
        resets += down
        if t >= end and t - end <= max_gap_s:
            steps.append(Step(end, last.vmax, t, v, ok=not down and not bad[-1], reset=down))
    return CounterTrace(tuple(steps), resets, why if not steps else "")


def joined(*traces: CounterTrace) -> CounterTrace:
    """Traces of consecutive stretches (stored buckets, then the ring) as one."""
    steps = tuple(s for tr in traces for s in tr.steps)
    why = next((tr.why for tr in traces if tr.why), "")
    return CounterTrace(steps, sum(tr.resets for tr in traces), why if not steps else "")
