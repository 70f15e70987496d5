"""The sampler's ring: a span is read by bisection, and gives exactly the readings a scan of the whole
ring gives, across the wrap-around, at its edges, and after the clock was set back."""

from __future__ import annotations

import math
import random

from backend.telemetry.ring import Ring


def scan(ring: Ring, field: str, since: float, until: float | None):
    out_t, out_v = [], []
    for i in ring._order():
        t = ring.t[i]
        if t < since or (until is not None and t >= until):
            continue
        v = ring.cols[field][i]
        out_t.append(t)
        out_v.append(None if math.isnan(v) else v)
    return out_t, out_v


def test_spans_equal_a_scan_across_the_wrap_and_the_edges():
    rng = random.Random(7)
    ring = Ring(50, ("power_w",))
    t = 1000.0
    for n in range(173):  # wraps more than three times
        t += rng.choice((0.5, 1.0, 1.0, 2.0))
        ring.append(t, {"power_w": None if n % 11 == 0 else float(n)})
        if n % 7 == 0:
            lo, hi = ring.oldest(), t
            for since, until in ((lo - 10, None), (lo, hi), (lo + 3.0, hi - 2.0), (hi, None), (hi + 1, None),
                                 (lo - 100, lo - 50), (rng.uniform(lo, hi), rng.uniform(lo, hi + 5)),
                                 (ring.t[(ring.tail - 3) % ring.capacity], None)):
                assert ring.read("power_w", since, until) == scan(ring, "power_w", since, until), (since, until)


def test_a_clock_set_back_still_reads_every_reading_in_the_span():
    ring = Ring(20, ("util",))
    for k in range(10):
        ring.append(2000.0 + k, {"util": float(k)})
    for k in range(5):  # the clock went back a minute
        ring.append(1940.0 + k, {"util": 100.0 + k})
    got = ring.read("util", 1990.0, 2005.0)
    assert got == scan(ring, "util", 1990.0, 2005.0) and got[1][:5] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert ring.read("util", 1940.0, 1943.0) == ([1940.0, 1941.0, 1942.0], [100.0, 101.0, 102.0])
    # once every reading from before the step is overwritten, times go forward again: bisection again
    for k in range(20):
        ring.append(1950.0 + k, {"util": float(k)})
    assert ring._back == 0
    assert ring.read("util", 1955.0, 1960.0) == scan(ring, "util", 1955.0, 1960.0)
