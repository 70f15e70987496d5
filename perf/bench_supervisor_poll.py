"""Cost of one Supervisor.poll() with N managed processes (real sleeping children).

    .venv/bin/python perf/bench_supervisor_poll.py [--processes 50] [--polls 300]

Prints mean / median / p95 milliseconds per poll once every process is
RUNNING (goal: < 5 ms for 50).  Everything it starts is stopped at the end.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backend.supervisor.supervisor import Supervisor  # noqa: E402
from specdeck_types.process import Kind, ProcessSpec, ProcState  # noqa: E402
from state.store import Store  # noqa: E402


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--processes", type=int, default=50)
    ap.add_argument("--polls", type=int, default=300)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="specdeck-bench-") as tmp:
        root = Path(tmp)
        store = Store(root / "state.db")
        sup = Supervisor(store, root / "run")
        names = [f"p{i:03d}" for i in range(args.processes)]
        sup.sync_specs([
            ProcessSpec(n, Kind.OTHER, ("sleep", "600"), str(root / "logs" / f"{n}.log"), stop_grace_s=2)
            for n in names
        ])
        try:
            t0 = time.perf_counter()
            for n in names:
                sup.start(n, actor="bench", source="bench")
            deadline = time.monotonic() + 60
            while not all(v.state == ProcState.RUNNING for v in sup.views()):
                if time.monotonic() > deadline:
                    raise SystemExit("processes did not all reach RUNNING within 60 s")
                sup.poll()
                time.sleep(0.05)
            print(f"started {len(names)} processes to RUNNING in {time.perf_counter() - t0:.2f} s")
            for _ in range(10):  # warm caches
                sup.poll()
            times = []
            for _ in range(args.polls):
                t = time.perf_counter()
                sup.poll()
                times.append((time.perf_counter() - t) * 1000)
            print(f"poll() with {len(names)} running processes, {args.polls} polls: "
                  f"mean {statistics.mean(times):.3f} ms, median {statistics.median(times):.3f} ms, "
                  f"p95 {pct(times, 0.95):.3f} ms, max {max(times):.3f} ms  (goal < 5 ms)")
            t = time.perf_counter()
            for _ in range(args.polls):
                sup.views()
            print(f"views() with {len(names)} processes: {(time.perf_counter() - t) * 1000 / args.polls:.3f} ms")
        finally:
            t = time.perf_counter()
            for n in names:
                v = sup.view(n)
                if v is not None and v.state.is_active:
                    sup.stop(n, actor="bench", source="bench", wait=False)
            deadline = time.monotonic() + 30
            while any(v.state.is_active for v in sup.views()) and time.monotonic() < deadline:
                sup.poll()
                time.sleep(0.05)
            left = [v.name for v in sup.views() if v.state.is_active]
            print(f"stopped all in {time.perf_counter() - t:.2f} s" + (f"; still active: {left}" if left else ""))
            sup.close()
            store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
