"""Telemetry benchmarks; prints figures, asserts nothing.

(a) The sampler's GPU pass against the raw NVML pass of the same fields at
    the same cadence, side by side in one run.  Every ``--cadence`` seconds
    (1 s, the dashboard's) the raw pass and the sampler's pass each run once,
    half a cadence apart (so each finds the driver idle for the same time),
    the order swapped every tick.  The raw pass calls the library directly:
    utilisation, memory (v1), temperature, power, enforced power limit, SM
    and memory clocks, clock event reasons, and the process list on the
    ticks the sampler reads it (every ``--procs-every`` ticks).  The
    sampler's pass is ``Sampler.sample_once``'s GPU pass (the "Sampler cost"
    on the GPUs page), turning the readings into samples included.  Prints
    µs per GPU (mean, median, p90) of each and the ratio (goal <= 1.1).
    With ``--old`` it also runs the previous configuration (process list
    every pass, memory v2) against its own raw pass, for the before figure.
(b) The sampler's CPU share at 1 Hz with 8 fake GPUs over ``--cpu-seconds``
    (goal: under 1 % of one core), from resource.getrusage for the whole
    process and from the sampler's own thread-time figure.

    python bench/bench_telemetry.py                 # real NVML when it works, else the fake
    python bench/bench_telemetry.py --fake --seconds 20
    python bench/bench_telemetry.py --gpu-job --seconds 120 --old   # on a GPU machine, a torch
                                                    # process on every GPU so the process list has one

The fake NVML is a Python stand-in: its calls cost a few µs each, so with
it (a) measures the adapter's own overhead against a cheap library, not
the driver.
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backend.telemetry.fake import FakeNvml  # noqa: E402
from backend.telemetry.nvml import (  # noqa: E402
    NVML_CLOCK_MEM,
    NVML_CLOCK_SM,
    NVML_MEMORY_V2,
    NVML_TEMPERATURE_GPU,
    NvmlAdapter,
)
from backend.telemetry.sampler import Sampler  # noqa: E402

# A CUDA process that holds memory and keeps the GPU busy until it is told to stop.
GPU_JOB = r"""
import os, sys, time, torch
size = int(sys.argv[1])
a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
print("ready", os.getpid(), flush=True)
while True:
    for _ in range(10):
        c = a @ b
    torch.cuda.synchronize()
    time.sleep(0.002)
"""


def raw_pass(lib: Any, handles: list[Any], procs: bool, memory_v2: bool = False) -> None:
    """The core fields straight through the library, nothing done with the answers."""
    v2 = getattr(lib, "nvmlMemory_v2", NVML_MEMORY_V2)
    for h in handles:
        lib.nvmlDeviceGetUtilizationRates(h)
        if memory_v2:
            lib.nvmlDeviceGetMemoryInfo(h, version=v2)
        else:
            lib.nvmlDeviceGetMemoryInfo(h)
        lib.nvmlDeviceGetTemperature(h, NVML_TEMPERATURE_GPU)
        lib.nvmlDeviceGetPowerUsage(h)
        lib.nvmlDeviceGetEnforcedPowerLimit(h)
        lib.nvmlDeviceGetClockInfo(h, NVML_CLOCK_SM)
        lib.nvmlDeviceGetClockInfo(h, NVML_CLOCK_MEM)
        lib.nvmlDeviceGetCurrentClocksEventReasons(h)
        if procs:
            lib.nvmlDeviceGetComputeRunningProcesses_v3(h)


def stats(xs: list[float]) -> dict[str, float]:
    s = sorted(xs)
    return {"mean": statistics.fmean(s), "median": statistics.median(s), "p90": s[int(0.9 * (len(s) - 1))], "n": len(s)}


def side_by_side(lib: Any, *, seconds: float, cadence: float, procs_every: int, memory_v2: bool,
                 label: str, disk: str) -> dict[str, Any]:
    """Run the raw pass and the sampler's pass once per cadence each, half a
    cadence apart, for ``seconds``; return the per-GPU figures of both."""
    tick = [0]
    # the adapter's clock counts ticks, so it reads the process list on exactly the raw pass's ticks
    adapter = NvmlAdapter(lib, source="bench", clock=lambda: tick[0] * cadence,
                          procs_interval_s=procs_every * cadence - 1e-9, memory_v2=memory_v2)
    sampler = Sampler(adapter, disk_paths=[disk], interval_s=cadence)
    if not adapter.state().ok:
        raise SystemExit(f"NVML: {adapter.state().message}")
    handles = [lib.nvmlDeviceGetHandleByIndex(i) for i in range(adapter.gpu_count())]
    n = len(handles)
    raw_us: list[float] = []
    raw_procs_us: list[float] = []
    raw_plain_us: list[float] = []
    raw_reads = 0
    sampler.sample_once()  # start-up and caches, outside the figures
    raw_pass(lib, handles, True, memory_v2)
    samp: list[float] = []
    procs_reads = 0
    ticks = max(2, int(seconds / cadence))
    nxt = time.monotonic() + cadence
    for k in range(1, ticks + 1):
        tick[0] = k
        with_procs = k % procs_every == 0

        def do_raw() -> None:
            t0 = time.perf_counter()
            raw_pass(lib, handles, with_procs, memory_v2)
            us = (time.perf_counter() - t0) * 1e6 / n
            raw_us.append(us)
            (raw_procs_us if with_procs else raw_plain_us).append(us)

        def do_sampler() -> None:
            nonlocal procs_reads
            before = adapter._procs_at
            sampler.sample_once()
            samp.append(sampler.pass_costs()[-1])  # this sample's GPU pass, µs per GPU
            procs_reads += adapter._procs_at != before

        order: list[Callable[[], None]] = [do_raw, do_sampler] if k % 2 else [do_sampler, do_raw]
        for j, fn in enumerate(order):
            delay = nxt + j * cadence / 2 - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            fn()
        raw_reads += with_procs
        nxt += cadence
    r, s = stats(raw_us), stats(samp)
    return {
        "label": label, "gpus": n, "ticks": ticks, "raw": r, "sampler": s,
        "raw_with_procs": stats(raw_procs_us) if raw_procs_us else None,
        "raw_without_procs": stats(raw_plain_us) if raw_plain_us else None,
        "ratio_mean": s["mean"] / r["mean"], "ratio_median": s["median"] / r["median"],
        "procs_reads": (raw_reads, procs_reads),
    }


def print_side_by_side(res: dict[str, Any]) -> None:
    r, s = res["raw"], res["sampler"]
    print(f"    {res['label']}: {res['ticks']} ticks, {res['gpus']} GPU(s); process list read on "
          f"{res['procs_reads'][0]} ticks by the raw pass, {res['procs_reads'][1]} by the sampler")
    print(f"      raw NVML pass     mean {r['mean']:7.1f}  median {r['median']:7.1f}  p90 {r['p90']:7.1f} us/GPU")
    print(f"      sampler's pass    mean {s['mean']:7.1f}  median {s['median']:7.1f}  p90 {s['p90']:7.1f} us/GPU")
    if res["raw_with_procs"] and res["raw_without_procs"]:
        print(f"      raw pass with the process list {res['raw_with_procs']['median']:.1f}, "
              f"without {res['raw_without_procs']['median']:.1f} us/GPU (median)")
    print(f"      ratio sampler / raw: {res['ratio_mean']:.3f} (means), {res['ratio_median']:.3f} (medians)  goal <= 1.1")


def start_gpu_job(ngpu: int, size: int) -> list[subprocess.Popen]:
    jobs = []
    for i in range(ngpu):
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(i), CUDA_DEVICE_ORDER="PCI_BUS_ID")
        p = subprocess.Popen([sys.executable, "-c", GPU_JOB, str(size)], env=env, stdout=subprocess.PIPE,
                             text=True, start_new_session=True)
        jobs.append(p)
    for p in jobs:
        line = p.stdout.readline()  # the handshake: "ready PID" once its memory is on the GPU
        if not line.startswith("ready"):
            raise SystemExit(f"GPU job did not start (exit {p.poll()})")
    return jobs


def stop_gpu_job(jobs: list[subprocess.Popen]) -> None:
    for p in jobs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    for p in jobs:
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(5)
        p.stdout.close()


def cpu_share(seconds: float) -> None:
    print(f"(b) sampler at 1 Hz, 8 fake GPUs, {seconds:.0f} s, with a state store and attribution")
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
        time.sleep(seconds)  # the measured interval itself, not a wait for a condition
        sampler.stop()
        wall = time.monotonic() - w0
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        store.close()
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    cost = sampler.latest().cost
    print(f"    process CPU (getrusage, user+sys): {cpu * 1000:.0f} ms over {wall:.1f} s = {100 * cpu / wall:.2f}% of one core  goal < 1%")
    print(f"    sampler's own figure (thread time / wall): {100 * (cost.cpu_share or 0):.2f}% of one core")
    print(f"    samples {cost.samples}, mean {cost.mean_ms:.2f} ms per sample, GPU pass {cost.nvml_per_gpu_us:.1f} us per GPU (median)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fake", action="store_true", help="the fake 8-GPU NVML even where a driver works")
    ap.add_argument("--seconds", type=float, default=60.0, help="length of each side-by-side run in (a)")
    ap.add_argument("--cadence", type=float, default=1.0, help="seconds between passes (the sampler's interval)")
    ap.add_argument("--procs-every", type=int, default=5, help="the process list is read every N passes")
    ap.add_argument("--old", action="store_true", help="also the previous configuration (processes every pass, memory v2)")
    ap.add_argument("--gpu-job", action="store_true", help="a torch process on every GPU during (a)")
    ap.add_argument("--job-size", type=int, default=4096, help="matmul size of the GPU job")
    ap.add_argument("--cpu-seconds", type=float, default=20.0, help="length of (b); 0 skips it")
    args = ap.parse_args()

    lib: Any
    if args.fake:
        lib, what = FakeNvml(processes={g: [(1000 + g, 61 << 30)] for g in range(8)}), "fake NVML (8 GPUs)"
    else:
        probe = NvmlAdapter()
        if probe.state().ok:
            import pynvml

            lib, what = pynvml, f"real NVML ({probe.state().message})"
        else:
            print(f"real NVML unavailable ({probe.state().message}); using the fake")
            lib, what = FakeNvml(processes={g: [(1000 + g, 61 << 30)] for g in range(8)}), "fake NVML (8 GPUs)"
    print(f"(a) GPU pass, sampler vs raw NVML, same fields, every {args.cadence:g} s, {what}")
    jobs: list[subprocess.Popen] = []
    try:
        if args.gpu_job and not isinstance(lib, FakeNvml):
            jobs = start_gpu_job(NvmlAdapter(lib).gpu_count(), args.job_size)
            print(f"    a torch process on each GPU: pids {[p.pid for p in jobs]}")
        with tempfile.TemporaryDirectory() as tmp:
            res = side_by_side(lib, seconds=args.seconds, cadence=args.cadence, procs_every=args.procs_every,
                               memory_v2=False, label=f"now: memory v1, process list every {args.procs_every} passes",
                               disk=tmp)
            print_side_by_side(res)
            if args.old:
                old = side_by_side(lib, seconds=args.seconds, cadence=args.cadence, procs_every=1, memory_v2=True,
                                   label="before: memory v2, process list every pass", disk=tmp)
                print_side_by_side(old)
                print(f"    sampler's pass now / before: {res['sampler']['mean']:.1f} / {old['sampler']['mean']:.1f} us/GPU"
                      f" = {res['sampler']['mean'] / old['sampler']['mean']:.2f} (means)")
    finally:
        stop_gpu_job(jobs)
    if args.cpu_seconds > 0:
        cpu_share(args.cpu_seconds)


if __name__ == "__main__":
    main()
