"""The ETA's point estimate is inside its own band, for any history of a run, as the page writes it."""

from __future__ import annotations

import random
import re

from backend.regen.follow import eta_band
from specdeck_types.eta import Eta
from ui import fmt

UNIT_S = {"d": 86400, "h": 3600, "m": 60, "s": 1}


def _history(rng: random.Random) -> tuple[list[tuple[float, int]], float]:
    """A run's (t, rows completed) points: bursts, pauses and steady stretches, snapshots every 0.5-20 s."""
    t, done, pts = 1_000_000.0, 0, []
    for _ in range(rng.randint(0, 400)):
        t += rng.uniform(0.5, 20.0)
        mode = rng.random()
        if mode < 0.2:
            pass  # nothing completed in this interval
        elif mode < 0.3:
            done += rng.randint(50, 5000)  # a burst
        else:
            done += rng.randint(0, 40)
        pts.append((t, done))
    return pts, t + rng.uniform(0.0, 120.0)


def _written_band(text: str) -> tuple[float, float]:
    m = re.fullmatch(r"(\d+)-(\d+) ([dhms])", text)
    assert m, text
    size = UNIT_S[m.group(3)]
    return int(m.group(1)) * size, int(m.group(2)) * size


def _written_point(text: str) -> float:
    """fmt.duration's ``2 h 05 m`` / ``3 m 07 s`` / ``42 s`` / ``2 d 03 h`` back into seconds (its low end)."""
    total = 0
    for n, u in re.findall(r"(\d+) ([dhms])", text):
        total += int(n) * UNIT_S[u]
    return total


def test_point_inside_band_over_many_histories():
    rng = random.Random(20)
    checked = 0
    for _ in range(3000):
        pts, now = _history(rng)
        remaining = rng.choice([1, 7, 31, 900, 83_288, rng.randint(1, 10**6)])
        hist = None
        if rng.random() < 0.5:
            edges = [0, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
            hist = (edges, [rng.randint(0, 500) for _ in range(len(edges) - 1)])
        eta = eta_band(remaining, pts, now=now, req_s=rng.choice([None, rng.uniform(0.01, 50.0)]),
                       tok_s=rng.choice([None, rng.uniform(1.0, 5000.0)]), length_hist=hist)
        if not eta.known:
            continue
        checked += 1
        assert eta.low_s <= eta.point_s <= eta.high_s, eta
        text = eta.range_text()
        lo, hi = _written_band(text)
        written = _written_point(fmt.duration(eta.point_s))
        assert lo <= written <= hi, (text, fmt.duration(eta.point_s), eta)
    assert checked > 1000  # most histories give an estimate


def test_the_seen_case_writes_a_band_that_holds_its_point():
    # point 20 m 40 s with a band made from 20 m 40 s: written "21-36 m" before, which misses the point
    eta = Eta(1240.0, 1240.0, 36 * 60.0 - 10, "seen")
    assert eta.range_text() == "20-36 m"
    assert fmt.eta_range(eta.low_s, eta.high_s) == "21-36 m"  # the plain formatter rounds the low end up


def test_a_band_beside_its_point_is_widened_to_reach_it():
    assert Eta(100.0, 120.0, 200.0, "x").low_s == 100.0
    assert Eta(300.0, 120.0, 200.0, "x").high_s == 300.0
    assert Eta(None, None, None, "x").range_text() is None
    assert Eta(0.0, 0.0, 0.0, "x").range_text() == "0-0 s"
