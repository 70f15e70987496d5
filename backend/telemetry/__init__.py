"""GPU (NVML) and host (psutil) telemetry: adapter, fake source, sampler,
attribution of GPU processes to managed jobs, and alerts.

Plain Python; never imports streamlit.  Pages read :class:`TelemetrySnapshot`
objects from :meth:`Sampler.latest` and traces from :meth:`Sampler.history`.
"""

from backend.telemetry.attribution import Attribution, Holder, JobUsage, Managed, attribute, format_gpus
from backend.telemetry.fake import FakeNvml
from backend.telemetry.model import (
    Alert,
    DiskUsage,
    GpuProcess,
    GpuSample,
    GpuStatic,
    HostSample,
    MigDevice,
    NvmlState,
    NvmlStatus,
    SamplerCost,
    Series,
    SlowFields,
    TelemetrySnapshot,
)
from backend.telemetry.nvml import NvmlAdapter, open_adapter
from backend.telemetry.sampler import Sampler, make_sampler, make_workspace_sampler

__all__ = [
    "Alert", "Attribution", "DiskUsage", "FakeNvml", "GpuProcess", "GpuSample", "GpuStatic",
    "Holder", "HostSample", "JobUsage", "Managed", "MigDevice", "NvmlAdapter", "NvmlState",
    "NvmlStatus", "Sampler", "SamplerCost", "Series", "SlowFields", "TelemetrySnapshot",
    "attribute", "format_gpus", "make_sampler", "make_workspace_sampler", "open_adapter",
]
