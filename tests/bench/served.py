"""What the simulator says it delivered to a benchmark's requests (``GET /sim/requests``, or its
SPECDECK_SIM_REQUESTS_LOG once the run has stopped), the figures a client's measurement is checked
against.  Nothing here compares one wall-clock figure with another taken at another moment: the
simulator's timing model is checked on its own clock (the ``v_`` moments, which only the modelled
work advances), and a client's figures against the simulator's record of the same requests on the
machine's one monotonic clock (the client times with ``time.perf_counter``, the simulator with
``time.monotonic``: both ``CLOCK_MONOTONIC`` on Linux), by what must come before what."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any


def within(value: float | None, expected: float, share: float = 0.10) -> bool:
    return value is not None and abs(value - expected) <= share * expected


def figures(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Requests as the simulator records them: their output tokens; tok/s over the window from the first
    one's arrival to the last one's end, and the median seconds per output token after the first, each in
    real seconds and on the simulated clock (``v_``)."""
    tokens = sum(r["completion_tokens"] for r in rows)

    def tpot_ms(first: str, end: str) -> float:
        return 1000 * statistics.median((r[end] - r[first]) / (r["completion_tokens"] - 1) for r in rows)

    return {"tokens": tokens,
            "tok_s": tokens / (max(r["finished"] for r in rows) - min(r["created"] for r in rows)),
            "v_tok_s": tokens / (max(r["v_finished"] for r in rows) - min(r["v_created"] for r in rows)),
            "tpot_ms": tpot_ms("first_token", "finished"), "v_tpot_ms": tpot_ms("v_first_token", "v_finished")}


def finished(sim) -> list[dict[str, Any]]:
    status, raw = sim.request("/sim/requests")
    assert status == 200, raw
    return json.loads(raw)["finished"]


def served(sim, n: int) -> dict[str, float]:
    """:func:`figures` of the last ``n`` requests ``sim`` finished (a run's measured requests: the warm-up
    and earlier traffic finished before them)."""
    rows = finished(sim)[-n:]
    assert len(rows) == n, rows
    return figures(rows)


def runs_logged(path: Path) -> list[list[dict[str, Any]]]:
    """A SPECDECK_SIM_REQUESTS_LOG's rows, one list per run of the server, in the order the runs began."""
    runs: dict[str, list[dict[str, Any]]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        runs.setdefault(row["run"], []).append(row)
    return list(runs.values())


def client_runs(monkeypatch) -> list:
    """Every run of the built-in client the benchmark flow makes from now on (a ``ClientRun``: each
    request's moments as the client saw them)."""
    from backend.flows import bench_runner

    made: list = []
    real = bench_runner.run_load

    def spy(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(bench_runner, "run_load", spy)
    return made


def check_timed(run, rows: list[dict[str, Any]], warmup: dict[str, Any]) -> None:
    """A built-in client's run against the simulator's rows for its requests (``rows``) and for its warm-up
    request (``warmup``), by what must come before what, which no load on the machine changes:

    - its output tokens are the simulator's, and its tok/s is those tokens over its own window, the
      first request's send to the last answer's end (``duration_s``), as the client documents;
    - that window holds everything the simulator did for these requests: the first was sent before the
      simulator took any of them in, the last answer ended after it finished the last, so the client's
      tok/s is at most the simulator's; and it holds none of the warm-up, whose answer had ended before
      the first request was sent;
    - each request took at least as long to its first token and to its end at the client as in the
      simulator (compared in order of length, which holds whichever client request was which row);
    - the window is the requests' span and nothing else: beyond the first send and the last answer's end
      it holds only the client's own turns around them (under a tenth of the simulator's window; a client
      that timed its warm-up too adds the warm-up's whole length);
    - sending the first request and reading the last answer (the window beyond the simulator's) take under
      a quarter of the simulator's window: a client reading its streams slower than they come falls
      behind by more.  Measured on this 2-core machine: 0.07 % of the window on a quiet machine, 0.5 % with
      six busy processes beside the tests run niced; over a tenth once, with the tests niced under another
      whole suite.
    """
    ok = [o for o in run.outcomes if o.ok]
    assert len(ok) == len(run.outcomes) == len(rows)
    s = run.summary()
    tokens = sum(r["completion_tokens"] for r in rows)
    assert s["total_output_tokens"] == sum(o.output_len for o in ok) == tokens
    assert s["output_throughput"] == tokens / run.duration_s
    first_sent = min(o.start for o in ok)
    last_end = max(o.start + o.latency for o in ok)
    window = (min(r["created"] for r in rows), max(r["finished"] for r in rows))
    assert warmup["finished"] <= first_sent <= window[0], (warmup["finished"], first_sent, window)
    assert window[1] <= last_end, (window, last_end)
    assert last_end - first_sent <= run.duration_s
    assert s["output_throughput"] <= tokens / (window[1] - window[0])
    for client, sim in ((sorted(o.latency for o in ok), sorted(r["finished"] - r["created"] for r in rows)),
                        (sorted(o.ttft for o in ok), sorted(r["first_token"] - r["created"] for r in rows))):
        assert all(c >= v for c, v in zip(client, sim)), (client, sim)
    sim_s = window[1] - window[0]
    assert run.duration_s - (last_end - first_sent) < 0.1 * sim_s, (run.duration_s, first_sent, last_end, window)
    assert (window[0] - first_sent) + (last_end - window[1]) < 0.25 * sim_s, (first_sent, last_end, window)


def served_checked(sim, run) -> dict[str, float]:
    """:func:`figures` of the requests of the built-in client's ``run`` (the last ``sim`` finished), once the
    client's figures are checked against them (:func:`check_timed`; its warm-up finished just before them)."""
    rows = finished(sim)
    n = len(run.outcomes)
    check_timed(run, rows[-n:], rows[-n - 1])
    return figures(rows[-n:])
