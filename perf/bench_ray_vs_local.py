"""The cost of the Ray path against the local one: start -> ready and stop -> stopped of the same
readiness-probed process, side by side in one run.

    .venv/bin/python perf/bench_ray_vs_local.py [--rounds 5]

The process is a small HTTP server (python -m http.server on a free port) with an HTTP readiness
probe; "local" runs it under the supervisor's wrapper, "ray" as a job on a local Ray head that the
script starts (``cluster up``: a head with free ports and its own temp dir) and ends by pid
(``cluster down``).  Rounds alternate local and ray.  Prints each backend's median, min and max
seconds, and the head's own start and stop times.  Everything it starts is ended before it exits.
"""

from __future__ import annotations

import argparse
import io
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backend.cli import main as cli_main  # noqa: E402
from backend.supervisor.raycluster import free_ports  # noqa: E402
from backend.supervisor.supervisor import Supervisor  # noqa: E402
from specdeck_types.process import Kind, ProcessSpec, ProcState, ReadinessProbe  # noqa: E402
from state.store import Store  # noqa: E402

POLL_S = 0.05


def cli(ws: Path, *argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli_main(["-w", str(ws), *argv], out=out, err=err)
    return code, out.getvalue() + err.getvalue()


def one_round(sup: Supervisor, name: str) -> tuple[float, float]:
    t0 = time.monotonic()
    sup.start(name, actor="bench", source="bench")
    while sup.view(name).state != ProcState.RUNNING:
        state = sup.view(name).state
        if state in (ProcState.EXITED, ProcState.FATAL):
            raise SystemExit(f"{name} ended before it was ready: {sup.view(name).detail}")
        if time.monotonic() - t0 > 120:
            raise SystemExit(f"{name} not ready within 120 s: {sup.view(name).detail}")
        time.sleep(POLL_S)
        sup.poll()
    ready = time.monotonic() - t0
    t1 = time.monotonic()
    v = sup.stop(name, actor="bench", source="bench", wait=True)
    while v.state != ProcState.EXITED:
        if time.monotonic() - t1 > 120:
            raise SystemExit(f"{name} not stopped within 120 s: {v.detail}")
        time.sleep(POLL_S)
        sup.poll()
        v = sup.view(name)
    return ready, time.monotonic() - t1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="sdbench-", dir="/tmp"))
    (root / "specdeck.toml").write_text('[workspace]\nname = "bench"\n\n[cluster]\naddress = "local"\n'
                                        'num_cpus = 2\nnum_gpus = 0\n')
    store = None
    sup = None
    head_up = None
    try:
        t = time.monotonic()
        code, text = cli(root, "cluster", "up")
        if code != 0:
            raise SystemExit(f"cluster up failed: {text}")
        head_up = time.monotonic() - t
        store = Store(root / "state.db")
        sup = Supervisor(store, root / "run", default_cwd=root)
        specs = []
        for where in ("local", "ray"):
            port = free_ports(1)[0]
            specs.append(ProcessSpec(
                name=f"http-{where}", kind=Kind.OTHER,
                argv=(sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"),
                log_path=str(root / "logs" / f"http-{where}.log"), where=where, stop_grace_s=5,
                readiness=ReadinessProbe(kind="http", url=f"http://127.0.0.1:{port}/", interval_s=0.05)))
        sup.sync_specs(specs, prune=False)
        results: dict[str, list[tuple[float, float]]] = {"local": [], "ray": []}
        for i in range(args.rounds):
            for where in ("local", "ray"):
                results[where].append(one_round(sup, f"http-{where}"))
                r, s = results[where][-1]
                print(f"round {i + 1} {where:5}: start->ready {r:6.2f} s  stop->stopped {s:6.2f} s", flush=True)
        print()
        print(f"{'backend':8} {'start->ready median (min-max)':32} {'stop->stopped median (min-max)':32}")
        for where, rows in results.items():
            ready = [r for r, _ in rows]
            stop = [s for _, s in rows]
            print(f"{where:8} {statistics.median(ready):6.2f} s ({min(ready):.2f}-{max(ready):.2f}){'':12}"
                  f"{statistics.median(stop):6.2f} s ({min(stop):.2f}-{max(stop):.2f})")
        print(f"local Ray head: up in {head_up:.1f} s", end="")
    finally:
        if sup is not None:
            sup.close()
        if store is not None:
            store.close()
        t = time.monotonic()
        code, text = cli(root, "cluster", "down")
        print(f", down in {time.monotonic() - t:.1f} s ({text.strip()})")
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
