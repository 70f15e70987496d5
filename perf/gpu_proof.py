"""Real-GPU proof: the sampler with the real NVML adapter while a torch job loads the GPUs.

    python3 perf/gpu_proof.py --out "$OUT"        (or OUT=... python3 perf/gpu_proof.py)

Needs torch (CUDA) and nvidia-ml-py; psutil is optional (host CPU/memory and
network are then N/A, and process trees are read from /proc).

What it does:

1. Starts a job as a process tree: a launcher (the managed pid, like a
   server) with one worker child per visible GPU doing bf16 matmuls for
   ``--job-seconds`` (like tensor-parallel workers, children of the server).
2. Runs the Sampler with the real NVML adapter at 1 Hz for ``--seconds``,
   with the launcher as the managed job, recording every snapshot.
3. Measures, for the same core fields: the sampler's GPU pass per GPU at
   1 s (median, p90, every sample), the adapter's pass and each NVML call at
   1 s and in a loop, raw pynvml calls (in a loop, each call after 1 s idle,
   and a whole pass after 1 s / at once / 10 ms / 100 ms since the last),
   one ``nvidia-smi --query-gpu`` call, and one PCIe throughput call (the
   slow field kept out of the 1 s path).
4. Writes report.json, report.txt and frames.jsonl (one line per sample)
   into the output directory, and ends the job tree.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import is_dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from backend.telemetry.model import GIB  # noqa: E402
from backend.telemetry.nvml import NvmlAdapter  # noqa: E402
from backend.telemetry.sampler import Sampler  # noqa: E402

WORKER = r"""
import os, sys, time
import torch
seconds = float(sys.argv[1]); size = int(sys.argv[2]); hold_gib = float(sys.argv[3])
dev = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")  # CUDA_VISIBLE_DEVICES picks the GPU
a = torch.randn(size, size, device=dev, dtype=torch.bfloat16)
b = torch.randn(size, size, device=dev, dtype=torch.bfloat16)
ballast = torch.empty(int(hold_gib * (1 << 30)), dtype=torch.uint8, device=dev)  # memory to attribute
if dev.type == "cuda":
    torch.cuda.synchronize()
print("ready", os.getpid(), os.environ.get("CUDA_VISIBLE_DEVICES"), flush=True)
end = time.time() + seconds
n = 0
while time.time() < end:
    for _ in range(20):
        c = a @ b
    if dev.type == "cuda":
        torch.cuda.synchronize()
    n += 20
print("done", os.getpid(), n, flush=True)
"""

LAUNCHER = r"""
import os, subprocess, sys, signal
worker, seconds, size, hold, ngpu = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
kids = []
for i in range(ngpu):
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(i), CUDA_DEVICE_ORDER="PCI_BUS_ID")
    kids.append(subprocess.Popen([sys.executable, "-c", worker, seconds, size, hold], env=env))
def stop(*_):
    for k in kids:
        k.terminate()
