"""The metric names and labels Specdeck reads through Prometheus (and exports in).

GPU exporters:

- NVIDIA's DCGM exporter: ``DCGM_FI_DEV_*`` gauges with labels ``gpu`` (index), ``UUID``,
  ``pci_bus_id``, ``device``, ``modelName``, ``Hostname``, and ``pod``/``namespace``/``container``
  (Kubernetes) or ``hpc_job`` where it maps GPUs to workloads; memory in MiB.
- nvitop-exporter: ``gpu_*`` gauges named with their unit (prometheus_client appends it:
  ``gpu_utilization_Percentage``, ``gpu_memory_used_MiB``, ``gpu_power_usage_W`` ...), labels
  ``hostname``, ``index``, ``devicename``, ``uuid``; per process ``process_gpu_memory_MiB`` and
  ``process_info_info`` with ``pid`` and ``username``.
- Specdeck's own exporter (``promexport.py``) writes nvitop-exporter's names, plus
  ``specdeck_gpu_job_info`` (which managed job holds a pid), ``specdeck_exporter_info`` and
  ``specdeck_gpu_energy_consumption_mJ_total`` (NVML's total energy counter).

SGLang servers: the scheduler gauges ``sglang:*`` (every version in reference/sglang.md has
``gen_throughput``, ``num_running_reqs``, ``num_queue_reqs``, ``spec_accept_length``,
``token_usage`` and ``cache_hit_rate``; ``spec_accept_rate`` from 0.5.4).
"""

from __future__ import annotations

import os
import socket

from backend.telemetry.promql import PromSeries, parse_value

MIB = 1024**2

# our GpuSample field -> (metric, scale to our unit)
DCGM: dict[str, tuple[str, float]] = {
    "util_gpu": ("DCGM_FI_DEV_GPU_UTIL", 1.0),
    "util_mem": ("DCGM_FI_DEV_MEM_COPY_UTIL", 1.0),
    "mem_used": ("DCGM_FI_DEV_FB_USED", MIB),
    "mem_free": ("DCGM_FI_DEV_FB_FREE", MIB),
    "mem_reserved": ("DCGM_FI_DEV_FB_RESERVED", MIB),
    "temp_c": ("DCGM_FI_DEV_GPU_TEMP", 1.0),
    "power_w": ("DCGM_FI_DEV_POWER_USAGE", 1.0),
    "power_limit_w": ("DCGM_FI_DEV_POWER_MGMT_LIMIT", 1.0),
    "sm_clock_mhz": ("DCGM_FI_DEV_SM_CLOCK", 1.0),
    "mem_clock_mhz": ("DCGM_FI_DEV_MEM_CLOCK", 1.0),
}
NVITOP: dict[str, tuple[str, float]] = {
    "util_gpu": ("gpu_utilization_Percentage", 1.0),
    "util_mem": ("gpu_memory_utilization_Percentage", 1.0),
    "mem_used": ("gpu_memory_used_MiB", MIB),
    "mem_total": ("gpu_memory_total_MiB", MIB),
    "mem_free": ("gpu_memory_free_MiB", MIB),
    "temp_c": ("gpu_temperature_C", 1.0),
    "power_w": ("gpu_power_usage_W", 1.0),
    "power_limit_w": ("gpu_power_limit_W", 1.0),
    "sm_clock_mhz": ("gpu_clock_sm_MHz", 1.0),
    "mem_clock_mhz": ("gpu_clock_memory_MHz", 1.0),
}
NVITOP_PROC_MEM = "process_gpu_memory_MiB"
NVITOP_PROC_INFO = "process_info_info"
SPECDECK_JOB = "specdeck_gpu_job_info"
SPECDECK_INFO = "specdeck_exporter_info"
# NVML's total energy counter (mJ since the driver was loaded) as a Prometheus counter: exposed with
# ``_total``; it restarts from 0 on a driver reload, which rate() and increase() take as a counter reset.
# DCGM exporter's own is DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (mJ); nvitop-exporter has none.
SPECDECK_ENERGY = "specdeck_gpu_energy_consumption_mJ"
SGLANG_FIELDS = ("gen_throughput", "num_running_reqs", "num_queue_reqs", "spec_accept_length",
                 "spec_accept_rate", "token_usage", "cache_hit_rate")
SGLANG = {f"sglang:{f}": f for f in SGLANG_FIELDS}
# fields summed over data-parallel ranks (the others are averaged)
SGLANG_SUMMED = frozenset({"gen_throughput", "num_running_reqs", "num_queue_reqs"})

BY_METRIC: dict[str, tuple[str, str, float]] = {}  # metric -> (family, field, scale)
for _fam, _table in (("dcgm", DCGM), ("nvitop", NVITOP)):
    for _field, (_metric, _scale) in _table.items():
        BY_METRIC[_metric] = (_fam, _field, _scale)
GPU_FIELDS = ("util_gpu", "util_mem", "mem_used", "mem_total", "temp_c", "power_w", "power_limit_w",
              "sm_clock_mhz", "mem_clock_mhz")

ALL_METRICS: tuple[str, ...] = tuple(BY_METRIC) + (NVITOP_PROC_MEM, SPECDECK_JOB, SPECDECK_INFO) + tuple(SGLANG)

WORKLOAD_LABELS = ("pod", "namespace", "container", "hpc_job")


def metrics_regex() -> str:
    """One PromQL name regex for every metric Specdeck reads (``:`` and ``_`` need no escape)."""
    return "|".join(ALL_METRICS)


def node_name() -> str:
    """This machine's node name: ``$SPECDECK_NODE_NAME``, else its host name."""
    return (os.environ.get("SPECDECK_NODE_NAME") or "").strip() or socket.gethostname()


def node_of(labels: dict | object) -> str:
    """The node a series belongs to: the target's ``node`` label (Specdeck's targets file sets it),
    else DCGM's ``Hostname``, nvitop's ``hostname``, else the host part of ``instance``."""
    get = labels.get  # type: ignore[union-attr]
    for key in ("node", "Hostname", "hostname"):
        v = get(key)
        if v:
            return str(v)
    inst = str(get("instance") or "")
    if inst.startswith("["):  # [::1]:9400
        return inst[1:].split("]", 1)[0] or "unknown"
    return inst.rsplit(":", 1)[0] if ":" in inst else (inst or "unknown")


def gpu_index_of(labels) -> int | None:
    """The GPU index of a DCGM (``gpu``) or nvitop (``index``) series; ``None`` for a MIG
    instance (nvitop's ``0:1``, DCGM's ``GPU_I_ID``) or a series without one."""
    if labels.get("GPU_I_ID"):
        return None
    raw = labels.get("gpu", labels.get("index"))
    try:
        return int(raw)
    except (TypeError, ValueError):
        return None


def series_from_exposition(text: str, t: float, target_labels: dict[str, str] | None = None) -> list[PromSeries]:
    """An exporter's ``/metrics`` text as the series a query would give: each sample with the
    target's labels added (as Prometheus adds ``instance``/``job`` and file_sd labels) and its
    value at ``t``.  Raises ``ValueError`` (with the parser's message) for text that is not the
    Prometheus exposition format."""
    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415

    extra = dict(target_labels or {})
    out: list[PromSeries] = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = {**s.labels, **extra, "__name__": s.name}
            ts = float(s.timestamp) if s.timestamp is not None else t
            v, why = parse_value(s.value)
            out.append(PromSeries(labels, ((ts, v),), {ts: why} if why else {}))
    return out
