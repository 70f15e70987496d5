from __future__ import annotations

from backend.telemetry.alerts import gpu_alerts, idle_alerts, memory_alerts, throttle_alerts
from backend.telemetry.attribution import attribute
from backend.telemetry.model import GpuProcess, GpuSample

GIB = 1024**3


def gpu(i, **kw):
    base = dict(index=i, t=0.0, uuid=f"GPU-{i}", name="NVIDIA H200", bus_id=None)
    base.update(kw)
    return GpuSample(**base)


def test_memory_nearly_full_only_above_95_percent():
    gs = [gpu(0, mem_used=int(135 * GIB), mem_total=140 * GIB), gpu(1, mem_used=int(133 * GIB), mem_total=140 * GIB), gpu(2)]
    alerts = memory_alerts(gs)
    assert [a.gpu_index for a in alerts] == [0]
    assert "96% full" in alerts[0].message and alerts[0].severity == "warning"


def test_thermal_and_power_throttling():
    gs = [
        gpu(0, throttle=("sw_power_cap",), power_w=699.0, power_limit_w=700.0),
        gpu(1, throttle=("hw_thermal",), temp_c=91.0),
        gpu(2, throttle=("idle",)),
        gpu(3, throttle=None),
    ]
    alerts = throttle_alerts(gs)
    assert [(a.gpu_index, a.kind, a.severity) for a in alerts] == [(0, "power", "warning"), (1, "thermal", "error")]
    assert "699 of 700 W" in alerts[0].message and "91 °C" in alerts[1].message


def test_idle_while_running_needs_n_idle_readings_and_a_running_job():
    attr = attribute([GpuProcess(2, 100, GIB), GpuProcess(4, 200, GIB)], [("main", "server", 100, "RUNNING"), ("old", "training", 200, "STOPPING")], parents={})
    recent = {2: [1.0] * 30, 4: [0.0] * 30, 5: [0.0] * 30}
    alerts = idle_alerts(recent, attr, samples=30)
    assert [(a.gpu_index, a.kind) for a in alerts] == [(2, "idle")]
    assert "main is RUNNING" in alerts[0].message
    assert idle_alerts({2: [1.0] * 29}, attr, samples=30) == []  # not long enough
    assert idle_alerts({2: [1.0] * 29 + [50.0]}, attr, samples=30) == []  # busy again
    assert idle_alerts({2: [None] + [1.0] * 29}, attr, samples=30) == []  # N/A is not idle
    assert idle_alerts(recent, attr, samples=30, job_states={"main": "STARTING"}) == []


def test_gpu_alerts_sorted_errors_first_and_lost():
    gs = [gpu(0, mem_used=139 * GIB, mem_total=140 * GIB), gpu(1, lost=True, na={"util_gpu": "GPU is lost"})]
    alerts = gpu_alerts(gs, {}, None)
    assert [(a.severity, a.kind) for a in alerts] == [("error", "lost"), ("warning", "memory")]
