"""The sampler's in-memory stores: a fixed-capacity ring of full-rate readings
per GPU (and one for the host), and the min / mean / max buckets that go to
the state store when they close.  Used by :class:`backend.telemetry.sampler.Sampler`.
"""

from __future__ import annotations

import math
from array import array
from typing import Any, Iterable, Sequence

NAN = float("nan")


class Ring:
    """Fixed-capacity ring of (t, field values) with NaN for N/A."""

    def __init__(self, capacity: int, fields: Sequence[str]):
        self.capacity = capacity
        self.fields = tuple(fields)
        self.t = array("d", [NAN]) * capacity
        self.cols = {f: array("d", [NAN]) * capacity for f in fields}
        self.n = 0  # total appended
        self.tail = 0  # next write position
        self._back = 0  # appends whose time went back (a clock set back): a scan then, not a bisection

    def append(self, t: float, values: dict[str, float | None]) -> None:
        i = self.tail
        if self.n and t < self.t[(i - 1) % self.capacity]:
            self._back = self.capacity  # until every reading from before the step has been overwritten
        elif self._back:
            self._back -= 1
        self.t[i] = t
        for f, col in self.cols.items():
            v = values.get(f)
            col[i] = NAN if v is None else float(v)
        self.tail = (i + 1) % self.capacity
        self.n += 1

    def __len__(self) -> int:
        return min(self.n, self.capacity)

    def _order(self) -> Iterable[int]:
        size = len(self)
        start = (self.tail - size) % self.capacity
        return ((start + k) % self.capacity for k in range(size))

    def oldest(self) -> float | None:
        if not len(self):
            return None
        return self.t[(self.tail - len(self)) % self.capacity]

    def _first_at(self, t: float) -> int:
        """The logical index (0: the oldest) of the first reading at or after ``t``, by bisection."""
        size, cap = len(self), self.capacity
        start = (self.tail - size) % cap
        lo, hi = 0, size
        while lo < hi:
            mid = (lo + hi) // 2
            if self.t[(start + mid) % cap] < t:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def read(self, field: str, since: float, until: float | None = None) -> tuple[list[float], list[float | None]]:
        """The readings with ``since <= t < until``, oldest first.  Times only go forward (but for a clock set
        back), so the span is found by bisection: a chart of the last minutes, or a span older than the ring's
        hour, does not walk the whole hour."""
        col = self.cols[field]
        ts: list[float] = []
        vs: list[float | None] = []
        if not self._back:
            size, cap = len(self), self.capacity
            start = (self.tail - size) % cap
            k0 = self._first_at(since)
            k1 = self._first_at(until) if until is not None else size
            for k in range(k0, max(k0, k1)):
                i = (start + k) % cap
                v = col[i]
                ts.append(self.t[i])
                vs.append(None if math.isnan(v) else v)
            return ts, vs
        for i in self._order():
            t = self.t[i]
            if t < since or (until is not None and t >= until):
                continue
            v = col[i]
            ts.append(t)
            vs.append(None if math.isnan(v) else v)
        return ts, vs

    def last(self, field: str, n: int) -> list[float | None]:
        col = self.cols[field]
        size = min(n, len(self))
        out = []
        for k in range(size, 0, -1):
            v = col[(self.tail - k) % self.capacity]
            out.append(None if math.isnan(v) else v)
        return out


class Buckets:
    """Accumulates min / sum / max / n per (scope, idx, field) for one bucket."""

    def __init__(self, width_s: float):
        self.width = width_s
        self.t0: float | None = None
        self.acc: dict[tuple[str, int, str], list[float]] = {}

    def add(self, scope: str, idx: int, field: str, v: float | None) -> None:
        if v is None:
            return
        a = self.acc.get((scope, idx, field))
        if a is None:
            self.acc[(scope, idx, field)] = [1.0, v, v, v]
        else:
            a[0] += 1
            a[1] = v if v < a[1] else a[1]
            a[2] += v
            a[3] = v if v > a[3] else a[3]

    def drain(self) -> list[Any]:
        from state.telemetry import Bucket  # noqa: PLC0415

        if self.t0 is None:
            return []
        out = [
            Bucket(scope, idx, field, self.t0, self.width, int(a[0]), a[1], a[2] / a[0], a[3])
            for (scope, idx, field), a in self.acc.items()
        ]
        self.acc = {}
        return out
