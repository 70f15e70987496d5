"""Built-in background traffic of the simulated server (SPECDECK_SIM_TRAFFIC), for the demo."""

from __future__ import annotations

import random
import time
from typing import Any

from backend.sim.request import Request



def traffic_loop(sim: Any, setting: str) -> None:
    """Requests in phases of concurrency through ``sim`` (the running backend.sim.server.Sim, which
    starts this loop) until it stops."""
    rng = random.Random(sim.seed + 7)
    try:
        fixed = int(setting)
    except ValueError:
        fixed = 1
    phases = [(fixed, 3600.0)] if fixed > 1 else [(1, 30.0), (4, 30.0), (16, 30.0), (0, 8.0)]
    inflight: list[Request] = []
    phase_i, phase_end = 0, time.monotonic() + phases[0][1]
    eng = sim.engine
    assert eng is not None
    while not sim.stop.wait(0.05):
        now = time.monotonic()
        if now >= phase_end:
            phase_i = (phase_i + 1) % len(phases)
            phase_end = now + phases[phase_i][1]
        for r in [r for r in inflight if r.finish_reason is not None]:
            inflight.remove(r)
            if r.finish_reason != "abort":
                sim.out.access(rng.randint(40000, 60000), "POST", "/v1/chat/completions", 200)
        want = phases[phase_i][0]
        while len(inflight) < want:
            plen = rng.randint(120, 1800)
            inflight.append(eng.submit(f"traffic prompt {rng.random()}", max_new_tokens=rng.randint(128, 512),
                                       ignore_eos=True, prompt_tokens=plen))
