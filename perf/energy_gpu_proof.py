"""Real-GPU proof of job energy: NVML's total energy counter against the integrated power readings.

    python3 perf/energy_gpu_proof.py [--gpu 0] [--seconds 45] [--out DIR]

Needs torch (CUDA) and nvidia-ml-py; nothing else outside Specdeck's own modules.

What it does:

1. Reads GPU ``--gpu``'s total energy counter through the adapter (``NvmlAdapter.read_energy``) and times
   that read back to back (wall and CPU time), and through pynvml directly.
2. Starts the sampler (real NVML, its 1 s core pass, the energy counter every ``--energy-every`` seconds
   on its slow thread (2; the dashboard's default is 5)), then, as the "job", loads the GPU with bf16 matrix products for ``--seconds``: 6 s on,
   3 s off, so the power moves between idle and full.  Each of the sampler's counter reads is timed, and
   its core pass per GPU is printed beside them.
3. Measures the job's energy three ways over the same span:
   - the counter read by pynvml at the job's start and end (the reference);
   - ``backend.flows.cost.measure_energy`` on the sampler's readings: the counter's rise (what a job's
     cost uses) and, with the counter left out, the 1 s power readings integrated (the fallback), and the
     same power readings thinned to one in five (a 5 s sampler);
   and prints each with its ratio to the reference.  ``--out``: also writes report.json there.

It changes no setting of the card.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backend.flows import cost  # noqa: E402
from backend.telemetry.nvml import NvmlAdapter  # noqa: E402
from backend.telemetry.sampler import Sampler  # noqa: E402


def load(seconds: float, on_s: float = 6.0, off_s: float = 3.0) -> dict[str, float]:
    """bf16 8192³ products on the current CUDA device, ``on_s`` seconds on and ``off_s`` off, for ``seconds``."""
    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    end = time.time() + seconds
    products = 0
    busy = 0.0
    while time.time() < end:
        phase_end = min(end, time.time() + on_s)
        t0 = time.time()
        while time.time() < phase_end:
            for _ in range(20):
                a @ b
            torch.cuda.synchronize()
            products += 20
        busy += time.time() - t0
        rest = min(off_s, end - time.time())
        if rest > 0:
            time.sleep(rest)
    return {"products": products, "busy_s": busy, "tflops": products * 2 * 8192**3 / max(busy, 1e-9) / 1e12}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=45.0)
    ap.add_argument("--out", default=os.environ.get("OUT"))
    ap.add_argument("--energy-every", type=float, default=2.0, help="the sampler's energy_interval_s")
    args = ap.parse_args(argv)
    import pynvml

    adapter = NvmlAdapter()
    state = adapter.state()
    if not state.ok:
        print(f"NVML not usable: {state.message}")
        return 1
    g = args.gpu
    st = adapter.static()[g]
    print(f"GPU {g}: {st.name}, {state.message}, nvidia-ml-py {getattr(pynvml, '__version__', '?')}")

    first = adapter.read_energy()
    mj, why = first.get(g, (None, "no such GPU"))
    print(f"energy counter (adapter.read_energy): {mj} mJ" + (f" - N/A: {why}" if mj is None else
                                                           f" = {mj / 3.6e9:,.3f} kWh since the driver was loaded"))
    if mj is None:
        return 1
    times, cpu = [], []
    per = max(1, adapter.gpu_count())
    for _ in range(50):
        t0, c0_ = time.perf_counter(), time.thread_time()
        adapter.read_energy()
        times.append((time.perf_counter() - t0) * 1e6 / per)
        cpu.append((time.thread_time() - c0_) * 1e6 / per)
    read_us = statistics.median(times)
    direct = adapter._energy_call[1] != getattr(adapter._lib, "nvmlDeviceGetTotalEnergyConsumption", None)
    print(f"read_energy back to back: median {read_us:.1f} µs wall, {statistics.median(cpu):.1f} µs CPU per GPU "
          f"over 50 reads ({adapter.gpu_count()} GPU(s), "
          f"{'the C function called directly' if direct else 'through the nvidia-ml-py wrapper'})")
    in_sampler: list[tuple[float, float]] = []
    plain_read = adapter.read_energy

    def timed_read():
        t0, c0_ = time.perf_counter(), time.thread_time()
        try:
            return plain_read()
        finally:
            in_sampler.append(((time.perf_counter() - t0) * 1e6 / per, (time.thread_time() - c0_) * 1e6 / per))

    adapter.read_energy = timed_read

    import torch

    torch.cuda.set_device(g)
    h = pynvml.nvmlDeviceGetHandleByIndex(g)
    sampler = Sampler(adapter, interval_s=1.0, slow_interval_s=3600.0, pcie_interval_s=None,
                      energy_interval_s=args.energy_every).start()
    time.sleep(3.0)  # idle readings before the job
    t_start = time.time()
    c0 = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
    work = load(args.seconds)
    c1 = pynvml.nvmlDeviceGetTotalEnergyConsumption(h)
    t_end = time.time()
    time.sleep(2.5)  # the sampler's readings past the end
    core_us = sampler.cost().nvml_per_gpu_us
    sampler.stop()
    walls = sorted(w for w, _ in in_sampler)
    print(f"in the sampler: {len(in_sampler)} counter reads (every {sampler.energy_interval_s:g} s on its slow "
          f"thread), median {statistics.median(walls):.1f} µs wall, "
          f"{statistics.median(c for _, c in in_sampler):.1f} µs CPU per GPU; its 1 s core pass: median "
          f"{core_us:.1f} µs per GPU")
    ref_j = (c1 - c0) / 1000.0
    span = t_end - t_start
    readings = cost.telemetry_power(sampler)
    by_counter = cost.measure_energy(readings, [g], t_start, t_end)
    power_only = lambda gpu, since, until: sampler.history(gpu, "power_w", since, until)  # noqa: E731
    by_power = cost.measure_energy(power_only, [g], t_start, t_end)
    s = sampler.history(g, "power_w", t_start - 5, t_end + 5)
    thin = SimpleNamespace(t=s.t[::5], value=s.value[::5], resolution_s=5.0)
    by_thin = cost.measure_energy(lambda gpu, since, until: thin, [g], t_start, t_end)
    n = len(sampler.history(g, "power_w", t_start, t_end).t)

    def row(label: str, e: cost.Energy) -> dict:
        j = e.kwh * 3.6e6 if e.kwh is not None else None
        ratio = j / ref_j if j is not None and ref_j else None
        print(f"  {label:<44} {j if j is not None else float('nan'):>10,.1f} J   "
              f"{(ratio if ratio is not None else float('nan')):.4f}x   [{e.method or 'N/A'}] {e.how}")
        return {"label": label, "joules": j, "ratio_to_reference": ratio, "method": e.method, "how": e.how}

    print(f"job: {span:.1f} s of bf16 matmul load (6 s on / 3 s off), {work['tflops']:.0f} TFLOP/s while on; "
          f"mean power {ref_j / span:.0f} W by the counter; {n} sampler readings at 1 s")
    print(f"  {'reference: pynvml counter at start and end':<44} {ref_j:>10,.1f} J   1.0000x")
    rows = [row(f"sampler: energy counter rise ({args.energy_every:g} s reads)", by_counter), row("sampler: 1 s power readings integrated", by_power),
            row("sampler: power readings thinned to 5 s", by_thin)]
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "report.json").write_text(json.dumps({
            "gpu": g, "name": st.name, "driver": state.driver_version, "span_s": span, "reference_j": ref_j,
            "read_energy_us_per_gpu": read_us, "sampler_reads_us": in_sampler, "core_pass_us_per_gpu": core_us,
            "load": work, "readings": n, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
