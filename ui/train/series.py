"""The Training page's curves, without Streamlit: built from a follower's records and times
(:func:`curves`), smoothed (:func:`ema`), the time a run has left (:func:`eta`), the latest run of a log that
holds several (:func:`latest_run`) and the CSV download (:func:`curves_csv`).  The follower and the predicted
and measured accept lengths are in :mod:`ui.train.data`."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from backend.train.logparse import TrainRecord
from backend.train.reader import Progress
from specdeck_types.eta import Eta


# -- curves ---------------------------------------------------------------------------------------

@dataclass
class Series:
    """One curve: x as step (epoch for Gen-1 logs without steps) and time; None values are gaps."""

    steps: list[float | None] = field(default_factory=list)
    times: list[float | None] = field(default_factory=list)
    values: list[float | None] = field(default_factory=list)

    def add(self, step: float | None, t: float | None, value: float | None) -> None:
        self.steps.append(step)
        self.times.append(t)
        self.values.append(value)

    def gap(self) -> None:
        if self.values and self.values[-1] is not None:
            self.add(None, None, None)

    def __len__(self) -> int:
        """The points that have a value (gaps not counted); counted again only when the values changed length."""
        n = len(self.values)
        cached = self.__dict__.get("_count")
        if cached is None or cached[0] != n:
            cached = self.__dict__["_count"] = (n, n - self.values.count(None))
        return cached[1]

    def last(self) -> float | None:
        return next((v for v in reversed(self.values) if v is not None), None)

    def before_last(self) -> float | None:
        seen = [v for v in self.values if v is not None]
        return seen[-2] if len(seen) > 1 else None


@dataclass
class Curves:
    """A run's curves by metric name (``loss``, ``acc_0``, ``lr`` …), by split."""

    train: dict[str, Series] = field(default_factory=dict)
    eval: dict[str, Series] = field(default_factory=dict)
    restarts: list[tuple[float | None, float | None]] = field(default_factory=list)  # (step, time) of each start
    x_is_epoch: bool = False
    t0: float | None = None  # the time of the run's first point (0 on the relative-time axis)

    def positions(self, base: str, split: str = "train") -> list[int]:
        src = self.train if split == "train" else self.eval
        out = []
        for name in src:
            head, _, tail = name.rpartition("_")
            if head == base and tail.isdigit():
                out.append(int(tail))
        return sorted(out)


def curves(records: Sequence[TrainRecord], times: Sequence[float | None],
           tracker: Iterable[TrainRecord] = ()) -> Curves:
    """Every metric of the records as curves; a run appended to the same log breaks every line.

    Tracker records (TensorBoard) fill in the metrics the console does not print (``lr`` for Gen-2);
    a metric the console has is taken from the console."""
    out = Curves()
    any_step = any(r.step is not None for r in records if r.kind == "metrics")
    out.x_is_epoch = not any_step and any(r.epoch is not None for r in records if r.kind == "metrics")
    for r, t in zip(records, times):
        if r.kind in ("run_start", "resume") or (r.kind == "start" and r.info.get("resumed")):
            seen = any(len(s) for s in (*out.train.values(), *out.eval.values()))
            if r.kind == "run_start" and not seen:
                continue  # the log's first run starting is no restart
            if r.kind == "run_start" or not out.restarts or out.restarts[-1][1] != t:
                out.restarts.append((float(r.step) if r.step is not None else None, t))
            for s in (*out.train.values(), *out.eval.values()):
                s.gap()
            continue
        if r.kind != "metrics" or not r.metrics:
            continue
        x = r.step if r.step is not None else (r.epoch if out.x_is_epoch else None)
        if x is None:
            continue
        dest = out.eval if r.split == "eval" else out.train
        if out.t0 is None and t is not None:
            out.t0 = t
        fx = float(x)
        for name, v in r.metrics.items():
            s = dest.get(name)
            if s is None:
                s = dest[name] = Series()
            s.steps.append(fx)  # Series.add, inlined: a long log has a million of these
            s.times.append(t)
            s.values.append(v)
    console = set(out.train)
    extra: dict[str, Series] = {}
    for r in sorted((r for r in tracker if r.kind == "metrics" and r.step is not None), key=lambda r: r.step):
        for name, v in r.metrics.items():
            if r.split == "eval" or name in console:
                continue
            extra.setdefault(name, Series()).add(float(r.step), r.wall_time, v)
    out.train.update(extra)
    return out


