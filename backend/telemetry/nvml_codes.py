"""NVML return codes, constants, the core pass's call table and clock-event
("throttle") decoding, shared by the adapter and the fake library."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

# NVML return codes (stable ABI values).
ERR_UNINITIALIZED = 1
ERR_INVALID_ARGUMENT = 2
ERR_NOT_SUPPORTED = 3
ERR_NO_PERMISSION = 4
ERR_NOT_FOUND = 6
ERR_DRIVER_NOT_LOADED = 9
ERR_TIMEOUT = 10
ERR_LIBRARY_NOT_FOUND = 12
ERR_FUNCTION_NOT_FOUND = 13
ERR_GPU_IS_LOST = 15
ERR_RESET_REQUIRED = 16
ERR_LIB_RM_VERSION_MISMATCH = 18
ERR_NO_DATA = 21
ERR_ARGUMENT_VERSION_MISMATCH = 25
ERR_GPU_NOT_FOUND = 28
ERR_UNKNOWN = 999

LOST_CODES = frozenset({ERR_GPU_IS_LOST, ERR_UNKNOWN, ERR_RESET_REQUIRED, ERR_GPU_NOT_FOUND})
VERSION_CODES = frozenset({ERR_FUNCTION_NOT_FOUND, ERR_ARGUMENT_VERSION_MISMATCH})

_REASONS = {
    ERR_NOT_SUPPORTED: "not supported on this GPU",
    ERR_NO_PERMISSION: "needs more permissions (run as root or relax the driver's restrictions)",
    ERR_FUNCTION_NOT_FOUND: "not available in this driver / nvidia-ml-py pairing",
    ERR_ARGUMENT_VERSION_MISMATCH: "struct version differs between the driver and nvidia-ml-py",
    ERR_GPU_IS_LOST: "GPU is lost (fell off the bus); a reset or reboot is needed",
    ERR_UNKNOWN: "NVML reported an unknown error; the GPU may be lost",
    ERR_RESET_REQUIRED: "GPU needs a reset",
    ERR_GPU_NOT_FOUND: "GPU not found",
    ERR_TIMEOUT: "NVML timed out",
    ERR_NO_DATA: "no data yet",
    ERR_UNINITIALIZED: "NVML is not initialised",
}

NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_PCIE_UTIL_TX_BYTES = 0
NVML_PCIE_UTIL_RX_BYTES = 1
NVML_NVLINK_MAX_LINKS = 18  # H100 / H200; a link past the last raises InvalidArgument
NVML_MEMORY_V2 = 0x02000028  # nvmlMemory_v2 = sizeof(c_nvmlMemory_v2_t) | 2 << 24
NVML_DEVICE_MIG_ENABLE = 1
_NO_INSTANCE = 0xFFFFFFFF

# Failures that do not change while the driver runs: the field is N/A with its
# reason and the call is not repeated every pass, only every ``reprobe_s``.
STICKY_CODES = frozenset({ERR_NOT_SUPPORTED, ERR_NO_PERMISSION})

# The core pass: key -> candidates (function name, arguments after the handle,
# keyword arguments, label), best first.  ``None`` as the memory version is
# replaced by the bindings' ``nvmlMemory_v2`` when the library is loaded; the
# v2 candidate is used only when the adapter is asked for memory v2 (it costs
# about 40 µs more per GPU on an H200 and only adds the reserved figure).
CORE_CALLS: dict[str, tuple[tuple[str, tuple[Any, ...], dict[str, Any], str], ...]] = {
    "util": (("nvmlDeviceGetUtilizationRates", (), {}, "utilisation"),),
    "memory": (
        ("nvmlDeviceGetMemoryInfo", (), {"version": None}, "memory v2"),
        ("nvmlDeviceGetMemoryInfo", (), {}, "memory v1"),
    ),
    "temp": (
        ("nvmlDeviceGetTemperature", (NVML_TEMPERATURE_GPU,), {}, "temperature"),
        ("nvmlDeviceGetTemperatureV", (NVML_TEMPERATURE_GPU,), {}, "temperatureV"),
    ),
    "power": (("nvmlDeviceGetPowerUsage", (), {}, "power"),),
    "plimit": (
        ("nvmlDeviceGetEnforcedPowerLimit", (), {}, "enforced power limit"),
        ("nvmlDeviceGetPowerManagementLimit", (), {}, "power management limit"),
    ),
    "sm_clock": (("nvmlDeviceGetClockInfo", (NVML_CLOCK_SM,), {}, "SM clock"),),
    "mem_clock": (("nvmlDeviceGetClockInfo", (NVML_CLOCK_MEM,), {}, "memory clock"),),
    "throttle": (
        ("nvmlDeviceGetCurrentClocksEventReasons", (), {}, "clock event reasons"),
        ("nvmlDeviceGetCurrentClocksThrottleReasons", (), {}, "clock throttle reasons"),
    ),
    "procs": (
        ("nvmlDeviceGetComputeRunningProcesses_v3", (), {}, "processes v3"),
        ("nvmlDeviceGetComputeRunningProcesses_v2", (), {}, "processes v2"),
        ("nvmlDeviceGetComputeRunningProcesses", (), {}, "processes"),
    ),
}

# The GpuSample fields each core call fills (N/A together when it fails).
CORE_FIELDS: dict[str, tuple[str, ...]] = {
    "util": ("util_gpu", "util_mem"),
    "memory": ("mem_used",),
    "temp": ("temp_c",),
    "power": ("power_w",),
    "plimit": ("power_limit_w",),
    "sm_clock": ("sm_clock_mhz",),
    "mem_clock": ("mem_clock_mhz",),
    "throttle": ("throttle",),
    "procs": ("processes",),
}

# usedGpuMemory when NVML cannot tell (NVML_VALUE_NOT_AVAILABLE as an unsigned
# long long); nvidia-ml-py turns it into None, older bindings pass it through.
NVML_VALUE_NOT_AVAILABLE_ULL = 2**64 - 1

# Clock event ("throttle") reasons: bit -> stable short name.
THROTTLE_BITS: tuple[tuple[int, str], ...] = (
    (0x001, "idle"),
    (0x002, "app_clocks"),
    (0x004, "sw_power_cap"),
    (0x008, "hw_slowdown"),
    (0x010, "sync_boost"),
    (0x020, "sw_thermal"),
    (0x040, "hw_thermal"),
    (0x080, "hw_power_brake"),
    (0x100, "display_clocks"),
)
THROTTLE_LABELS = {
    "idle": "idle",
    "app_clocks": "application clocks setting",
    "sw_power_cap": "power cap",
    "hw_slowdown": "hardware slowdown",
    "sync_boost": "sync boost",
    "sw_thermal": "thermal (software)",
    "hw_thermal": "thermal (hardware)",
    "hw_power_brake": "power brake (hardware)",
    "display_clocks": "display clocks",
}
THERMAL_REASONS = frozenset({"sw_thermal", "hw_thermal"})
POWER_REASONS = frozenset({"sw_power_cap", "hw_power_brake"})


@lru_cache(maxsize=256)  # a handful of masks recur every pass
def decode_throttle(mask: int) -> tuple[str, ...]:
    """Decode a clock-event bit mask into names; unknown bits become ``bit_0x...``."""
    names = [name for bit, name in THROTTLE_BITS if mask & bit]
    rest = mask & ~sum(bit for bit, _ in THROTTLE_BITS)
    b = 1
    while rest:
        if rest & b:
            names.append(f"bit_{b:#x}")
            rest &= ~b
        b <<= 1
    return tuple(names)


def error_code(err: BaseException) -> int | None:
    v = getattr(err, "value", None)
    return v if isinstance(v, int) else None


def reason_for(err: BaseException) -> str:
    code = error_code(err)
    if code in _REASONS:
        return _REASONS[code]  # type: ignore[index]
    text = str(err) or type(err).__name__
    return f"NVML error: {text}"


def _text(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace").rstrip("\x00")
    return str(v)


class _Lost(Exception):
    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason
