"""Telemetry benchmarks; prints figures, asserts nothing.

(a) The sampler's GPU pass against the raw NVML pass of the same fields at
    the same cadence, side by side in one run.  Every ``--cadence`` seconds
    (1 s, the dashboard's) the raw pass, the sampler's pass and the direct
    C calls each run once, spread evenly over the cadence (so each finds the
    driver and the CPU idle for the same time), the order rotated every
    tick.  The raw pass calls nvidia-ml-py's functions: utilisation, memory
    (v1), temperature, power, enforced power limit, SM and memory clocks,
    clock event reasons, and the process list on the ticks the sampler reads
    it (every ``--procs-every`` ticks).  The sampler's pass is
    ``Sampler.sample_once``'s GPU pass (the "Sampler cost" on the GPUs page),
    turning the readings into samples included.  The direct C calls are the
    same calls on the C functions with nothing done with the answers: the
    floor under any Python reader.  Prints µs per GPU (mean, median, p90)
    of each and the ratio (goal <= 1.1).  With ``--old`` it also runs the
    previous configuration (process list every pass, memory v2) against its
    own raw pass; with ``--wrappers`` a second sampler whose pass goes
    through nvidia-ml-py's functions.
(b) The sampler's CPU share at 1 Hz with 8 fake GPUs over ``--cpu-seconds``
    (goal: under 1 % of one core), from resource.getrusage for the whole
    process and from the sampler's own thread-time figure.

    python perf/bench_telemetry.py                 # real NVML when it works, else the fake
    python perf/bench_telemetry.py --fake --seconds 20
    python perf/bench_telemetry.py --gpu-job --seconds 120 --old   # on a GPU machine, a torch
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
from backend.telemetry.nvml_direct import direct_reader  # noqa: E402
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


class FirstGpus:
    """The NVML library with only its first ``n`` GPUs counted (for a one-GPU
    figure on a machine with more); everything else is the library's own."""

    def __init__(self, lib: Any, n: int):
        self._lib, self._n = lib, n

    def __getattr__(self, name: str) -> Any:
        return getattr(self._lib, name)

    def nvmlDeviceGetCount(self) -> int:
        return min(self._n, int(self._lib.nvmlDeviceGetCount()))


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


def direct_pass_fn(lib: Any, handles: list[Any], memory_v2: bool = False) -> Callable[[bool], None] | None:
    """The same calls made on the C functions directly (nvml_direct's readers),
    nothing done with the answers: the floor under any Python reader."""
    v2 = getattr(lib, "nvmlMemory_v2", NVML_MEMORY_V2)
    specs = [
        ("nvmlDeviceGetUtilizationRates", (), {}),
        ("nvmlDeviceGetMemoryInfo", (), {"version": v2} if memory_v2 else {}),
        ("nvmlDeviceGetTemperature", (NVML_TEMPERATURE_GPU,), {}),
        ("nvmlDeviceGetPowerUsage", (), {}),
        ("nvmlDeviceGetEnforcedPowerLimit", (), {}),
        ("nvmlDeviceGetClockInfo", (NVML_CLOCK_SM,), {}),
        ("nvmlDeviceGetClockInfo", (NVML_CLOCK_MEM,), {}),
        ("nvmlDeviceGetCurrentClocksEventReasons", (), {}),
    ]
    readers = [direct_reader(lib, name, args, kw) for name, args, kw in specs]
    procs = direct_reader(lib, "nvmlDeviceGetComputeRunningProcesses_v3", (), {})
    if procs is None or any(r is None for r in readers):
        return None

    def run(with_procs: bool) -> None:
        for h in handles:
            for r in readers:
                r(h)
            if with_procs:
                procs(h)
    return run


def side_by_side(lib: Any, *, seconds: float, cadence: float, procs_every: int, memory_v2: bool,
                 label: str, disk: str, wrappers: bool = False) -> dict[str, Any]:
    """Run the raw pass, the sampler's pass and (where the library allows) the
    direct C calls once per cadence each, spread evenly over it, for
    ``seconds``; return the per-GPU figures of each.  ``wrappers``: also a
    second sampler whose pass goes through nvidia-ml-py's wrappers."""
    tick = [0]

    def make_sampler(direct: bool) -> tuple[NvmlAdapter, Sampler]:
        # the adapter's clock counts ticks, so it reads the process list on exactly the raw pass's ticks
        adapter = NvmlAdapter(lib, source="bench", clock=lambda: tick[0] * cadence,
                              procs_interval_s=procs_every * cadence - 1e-9, memory_v2=memory_v2,
                              direct_calls=direct)
        if not adapter.state().ok:
            raise SystemExit(f"NVML: {adapter.state().message}")
        return adapter, Sampler(adapter, disk_paths=[disk], interval_s=cadence)

    samplers = {"sampler": make_sampler(True)}
    if wrappers:
        samplers["sampler_wrappers"] = make_sampler(False)
    adapter = samplers["sampler"][0]
    handles = [lib.nvmlDeviceGetHandleByIndex(i) for i in range(adapter.gpu_count())]
    lib = getattr(lib, "_lib", lib)  # the raw pass calls the module itself, not through FirstGpus
    n = len(handles)
    direct = direct_pass_fn(lib, handles, memory_v2)
    us: dict[str, list[float]] = {"raw": [], "raw_procs": [], "raw_plain": [], "direct": []}
    reads = {"raw": 0}
    for name, (_a, smp) in samplers.items():
        smp.sample_once()  # start-up and caches, outside the figures
        us[name] = []
        reads[name] = 0
    raw_pass(lib, handles, True, memory_v2)
    if direct is not None:
        direct(True)
    ticks = max(2, int(seconds / cadence))
    nxt = time.monotonic() + cadence
    for k in range(1, ticks + 1):
        tick[0] = k
        with_procs = k % procs_every == 0

        def do_raw() -> None:
            t0 = time.perf_counter()
            raw_pass(lib, handles, with_procs, memory_v2)
            x = (time.perf_counter() - t0) * 1e6 / n
            us["raw"].append(x)
            us["raw_procs" if with_procs else "raw_plain"].append(x)

        def do_direct() -> None:
            t0 = time.perf_counter()
            direct(with_procs)  # type: ignore[misc]
            us["direct"].append((time.perf_counter() - t0) * 1e6 / n)

        def do_sampler(name: str) -> Callable[[], None]:
            a, smp = samplers[name]

            def run() -> None:
                before = a._procs_at
                smp.sample_once()
                us[name].append(smp.pass_costs()[-1])  # this sample's GPU pass, µs per GPU
                reads[name] += a._procs_at != before
            return run

        order: list[Callable[[], None]] = [do_raw] + [do_sampler(name) for name in samplers]
        if direct is not None:
            order.append(do_direct)
        r = k % len(order)
        order = order[r:] + order[:r]  # each variant takes each slot in turn
        for j, fn in enumerate(order):
            delay = nxt + j * cadence / len(order) - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            fn()
        reads["raw"] += with_procs
        nxt += cadence
    r, s = stats(us["raw"]), stats(us["sampler"])
    out = {
        "label": label, "gpus": n, "ticks": ticks, "raw": r, "sampler": s,
        "raw_with_procs": stats(us["raw_procs"]) if us["raw_procs"] else None,
        "raw_without_procs": stats(us["raw_plain"]) if us["raw_plain"] else None,
        "direct": stats(us["direct"]) if us["direct"] else None,
        "sampler_wrappers": stats(us["sampler_wrappers"]) if wrappers else None,
        "ratio_mean": s["mean"] / r["mean"], "ratio_median": s["median"] / r["median"],
        "procs_reads": (reads["raw"], reads["sampler"]),
    }
    return out


def print_side_by_side(res: dict[str, Any]) -> None:
    r, s = res["raw"], res["sampler"]
    print(f"    {res['label']}: {res['ticks']} ticks, {res['gpus']} GPU(s); process list read on "
          f"{res['procs_reads'][0]} ticks by the raw pass, {res['procs_reads'][1]} by the sampler")
    print(f"      raw NVML pass     mean {r['mean']:7.1f}  median {r['median']:7.1f}  p90 {r['p90']:7.1f} us/GPU"
          "  (nvidia-ml-py's functions)")
    print(f"      sampler's pass    mean {s['mean']:7.1f}  median {s['median']:7.1f}  p90 {s['p90']:7.1f} us/GPU")
    w = res.get("sampler_wrappers")
    if w:
        print(f"      sampler, wrappers mean {w['mean']:7.1f}  median {w['median']:7.1f}  p90 {w['p90']:7.1f} us/GPU"
              "  (its pass through nvidia-ml-py's functions)")
    d = res.get("direct")
    if d:
        print(f"      direct C calls    mean {d['mean']:7.1f}  median {d['median']:7.1f}  p90 {d['p90']:7.1f} us/GPU"
              "  (the same calls, no Python around them)")
    if res["raw_with_procs"] and res["raw_without_procs"]:
        print(f"      raw pass with the process list {res['raw_with_procs']['median']:.1f}, "
              f"without {res['raw_without_procs']['median']:.1f} us/GPU (median)")
    print(f"      ratio sampler / raw: {res['ratio_mean']:.3f} (means), {res['ratio_median']:.3f} (medians)  goal <= 1.1")
    if d:
        print(f"      ratio sampler / direct C calls: {s['mean'] / d['mean']:.3f} (means), "
              f"{s['median'] / d['median']:.3f} (medians)")
    if w:
        print(f"      sampler direct / through the wrappers: {s['mean'] / w['mean']:.3f} (means)")


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
    ap.add_argument("--gpus", type=int, default=0, help="only the first N GPUs (0: all)")
    ap.add_argument("--wrappers", action="store_true",
                    help="also a sampler whose pass goes through nvidia-ml-py's functions (direct calls off)")
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
            if args.gpus:
                lib, what = FirstGpus(pynvml, args.gpus), what + f", the first {args.gpus} measured"
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
                               disk=tmp, wrappers=args.wrappers)
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