def ema(values: Sequence[float | None], weight: float) -> list[float | None]:
    """Exponential moving average with TensorBoard's start-up correction; a gap restarts it."""
    if not 0.0 <= weight < 1.0:
        raise ValueError(f"smoothing weight {weight} is outside 0..1")
    out: list[float | None] = []
    acc = 0.0
    n = 0
    for v in values:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            out.append(None)
            acc, n = 0.0, 0
            continue
        n += 1
        acc = acc * weight + (1 - weight) * v
        out.append(acc / (1 - weight ** n) if weight else v)
    return out


# -- progress ----------------------------------------------------------------------------------------

def eta(progress: Progress, c: Curves, *, window: int = 20) -> Eta:
    """Time left: the point estimate from tqdm's rate, the range from the fastest and slowest of the last
    ``window`` step times logged since the latest (re)start."""
    if progress.ended is not None:
        return Eta(0.0, 0.0, 0.0, f"the run ended: {progress.ended}")
    if progress.step is None or progress.total_steps is None:
        return Eta(None, None, None, "N/A: the log does not say the total steps yet")
    left = max(0, progress.total_steps - progress.step)
    if left == 0:
        return Eta(0.0, 0.0, 0.0, "all steps done")
    recent: list[float] = []
    s = c.train.get("step_time_s")
    if s is not None:
        for v in reversed(s.values):
            if v is None:
                break  # a restart: the earlier run's speed is not this one's
            recent.append(v)
            if len(recent) >= window:
                break
    point = progress.eta_s
    if point is None and recent:
        point = left * sorted(recent)[len(recent) // 2]
    if point is None:
        return Eta(None, None, None, "N/A: no step time in the log yet")
    if recent:
        lo, hi = left * min(recent), left * max(recent)
        basis = (f"{left:,} steps left; point from tqdm's rate, range from the fastest and slowest of the last "
                 f"{len(recent)} logged step times")
        return Eta(point, min(lo, point), max(hi, point), basis)
    return Eta(point, point, point, f"{left:,} steps left at tqdm's rate")


def step_times(c: Curves) -> dict[float, float]:
    """The time of each step the curves know (for placing step-indexed points on a wall-time axis)."""
    out: dict[float, float] = {}
    for s in c.train.values():
        for x, t in zip(s.steps, s.times):
            if x is not None and t is not None:
                out.setdefault(x, t)
    return out


def latest_run(records: Sequence[TrainRecord], times: Sequence[float | None]
               ) -> tuple[Sequence[TrainRecord], Sequence[float | None]]:
    """The records (and times) of the newest run appended to the log: from the supervisor's last start line
    on, so a restarted run's figures do not show the previous run's values."""
    for i in range(len(records) - 1, -1, -1):
        if records[i].kind == "run_start":
            return records[i:], times[i:]
    return records, times


# -- download ------------------------------------------------------------------------------------------

CSV_HEADER = ("run", "split", "metric", "step", "wall_time_utc", "relative_s", "value")


def curves_csv(runs: Sequence[tuple[str, Curves]]) -> str:
    """Every point of every curve of ``runs`` (the full data, not what the charts draw): one row per run,
    split, metric and step, with the point's wall time (ISO 8601, UTC) and its seconds since the run's
    first point; a value or time the log does not give is empty."""
    import csv
    import io
    from datetime import datetime, timezone

    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_HEADER)
    for name, c in runs:
        for split, src in (("train", c.train), ("eval", c.eval)):
            for metric, s in src.items():
                for x, t, v in zip(s.steps, s.times, s.values):
                    if v is None or x is None:
                        continue
                    w.writerow((name, split, metric, f"{x:g}",
                                datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="milliseconds")
                                .replace("+00:00", "Z") if t is not None else "",
                                f"{t - c.t0:.3f}" if t is not None and c.t0 is not None else "", repr(v)))
    return buf.getvalue()