signal.signal(signal.SIGTERM, stop)
rc = max(k.wait() for k in kids)
sys.exit(rc)
"""


def plain(o: Any) -> Any:
    if is_dataclass(o) and not isinstance(o, type):
        return {f: plain(getattr(o, f)) for f in o.__dataclass_fields__}
    if isinstance(o, (dict, MappingProxyType)):
        return {str(k): plain(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [plain(v) for v in o]
    if hasattr(o, "value") and o.__class__.__module__.startswith("backend"):
        return o.value
    return o


def raw_core_us(pynvml: Any, handles: list, passes: int) -> float:
    """µs per GPU of the core fields read straight through pynvml, in a loop."""
    t0 = time.perf_counter()
    for _ in range(passes):
        for h in handles:
            pynvml.nvmlDeviceGetUtilizationRates(h)
            pynvml.nvmlDeviceGetMemoryInfo(h)  # v1, as the adapter reads it
            pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
            pynvml.nvmlDeviceGetPowerUsage(h)
            pynvml.nvmlDeviceGetEnforcedPowerLimit(h)
            pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
            pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)
            pynvml.nvmlDeviceGetCurrentClocksEventReasons(h)
            pynvml.nvmlDeviceGetComputeRunningProcesses_v3(h)
    return (time.perf_counter() - t0) * 1e6 / passes / max(1, len(handles))


def raw_pynvml(passes: int) -> dict[str, Any]:
    import pynvml

    pynvml.nvmlInit()
    hs = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    per_gpu = raw_core_us(pynvml, hs, passes)
    # each call on its own after 1 s idle (as the sampler makes them once a second)
    calls = {
        "utilization": lambda h: pynvml.nvmlDeviceGetUtilizationRates(h),
        "memory_v1": lambda h: pynvml.nvmlDeviceGetMemoryInfo(h),
        "memory_v2": lambda h: pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2),  # for comparison; not in the pass below
        "temperature": lambda h: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU),
        "power": lambda h: pynvml.nvmlDeviceGetPowerUsage(h),
        "power_limit": lambda h: pynvml.nvmlDeviceGetEnforcedPowerLimit(h),
        "clock_sm": lambda h: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM),
        "clock_mem": lambda h: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM),
        "event_reasons": lambda h: pynvml.nvmlDeviceGetCurrentClocksEventReasons(h),
        "processes_v3": lambda h: pynvml.nvmlDeviceGetComputeRunningProcesses_v3(h),
    }
    cold: dict[str, list[float]] = {k: [] for k in calls}
    for _ in range(8):
        time.sleep(1.0)
        for k, fn in calls.items():
            t1 = time.perf_counter()
            for h in hs:
                fn(h)
            cold[k].append((time.perf_counter() - t1) * 1e6 / len(hs))

    def one_pass() -> float:
        t1 = time.perf_counter()
        for h in hs:
            for k, fn in calls.items():
                if k != "memory_v2":
                    fn(h)
        return (time.perf_counter() - t1) * 1e6 / len(hs)

    # Where the 1 s penalty lives: a whole pass after 1 s idle, then again at once,
    # after 10 ms and after 100 ms (driver-side caching of readings), and a pass
    # after 1 s idle with the CPU kept busy for 5 ms first (CPU wake-up / caches).
    gaps: dict[str, list[float]] = {"after_1s": [], "again_at_once": [], "after_10ms": [], "after_100ms": [], "after_1s_cpu_spun_5ms": []}
    for _ in range(8):
        time.sleep(1.0)
        gaps["after_1s"].append(one_pass())
        gaps["again_at_once"].append(one_pass())
        time.sleep(0.01)
        gaps["after_10ms"].append(one_pass())
        time.sleep(0.1)
        gaps["after_100ms"].append(one_pass())
        time.sleep(1.0)
        spin_end = time.perf_counter() + 0.005
        while time.perf_counter() < spin_end:
            pass
        gaps["after_1s_cpu_spun_5ms"].append(one_pass())
    t0 = time.perf_counter()
    pynvml.nvmlDeviceGetPcieThroughput(hs[0], pynvml.NVML_PCIE_UTIL_TX_BYTES)
    pcie_ms = (time.perf_counter() - t0) * 1000
    return {
        "raw_pynvml_us_per_gpu": per_gpu,
        "raw_pynvml_cold_us_per_gpu_by_call": {k: statistics.median(v) for k, v in cold.items()},
        "raw_pynvml_cold_us_per_gpu_total": sum(statistics.median(v) for k, v in cold.items() if k != "memory_v2"),
        "raw_pynvml_pass_us_per_gpu_by_gap": {k: {"median": statistics.median(v), "max": max(v)} for k, v in gaps.items()},
        "pcie_throughput_one_call_ms": pcie_ms,
        "passes": passes,
    }


def nvidia_smi(calls: int) -> dict[str, Any]:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return {"nvidia_smi": "not found"}
    q = (
        "utilization.gpu,utilization.memory,memory.used,memory.total,temperature.gpu,power.draw,"
        "power.limit,clocks.sm,clocks.mem,clocks_event_reasons.active"
    )
    argv = [exe, f"--query-gpu={q}", "--format=csv,noheader,nounits"]
    times = []
    out = ""
    for _ in range(calls):
        t0 = time.perf_counter()
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
        times.append((time.perf_counter() - t0) * 1000)
        out = r.stdout.strip() or r.stderr.strip()
    return {"nvidia_smi_ms_per_call_median": statistics.median(times), "nvidia_smi_calls": calls, "nvidia_smi_last_output": out}


def adapter_cost(adapter: NvmlAdapter, passes: int, gap_s: float = 0.0) -> dict[str, Any]:
    """The adapter's core pass, µs per GPU, timed from outside (``passes`` in a
    row, or with ``gap_s`` of sleep between passes)."""
    n = adapter.gpu_count()
    xs = []
    for _ in range(passes):
        if gap_s:
            time.sleep(gap_s)
        t0 = time.perf_counter()
        adapter.sample()
        xs.append((time.perf_counter() - t0) * 1e6 / max(1, n))
    xs.sort()
    return {"adapter_us_per_gpu_median": statistics.median(xs), "adapter_us_per_gpu_p90": xs[int(0.9 * (len(xs) - 1))], "passes": passes, "gap_s": gap_s}


def fmt_calls(t: dict[str, dict[str, float]]) -> str:
    order = ["util", "memory", "temp", "power", "plimit", "sm_clock", "mem_clock", "throttle", "procs", "rest", "pass"]
    return ", ".join(f"{k} {t[k]['median']:.1f}/{t[k]['p90']:.1f}" for k in order if k in t)


def main() -> int:
    ap = argparse.ArgumentParser(description="sampler with real NVML under a torch job")
    ap.add_argument("--out", default=os.environ.get("OUT") or "gpu_proof_out")
    ap.add_argument("--seconds", type=float, default=30.0, help="how long the sampler records")
    ap.add_argument("--job-seconds", type=float, default=90.0, help="the job outlives the sampler and the 1 s cadence comparisons")
    ap.add_argument("--size", type=int, default=8192, help="matmul size")
    ap.add_argument("--hold-gib", type=float, default=20.0, help="extra memory each worker holds")
    ap.add_argument("--fake", action="store_true", help="dry run of this script with the fake NVML and CPU workers")
    ap.add_argument("--no-supervisor", action="store_true", help="start the job as a plain process tree")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"started": time.time(), "argv": sys.argv}
    try:
        import psutil  # noqa: F401

        report["psutil"] = True
    except ImportError:
        report["psutil"] = False

    launcher_pid: list[int] = []
    if args.fake:
        from backend.telemetry.fake import FakeNvml

        follow = lambda: [("proof-job", "training", launcher_pid[0])] if launcher_pid else []  # noqa: E731
        adapter = NvmlAdapter(FakeNvml(gpus=2, follow=follow), source="fake")
        args.size, args.hold_gib = min(args.size, 256), 0.0
    else:
        adapter = NvmlAdapter()  # the sampler's figure is taken without per-call timing, as in the dashboard
    st = adapter.state()
    report["nvml_state"] = plain(st)
    report["static"] = plain(adapter.static())
    print("NVML:", st.status.value, st.message, flush=True)
    if not st.ok:
        (out / "report.json").write_text(json.dumps(report, indent=2))
        return 2
    ngpu = adapter.gpu_count()
    report["idle_adapter_cost"] = adapter_cost(adapter, 200)

    job_argv = [sys.executable, "-c", LAUNCHER, WORKER, str(args.job_seconds), str(args.size), str(args.hold_gib), str(ngpu)]
    supervised = report["psutil"] and not args.no_supervisor
    if supervised:
        # the job is started, watched and stopped by Specdeck's own supervisor, as in the dashboard
        from specdeck_types.process import Kind, ProcessSpec
        from backend.supervisor.loop import SupervisorLoop
        from backend.supervisor.supervisor import Supervisor
        from state import Store

        work = out / "workspace"
        store = Store(work / "state.db")
        sup = Supervisor(store, work / "run")
        sup.register(ProcessSpec(name="proof-job", kind=Kind.TRAINING, argv=tuple(job_argv),
                                 log_path=str(out / "proof-job.log"), stop_grace_s=20.0))
        loop = SupervisorLoop(sup, interval_s=1.0)
        loop.start()
        view = sup.start("proof-job", actor="gpu-proof", source="bench")
        for _ in range(100):
            if view.pid:
                break
            time.sleep(0.1)
            sup.poll()
            view = sup.view("proof-job")
        job_pid = view.pid
        managed = sup.views
    else:
        launcher = subprocess.Popen(job_argv, start_new_session=True)
        job_pid = launcher.pid
        managed = lambda: [("proof-job", "training", launcher.pid, "RUNNING" if launcher.poll() is None else "EXITED")]  # noqa: E731
    launcher_pid.append(job_pid)
    report["job"] = {"name": "proof-job", "kind": "training", "launcher_pid": job_pid, "gpus": ngpu,
                     "supervised": bool(supervised)}
    sampler = Sampler(adapter, disk_paths=[str(out)], managed=managed, interval_s=1.0, slow_interval_s=10.0, pcie_interval_s=15.0, idle_samples=5)
    frames = []
    try:
        time.sleep(3.0)  # let the job start its kernels before sampling
        sampler.start()
        t_end = time.monotonic() + args.seconds
        last = None
        while time.monotonic() < t_end:
            time.sleep(0.25)
            snap = sampler.latest()
            if snap is not None and snap is not last:
                last = snap
                frames.append(snap)
                g = snap.gpus[0] if snap.gpus else None
                if g is not None and len(frames) % 5 == 0:
                    print(f"t+{len(frames)}s gpu0 util {g.util_gpu} power {g.power_w} mem {round(g.mem_used / GIB, 1) if g.mem_used else None} GiB"
                          f" procs {[p.pid for p in (g.processes or ())]}", flush=True)
        sampler.stop()
        report["sampler_pass_us_per_gpu_each_sample"] = sampler.pass_costs()
        # per-call timings (two clock reads per call) at the same 1 s cadence, then in a loop
        adapter.set_call_timing(True)
        report["busy_adapter_cost_1s_gap"] = adapter_cost(adapter, 12, gap_s=1.0)
        report["busy_adapter_1s_gap_call_times_us_per_gpu"] = adapter.call_times(reset=True)
        report["busy_adapter_cost"] = adapter_cost(adapter, 200)
        report["busy_adapter_call_times_us_per_gpu"] = adapter.call_times(reset=True)
        adapter.set_call_timing(False)
        if not args.fake:
            report.update(raw_pynvml(200))
        report.update(nvidia_smi(10))
    finally:
        sampler.stop()
        if supervised:
            v = sup.view("proof-job")
            if v is not None and v.active:
                v = sup.stop("proof-job", actor="gpu-proof", source="bench", wait=True)
            loop.stop()
            job_exit = v.exit_code if v is not None else None
            report["job"]["state_history"] = [(e.to_state, e.exit_code, e.detail) for e in sup.history("proof-job")]
            sup.close()
            store.close()
        else:
            if launcher.poll() is None:
                try:
                    os.killpg(launcher.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
                try:
                    launcher.wait(20)
                except subprocess.TimeoutExpired:
                    os.killpg(launcher.pid, signal.SIGKILL)
                    launcher.wait(10)
            job_exit = launcher.returncode
    report["job"]["launcher_exit"] = job_exit

    final = frames[-1] if frames else None
    busy = [f for f in frames if f.attribution and f.attribution.jobs]
    peak = {}
    for f in frames:
        for g in f.gpus:
            p = peak.setdefault(g.index, {"util_max": None, "power_max_w": None, "mem_max_gib": None})
            for key, v in (("util_max", g.util_gpu), ("power_max_w", g.power_w), ("mem_max_gib", g.mem_used / GIB if g.mem_used else None)):
                if v is not None and (p[key] is None or v > p[key]):
                    p[key] = v
    attributed = busy[-1].attribution if busy else None
    report["summary"] = {
        "samples": len(frames),
        "per_gpu_peak": peak,
        "job_summaries": [j.summary for j in attributed.jobs] if attributed else [],
        "job_pids_on_gpus": [list(j.pids) for j in attributed.jobs] if attributed else [],
        "sampler_cost": plain(final.cost) if final else None,
        "alerts_seen": sorted({a.message for f in frames for a in f.alerts}),
        "versioned_calls": adapter.chosen(),
    }
    report["busy_snapshot"] = plain(busy[len(busy) // 2]) if busy else None
    with open(out / "frames.jsonl", "w") as fh:
        for f in frames:
            fh.write(json.dumps(plain(f)) + "\n")
    (out / "report.json").write_text(json.dumps(report, indent=2, default=str))

    s = report["summary"]
    lines = [
        f"NVML: {st.message} (nvml {st.nvml_version})",
        f"GPUs: {', '.join(f'{g.index}: {g.name} {g.memory_total / GIB:.1f} GiB' for g in adapter.static())}",
        f"job: launcher pid {job_pid}, one worker per GPU"
        f"{', started and stopped by the Specdeck supervisor' if supervised else ''}; exit {job_exit}",
        f"samples recorded: {s['samples']}",
        *([f"supervisor states: {' -> '.join(str(h[0]) for h in report['job']['state_history'])}"]
          if report["job"].get("state_history") else []),
    ]
    for i, p in sorted(s["per_gpu_peak"].items()):
        lines.append(f"GPU {i}: peak util {p['util_max']}%, peak power {p['power_max_w']} W, peak memory {p['mem_max_gib'] and round(p['mem_max_gib'], 1)} GiB")
    lines.append(f"attribution: {s['job_summaries']} pids {s['job_pids_on_gpus']}")
    c = s["sampler_cost"] or {}
    nan = float("nan")
    each = report.get("sampler_pass_us_per_gpu_each_sample") or []
    gap = report.get("busy_adapter_cost_1s_gap", {})
    lines += [
        f"sampler at 1 s: GPU pass median {c.get('nvml_per_gpu_us') or nan:.1f} us/GPU, p90 {c.get('nvml_per_gpu_us_p90') or nan:.1f} us/GPU"
        f" over {len(each)} samples (goal <= 100); whole sample median {c.get('median_ms') or nan:.2f} ms; CPU share {c.get('cpu_share') or nan:.4f}",
        f"  each sample's GPU pass, us/GPU: {[round(x, 1) for x in each]}",
        f"adapter core pass: idle {report['idle_adapter_cost']['adapter_us_per_gpu_median']:.1f} us/GPU, busy {report.get('busy_adapter_cost', {}).get('adapter_us_per_gpu_median', nan):.1f} us/GPU in a loop;"
        f" busy with 1 s between passes (main thread, per-call timing on) median {gap.get('adapter_us_per_gpu_median', nan):.1f}, p90 {gap.get('adapter_us_per_gpu_p90', nan):.1f} us/GPU",
        f"  per call in a loop, us/GPU median/p90: {fmt_calls(report.get('busy_adapter_call_times_us_per_gpu', {}))}",
        f"  per call at 1 s (main thread, {gap.get('passes')} passes), us/GPU median/p90: {fmt_calls(report.get('busy_adapter_1s_gap_call_times_us_per_gpu', {}))}",
        f"raw pynvml same fields: {report.get('raw_pynvml_us_per_gpu', float('nan')):.1f} us/GPU in a loop,"
        f" {report.get('raw_pynvml_cold_us_per_gpu_total', float('nan')):.1f} us/GPU at a 1 s cadence",
        f"  by call at 1 s cadence: { {k: round(v, 1) for k, v in (report.get('raw_pynvml_cold_us_per_gpu_by_call') or {}).items()} }",
        "  whole raw pass by gap since the last, us/GPU median (max): "
        + ", ".join(f"{k} {v['median']:.1f} ({v['max']:.1f})" for k, v in (report.get("raw_pynvml_pass_us_per_gpu_by_gap") or {}).items()),
        f"nvidia-smi --query-gpu: {report.get('nvidia_smi_ms_per_call_median', 'n/a')} ms per call",
        f"PCIe throughput, one call: {report.get('pcie_throughput_one_call_ms', float('nan')):.1f} ms",
        f"versioned calls chosen: {s['versioned_calls']}",
        f"alerts seen: {s['alerts_seen']}",
    ]
    (out / "report.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
