"""Telemetry benchmarks; prints figures, asserts nothing.

(a) Cost per sample per GPU of the core fields through the adapter, with
    whatever NVML is present (the real library on a GPU machine, else the
    fake 8-GPU source), and, with a real driver, raw pynvml calls for the
    same fields.
(b) The sampler's CPU share at 1 Hz with 8 fake GPUs over ``--seconds``
    (goal: under 1 % of one core), measured with resource.getrusage for the
    whole process and with the sampler's own thread-time figure.

    .venv/bin/python bench/bench_telemetry.py [--seconds 20] [--passes 300]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from backend.telemetry.fake import FakeNvml  # noqa: E402
from backend.telemetry.nvml import NvmlAdapter  # noqa: E402
from backend.telemetry.sampler import Sampler  # noqa: E402


def per_gpu_us(adapter: NvmlAdapter, passes: int) -> tuple[float, float, int]:
    adapter.sample()  # start-up and caches
    n = adapter.gpu_count()
    samples = []
    for _ in range(passes):
        t0 = time.perf_counter()
        adapter.sample()
        samples.append((time.perf_counter() - t0) * 1e6 / max(1, n))
    samples.sort()
    return statistics.median(samples), samples[int(0.9 * (len(samples) - 1))], n


def raw_pynvml_us(passes: int) -> float | None:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver here
        return None
    from gpu_proof import raw_core_us  # the same calls as the GPU proof

    hs = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    return raw_core_us(pynvml, hs, passes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0, help="sampler run for (b)")
    ap.add_argument("--passes", type=int, default=300, help="passes for (a)")
    args = ap.parse_args()

    print("(a) core fields, cost per sample per GPU")
    real = NvmlAdapter()
    if real.state().ok:
        med, p90, n = per_gpu_us(real, args.passes)
        print(f"    real NVML ({real.state().message}): median {med:.1f} us, p90 {p90:.1f} us per GPU ({n} GPUs)  goal <= 100 us")
        raw = raw_pynvml_us(args.passes)
        if raw is not None:
            print(f"    raw pynvml, same 9 calls: {raw:.1f} us per GPU")
    else:
        print(f"    real NVML unavailable: {real.state().message}")
    med, p90, n = per_gpu_us(NvmlAdapter(FakeNvml(processes={g: [(1000 + g, 61 << 30)] for g in range(8)}), source="fake"), args.passes)
    print(f"    fake NVML (Python stand-in; measures the adapter's own overhead plus the fake): median {med:.1f} us, p90 {p90:.1f} us per GPU ({n} GPUs)")

    print(f"(b) sampler at 1 Hz, 8 fake GPUs, {args.seconds:.0f} s, with a state store and attribution")
    with tempfile.TemporaryDirectory() as tmp:
        from state.store import Store

        store = Store(Path(tmp) / "state.db")
        fake = FakeNvml(processes={g: [(os.getpid(), 61 << 30)] for g in range(8)})
        sampler = Sampler(
            NvmlAdapter(fake, source="fake"),
            store=store,
            disk_paths=[tmp, os.getcwd()],
            managed=lambda: [("main", "server", os.getpid(), "RUNNING")],
            interval_s=1.0,
        )
        r0 = resource.getrusage(resource.RUSAGE_SELF)
        w0 = time.monotonic()
        sampler.start()
        time.sleep(args.seconds)
        sampler.stop()
        wall = time.monotonic() - w0
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        store.close()
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    cost = sampler.latest().cost
    print(f"    process CPU (getrusage, user+sys): {cpu * 1000:.0f} ms over {wall:.1f} s = {100 * cpu / wall:.2f}% of one core  goal < 1%")
    print(f"    sampler's own figure (thread time / wall): {100 * (cost.cpu_share or 0):.2f}% of one core")
    print(f"    samples {cost.samples}, mean {cost.mean_ms:.2f} ms per sample, GPU pass {cost.nvml_per_gpu_us:.1f} us per GPU (median)")


if __name__ == "__main__":
    main()
