"""On a GPU machine: the pass's direct C calls against nvidia-ml-py's functions
on the real driver.  Two adapters, one reading directly and one through the
bindings, sample the same GPUs back to back (a torch process on each GPU);
prints each field of both and whether they agree (exactly for what does not
move between reads a few µs apart, within a tolerance for what does).  Each
round reads direct, bindings, direct: an exact field agrees when the
bindings' value is one of the two direct ones (memory can move in between).

    python perf/nvml_direct_check.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_telemetry import start_gpu_job, stop_gpu_job  # noqa: E402

from backend.telemetry.nvml import NvmlAdapter  # noqa: E402

EXACT = ("uuid", "name", "bus_id", "mem_total", "mem_used", "power_limit_w", "mem_clock_mhz", "mig_enabled")
CLOSE = {"util_gpu": 15.0, "util_mem": 15.0, "temp_c": 2.0, "power_w": 80.0, "sm_clock_mhz": 120.0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    import pynvml

    direct = NvmlAdapter(pynvml)
    wrapped = NvmlAdapter(pynvml, direct_calls=False)
    if not direct.state().ok:
        print(f"NVML: {direct.state().message}")
        return 2
    jobs = start_gpu_job(direct.gpu_count(), 4096)
    bad = 0
    try:
        import time

        for _ in range(50):  # the jobs' memory settles (cuBLAS workspace after the first matmuls)
            m0 = [g.mem_used for g in direct.sample().gpus]
            time.sleep(0.2)
            if m0 == [g.mem_used for g in direct.sample().gpus]:
                break
        for r in range(args.rounds):
            direct.want_processes()
            wrapped.want_processes()
            a, b, a2 = direct.sample(), wrapped.sample(), direct.sample()
            if r == 0:
                print(f"direct pass in use: {direct._batch is not None}; chosen calls: {direct.chosen()}")
            for ga, gb, ga2 in zip(a.gpus, b.gpus, a2.gpus):
                for f in EXACT:
                    same = getattr(gb, f) in (getattr(ga, f), getattr(ga2, f))
                    bad += not same
                    if r == 0 or not same:
                        print(f"  round {r} GPU {ga.index} {f:14s} direct {getattr(ga, f)!s:>22}  bindings {getattr(gb, f)!s:>22}"
                              f"  {'same' if same else 'DIFFERENT'}")
                for f, tol in CLOSE.items():
                    x, y = getattr(ga, f), getattr(gb, f)
                    ok = x is not None and y is not None and abs(x - y) <= tol
                    bad += not ok
                    if r == 0 or not ok:
                        print(f"  round {r} GPU {ga.index} {f:14s} direct {x!s:>22}  bindings {y!s:>22}"
                              f"  {'within ' + str(tol) if ok else 'DIFFERENT'}")
                pa = sorted((p.pid, p.used_memory) for p in ga.processes or ())
                pb = sorted((p.pid, p.used_memory) for p in gb.processes or ())
                bad += pa != pb or not pa
                if r == 0 or pa != pb:
                    print(f"  round {r} GPU {ga.index} processes      direct {pa}  bindings {pb}  {'same' if pa == pb else 'DIFFERENT'}")
                if ga.na or gb.na:
                    print(f"  round {r} GPU {ga.index} N/A: direct {dict(ga.na)} bindings {dict(gb.na)}")
                    bad += dict(ga.na) != dict(gb.na)
    finally:
        stop_gpu_job(jobs)
    print(f"{args.rounds} rounds: {'all fields agree' if not bad else f'{bad} disagreements'}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
