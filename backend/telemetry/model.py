"""Frozen snapshot records for GPU and host telemetry.

Every reading that could not be taken is ``None`` (N/A, never 0) and the
reason is kept in the record's ``na`` mapping under the field's name, so a
page can show "N/A" with the reason on hover.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Mapping

GIB = 1024**3

EMPTY: Mapping[str, str] = MappingProxyType({})


def frozen_map(d: Mapping[str, str] | None) -> Mapping[str, str]:
    """A private copy of the N/A reasons (a plain dict, so ``dataclasses.asdict``
    and JSON work on snapshots; treat it as read-only)."""
    return dict(d) if d else {}


class NvmlStatus(str, Enum):
    """The one state of the NVML layer as a whole."""

    NOT_STARTED = "not started"  # lazy: nothing asked yet
    OK = "ok"
    NO_LIBRARY = "no library"  # nvidia-ml-py or libnvidia-ml.so.1 missing
    NO_DRIVER = "driver not loaded"
    ERROR = "error"  # initialised badly (version mismatch, no permission ...)


@dataclass(frozen=True)
class NvmlState:
    status: NvmlStatus
    message: str = ""
    driver_version: str | None = None
    nvml_version: str | None = None
    source: str = "nvml"  # "nvml" or "fake"

    @property
    def ok(self) -> bool:
        return self.status is NvmlStatus.OK


@dataclass(frozen=True)
class GpuStatic:
    """Read once per device and cached."""

    index: int
    uuid: str | None
    name: str | None
    bus_id: str | None
    memory_total: int | None  # bytes
    mig_enabled: bool | None


@dataclass(frozen=True)
class GpuProcess:
    gpu_index: int
    pid: int
    used_memory: int | None  # bytes; None where NVML cannot tell
    type: str = "C"  # C compute, G graphics
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


@dataclass(frozen=True)
class MigDevice:
    parent_index: int
    mig_index: int
    uuid: str | None
    name: str | None
    gpu_instance_id: int | None
    compute_instance_id: int | None
    memory_used: int | None
    memory_total: int | None
    na: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class SlowFields:
    """Fields read on a slower cadence (seconds apart) or on demand."""

    t: float
    ecc_uncorrected_volatile: int | None = None
    ecc_corrected_volatile: int | None = None
    energy_j: float | None = None  # since the driver was loaded
    nvlink_active: int | None = None
    nvlink_total: int | None = None
    pcie_tx_bps: float | None = None
    pcie_rx_bps: float | None = None
    pcie_t: float | None = None  # when PCIe throughput was last read
    na: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class GpuSample:
    index: int
    t: float
    uuid: str | None
    name: str | None
    bus_id: str | None
    lost: bool = False
    util_gpu: float | None = None  # percent
    util_mem: float | None = None  # percent (memory controller busy)
    mem_used: int | None = None  # bytes
    mem_total: int | None = None  # bytes
    temp_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    throttle: tuple[str, ...] | None = None  # decoded reason names; () when none
    processes: tuple[GpuProcess, ...] | None = None
    processes_t: float | None = None  # when the process list was read (it is read every few seconds)
    mig_enabled: bool | None = None
    mig_devices: tuple[MigDevice, ...] = ()
    slow: SlowFields | None = None
    na: Mapping[str, str] = field(default_factory=dict)  # field name -> why it is N/A

    @property
    def mem_fraction(self) -> float | None:
        if self.mem_used is None or not self.mem_total:
            return None
        return self.mem_used / self.mem_total

    def why(self, name: str) -> str | None:
        return self.na.get(name)


_new = object.__new__
_set = object.__setattr__


def gpu_frame(t: float, state: NvmlState, gpus: tuple[GpuSample, ...], nvml_s: float, procs_read: bool) -> GpuFrame:
    """A :class:`GpuFrame`, made as :func:`gpu_sample` makes a sample."""
    f = _new(GpuFrame)
    _set(f, "__dict__", {"t": t, "state": state, "gpus": gpus, "nvml_s": nvml_s, "procs_read": procs_read})
    return f


def gpu_sample(fields: dict) -> GpuSample:
    """A :class:`GpuSample` from a dict holding every one of its fields.

    The same frozen record as ``GpuSample(**fields)``, without the generated
    ``__init__``'s one ``object.__setattr__`` per field: that was a third of
    the sampler's per-GPU Python work, which a CPU woken once a second pays
    several times over.  The dict becomes the record's own (do not reuse it).
    """
    s = _new(GpuSample)
    _set(s, "__dict__", fields)
    return s


@dataclass(frozen=True)
class DiskUsage:
    path: str
    total: int | None
    used: int | None
    free: int | None
    percent: float | None
    na: str | None = None


@dataclass(frozen=True)
class HostSample:
    t: float
    cpu_percent: float | None = None
    cpu_count: int | None = None
    load_1m: float | None = None
    mem_used: int | None = None
    mem_total: int | None = None
    mem_percent: float | None = None
    swap_used: int | None = None
    disks: tuple[DiskUsage, ...] = ()
    net_rx_bps: float | None = None
    net_tx_bps: float | None = None
    na: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class GpuFrame:
    """One batched pass over every GPU."""

    t: float
    state: NvmlState
    gpus: tuple[GpuSample, ...]
    nvml_s: float  # wall time the pass took
    procs_read: bool = False  # the process list was read in this pass


# Numeric fields kept in history (ring buffer and downsampled store), in order.
GPU_SERIES = (
    "util_gpu",
    "util_mem",
    "mem_used",
    "power_w",
    "temp_c",
    "sm_clock_mhz",
    "mem_clock_mhz",
)
HOST_SERIES = ("cpu_percent", "mem_percent", "mem_used", "net_rx_bps", "net_tx_bps", "load_1m")


@dataclass(frozen=True)
class SamplerCost:
    samples: int = 0
    last_ms: float | None = None  # wall time of the last full sample
    mean_ms: float | None = None  # running mean (exponential, alpha 0.1)
    median_ms: float | None = None  # median over the last few minutes of samples
    nvml_per_gpu_us: float | None = None  # GPU pass / GPU count: median over the same window
    nvml_per_gpu_us_p90: float | None = None
    nvml_per_gpu_us_mean: float | None = None  # mean over the window: counts the passes that read the process list
    cpu_share: float | None = None  # sampler thread CPU time / wall time, 0..1
    slow_last_ms: float | None = None


@dataclass(frozen=True)
class Alert:
    severity: str  # "info" | "warning" | "error"
    kind: str  # "memory" | "thermal" | "power" | "idle" | "lost" | "nvml"
    message: str
    gpu_index: int | None = None

    @property
    def title(self) -> str:
        return self.message


@dataclass(frozen=True)
class Series:
    """A history trace: ``t`` (epoch seconds) with value, min and max.

    Full-rate points have ``vmin == vmax == value``; downsampled buckets carry
    the bucket's min and max. A ``None`` value is a gap.
    """

    field: str
    gpu_index: int | None
    t: tuple[float, ...] = ()
    value: tuple[float | None, ...] = ()
    vmin: tuple[float | None, ...] = ()
    vmax: tuple[float | None, ...] = ()
    resolution_s: float = 1.0


@dataclass(frozen=True)
class TelemetrySnapshot:
    t: float
    state: NvmlState
    gpus: tuple[GpuSample, ...]
    host: HostSample | None
    cost: SamplerCost
    attribution: "Attribution | None" = None  # noqa: F821 (see attribution.py)
    alerts: tuple[Alert, ...] = ()
    interval_s: float = 1.0
    errors: tuple[str, ...] = field(default_factory=tuple)  # sampler-level problems
    # GPU -> NVML's total energy counter (mJ since the driver was loaded) as last read (every few seconds,
    # energy_log.py), and why it is N/A where it is
    energy_mj: Mapping[int, int | None] = field(default_factory=dict)
    energy_na: Mapping[int, str] = field(default_factory=dict)

    def age_s(self, now: float) -> float:
        return max(0.0, now - self.t)


# -- other nodes, read through Prometheus (promsource.py) ---------------------


@dataclass(frozen=True)
class RemoteHolder:
    """Who holds one GPU of another node, as far as its exporters and Specdeck's records say.

    ``pid``/``user`` come from an exporter that lists processes (nvitop-exporter, Specdeck's own);
    ``workload`` from DCGM exporter's pod/namespace/container or hpc_job labels; ``job``/``kind``
    from Specdeck's records (the exporter of a Specdeck on that node, or a job known to run on that
    node and GPU)."""

    gpu_index: int
    pid: int | None = None
    user: str | None = None
    used_memory: int | None = None  # bytes
    job: str | None = None
    kind: str | None = None
    workload: str | None = None
    how: str = ""  # how the job was found: "pid", "exporter", "placement"

    @property
    def label(self) -> str:
        if self.job:
            return self.job
        if self.workload:
            return self.workload
        if self.pid is not None:
            return f"pid {self.pid} ({self.user or '?'})"
        return "?"


@dataclass(frozen=True)
class ServerMetrics:
    """One SGLang server's gauges as Prometheus last scraped them."""

    name: str  # the target's ``server`` label, else its instance
    node: str
    instance: str
    model_name: str | None = None
    gen_throughput: float | None = None  # tok/s
    num_running_reqs: float | None = None
    num_queue_reqs: float | None = None
    spec_accept_length: float | None = None
    spec_accept_rate: float | None = None
    token_usage: float | None = None
    cache_hit_rate: float | None = None
    age_s: float | None = None  # since the target's last scrape
    health: str = "unknown"
    na: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeSnapshot:
    """One node's GPUs as read through Prometheus, in the local sampler's records."""

    node: str
    t: float  # when Specdeck read it
    gpus: tuple[GpuSample, ...]
    sources: tuple[str, ...] = ()  # "dcgm", "nvitop", "specdeck"
    age_s: float | None = None  # since the newest successful scrape of its targets; None: unknown
    health: str = "unknown"  # "up" | "down" | "stale" | "gone" | "unknown"
    problem: str | None = None  # why its readings are missing or old, for the page
    holders: tuple[RemoteHolder, ...] = ()
    servers: tuple[ServerMetrics, ...] = ()
    targets: tuple[str, ...] = ()  # scrape URLs behind it
    is_local: bool = False  # this machine, also seen through Prometheus

    def who(self, gpu: int) -> str:
        found = [h.label for h in self.holders if h.gpu_index == gpu]
        return ", ".join(dict.fromkeys(found)) if found else "no processes reported"


@dataclass(frozen=True)
class PromSnapshot:
    """One read of every node through Prometheus."""

    t: float
    url: str
    nodes: tuple[NodeSnapshot, ...] = ()
    error: str | None = None  # the read failed as a whole (nodes are then the last known, aged)
    query_ms: float | None = None  # wall time of the read (HTTP and parsing)
    local_node: str = ""

    @property
    def remote(self) -> tuple[NodeSnapshot, ...]:
        return tuple(n for n in self.nodes if not n.is_local)
