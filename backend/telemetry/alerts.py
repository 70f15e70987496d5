"""GPU alerts as pure functions of snapshots.

* memory nearly full: used / total above ``mem_threshold`` (95 %)
* thermal or power throttling, from the decoded clock-event reasons
* a GPU idle (utilisation below ``idle_util`` for ``idle_samples`` readings
  in a row) while a job attributed to it is RUNNING
* a lost GPU
"""

from __future__ import annotations

from typing import Mapping, Sequence

from backend.telemetry.attribution import Attribution
from backend.telemetry.model import GIB, Alert, GpuSample
from backend.telemetry.nvml import POWER_REASONS, THERMAL_REASONS, THROTTLE_LABELS

MEM_THRESHOLD = 0.95
IDLE_UTIL = 5.0
IDLE_SAMPLES = 30


def memory_alerts(gpus: Sequence[GpuSample], threshold: float = MEM_THRESHOLD) -> list[Alert]:
    out = []
    for g in gpus:
        frac = g.mem_fraction
        if frac is not None and frac > threshold:
            out.append(
                Alert(
                    "warning",
                    "memory",
                    f"GPU {g.index} memory {frac * 100:.0f}% full"
                    f" ({g.mem_used / GIB:.1f} of {g.mem_total / GIB:.1f} GiB)",  # type: ignore[operator]
                    g.index,
                )
            )
    return out


def throttle_alerts(gpus: Sequence[GpuSample]) -> list[Alert]:
    out = []
    for g in gpus:
        if not g.throttle:
            continue
        reasons = set(g.throttle)
        thermal = sorted(reasons & THERMAL_REASONS)
        power = sorted(reasons & POWER_REASONS)
        if thermal:
            sev = "error" if "hw_thermal" in thermal else "warning"
            temp = f" at {g.temp_c:.0f} °C" if g.temp_c is not None else ""
            out.append(Alert(sev, "thermal", f"GPU {g.index} thermal throttling{temp} ({', '.join(THROTTLE_LABELS[r] for r in thermal)})", g.index))
        if power:
            sev = "error" if "hw_power_brake" in power else "warning"
            pw = ""
            if g.power_w is not None and g.power_limit_w is not None:
                pw = f" at {g.power_w:.0f} of {g.power_limit_w:.0f} W"
            out.append(Alert(sev, "power", f"GPU {g.index} power throttling{pw} ({', '.join(THROTTLE_LABELS[r] for r in power)})", g.index))
        if "hw_slowdown" in reasons and not thermal and not power:
            out.append(Alert("error", "thermal", f"GPU {g.index} hardware slowdown (thermal or power brake)", g.index))
    return out


def idle_alerts(
    recent_util: Mapping[int, Sequence[float | None]],
    attribution: Attribution | None,
    *,
    idle_util: float = IDLE_UTIL,
    samples: int = IDLE_SAMPLES,
    job_states: Mapping[str, str] | None = None,
) -> list[Alert]:
    """``recent_util``: per GPU, the latest utilisation readings, oldest first.

    A job's state comes from ``job_states`` when given, else from the
    attribution (which carries the state handed to it with the managed list).
    A missing reading breaks the run: N/A is not idle.
    """
    if attribution is None:
        return []
    states = {j.name: j.state for j in attribution.jobs}
    if job_states:
        states.update(job_states)
    out = []
    for gpu, utils in sorted(recent_util.items()):
        tail = list(utils)[-samples:]
        if len(tail) < samples or any(u is None or u >= idle_util for u in tail):
            continue
        for job in attribution.jobs_on(gpu):
            if str(states.get(job) or "").upper() == "RUNNING":
                out.append(
                    Alert(
                        "warning",
                        "idle",
                        f"GPU {gpu} idle (< {idle_util:.0f}% for {samples} readings) while {job} is RUNNING",
                        gpu,
                    )
                )
    return out


def lost_alerts(gpus: Sequence[GpuSample]) -> list[Alert]:
    return [
        Alert("error", "lost", f"GPU {g.index} is lost: {g.na.get('util_gpu', 'no answer from NVML')}", g.index)
        for g in gpus
        if g.lost
    ]


def gpu_alerts(
    gpus: Sequence[GpuSample],
    recent_util: Mapping[int, Sequence[float | None]],
    attribution: Attribution | None,
    *,
    mem_threshold: float = MEM_THRESHOLD,
    idle_util: float = IDLE_UTIL,
    idle_samples: int = IDLE_SAMPLES,
    job_states: Mapping[str, str] | None = None,
) -> list[Alert]:
    order = {"error": 0, "warning": 1, "info": 2}
    alerts = (
        lost_alerts(gpus)
        + memory_alerts(gpus, mem_threshold)
        + throttle_alerts(gpus)
        + idle_alerts(recent_util, attribution, idle_util=idle_util, samples=idle_samples, job_states=job_states)
    )
    return sorted(alerts, key=lambda a: (order.get(a.severity, 3), a.gpu_index if a.gpu_index is not None else -1))
