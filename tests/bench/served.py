"""What the simulator says it delivered to a benchmark's requests (``GET /sim/requests``), the figure a
client's measurement is checked against: on a loaded machine the simulator and the client slow down
alike, so a client's tok/s agrees with it, where two runs one after the other need not agree."""

from __future__ import annotations

import json
import statistics


def within(value: float | None, expected: float, share: float = 0.10) -> bool:
    return value is not None and abs(value - expected) <= share * expected


def served(sim, n: int) -> dict[str, float]:
    """The last ``n`` requests ``sim`` finished (a run's measured requests: the warm-up and earlier
    traffic finished before them): their output tokens; tok/s over the window from the first one's
    arrival to the last one's end, and the median seconds per output token after the first, each in
    real seconds and on the simulated clock (``v_``)."""
    status, raw = sim.request("/sim/requests")
    assert status == 200, raw
    rows = json.loads(raw)["finished"][-n:]
    assert len(rows) == n, rows
    tokens = sum(r["completion_tokens"] for r in rows)

    def tpot_ms(first: str, end: str) -> float:
        return 1000 * statistics.median((r[end] - r[first]) / (r["completion_tokens"] - 1) for r in rows)

    return {"tokens": tokens,
            "tok_s": tokens / (max(r["finished"] for r in rows) - min(r["created"] for r in rows)),
            "v_tok_s": tokens / (max(r["v_finished"] for r in rows) - min(r["v_created"] for r in rows)),
            "tpot_ms": tpot_ms("first_token", "finished"), "v_tpot_ms": tpot_ms("v_first_token", "v_finished")}
