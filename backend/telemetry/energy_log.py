"""The sampler's record of every GPU's total energy counter: read on its own cadence, kept at full rate for
the last hour in memory and in min/max buckets in the state store, and given back as a
:class:`backend.telemetry.energy.CounterTrace` for measuring a job's energy.

The counter is not read in the 1 s core pass: on an H200 machine one ``nvmlDeviceGetTotalEnergyConsumption``
took about 3 ms of wall and CPU time (perf/energy_gpu_proof.py), fifteen times a GPU's whole core pass.  The
sampler's slow thread reads it every ``energy_interval_s`` (5 s) in the gap after a core pass.  A job's energy
is the counter's own sum; where the job began or ended inside a step between two readings, the 1 s power
readings place that edge (``energy.rise``).
"""

from __future__ import annotations

import math
import threading
from typing import Any, Mapping

from backend.telemetry import energy as counter
from backend.telemetry.ring import Buckets, Ring


class EnergyLog:
    """Energy counter readings per GPU: ``record`` them, read a ``trace`` back, ``flush`` on stop."""

    def __init__(self, *, capacity: int, bucket_s: float, history: Any = None, interval_s: float = 5.0):
        self._capacity = capacity
        self._bucket_s = bucket_s
        self._history = history  # state.telemetry.TelemetryStore, or None
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._rings: dict[int, Ring] = {}
        self._buckets = Buckets(bucket_s)
        self.t: float | None = None  # when the last reading was taken
        self.values: Mapping[int, int | None] = {}
        self.na: Mapping[int, str] = {}
        self.errors: list[str] = []

    def record(self, t: float, readings: Mapping[int, tuple[int | None, str | None]]) -> None:
        """One reading of every GPU: {index: (mJ or None, why None)}."""
        b0 = math.floor(t / self._bucket_s) * self._bucket_s
        with self._lock:
            for i, (mj, _why) in readings.items():
                ring = self._rings.get(i)
                if ring is None:
                    ring = self._rings[i] = Ring(self._capacity, counter.FIELD_SERIES)
                ring.append(t, {counter.FIELD: mj})
            if self._buckets.t0 is not None and b0 != self._buckets.t0:
                rows = self._buckets.drain()
            else:
                rows = []
            self._buckets.t0 = b0
            for i, (mj, _why) in readings.items():
                self._buckets.add("gpu", i, counter.FIELD, mj)
            self.t = t
            self.values = {i: mj for i, (mj, _) in readings.items()}
            self.na = {i: why for i, (mj, why) in readings.items() if mj is None and why}
        self._write(rows)

    def flush(self) -> None:
        with self._lock:
            rows = self._buckets.drain()
        self._write(rows)

    def _write(self, rows: list[Any]) -> None:
        if rows and self._history is not None:
            try:
                self._history.write(rows)
            except Exception as e:  # noqa: BLE001 - a closed or busy store must not stop sampling
                self.errors = (self.errors + [f"writing energy history failed: {e!r}"])[-5:]

    def trace(self, gpu: int, since: float, until: float) -> counter.CounterTrace:
        """GPU ``gpu``'s counter over ``[since, until]``: the in-memory readings, and before the oldest of them
        the stored buckets that end by then (with a reading either side of the span)."""
        gap = max(5.0, 3 * self.interval_s)
        with self._lock:
            ring = self._rings.get(gpu)
            oldest = ring.oldest() if ring is not None else None
            rt, rv = ring.read(counter.FIELD, since - gap, until + gap) if ring is not None else ([], [])
            why = self.na.get(gpu) or "no energy counter readings"
        live = counter.from_readings(rt, rv, max_gap_s=gap, why=why)
        if self._history is None or (oldest is not None and since >= oldest):
            return live
        rows = self._history.read("gpu", gpu, counter.FIELD, since - self._bucket_s,
                                  oldest if oldest is not None else until + self._bucket_s, width_s=self._bucket_s)
        if oldest is not None:  # buckets that end by the oldest reading in memory: the ring has the rest
            rows = [b for b in rows if b.t0 + b.width_s <= oldest + 1e-6]
        first = next(((t, v) for t, v in zip(rt, rv) if v is not None), None)
        stored = counter.from_buckets(rows, max_gap_s=self._bucket_s + gap, after=first, why=why)
        return counter.joined(stored, live)
