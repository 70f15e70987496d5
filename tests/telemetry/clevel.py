"""The fake NVML with a C level under it: ``_nvmlGetFunctionPointer`` hands
out real C function pointers (ctypes callbacks) with the NVML functions'
signatures (handle, plain arguments, then pointers to the outputs; an int
return code), writing through those pointers into whatever buffer the
caller passed, so the adapter's direct readers run without a driver.
Values and failures are the fake's own; ``c_calls`` counts calls that came
in through the C level, so ``wrapper_calls`` is what went through the
bindings' functions."""

from __future__ import annotations

import ctypes
from collections import Counter
from typing import Any, Callable

import pynvml

from backend.telemetry.fake import FakeNvml
from backend.telemetry.nvml_codes import ERR_ARGUMENT_VERSION_MISMATCH, ERR_FUNCTION_NOT_FOUND, NVML_MEMORY_V2

NOT_AVAILABLE = 0xFFFFFFFFFFFFFFFF
INSUFFICIENT_SIZE = 7
H = ctypes.py_object  # the fake's handles are Python objects
P = ctypes.POINTER


class CLevelFake(FakeNvml):
    c_nvmlUtilization_t = pynvml.c_nvmlUtilization_t
    c_nvmlMemory_t = pynvml.c_nvmlMemory_t
    c_nvmlMemory_v2_t = pynvml.c_nvmlMemory_v2_t
    c_nvmlProcessInfo_v3_t = pynvml.c_nvmlProcessInfo_v3_t

    def __init__(self, *a: Any, no_pointer: tuple[str, ...] = (), **kw: Any):
        super().__init__(*a, **kw)
        self.c_calls: Counter[str] = Counter()
        self.pointer_lookups: Counter[str] = Counter()
        self._no_pointer = set(no_pointer)
        self._pointers: dict[str, Any] = {}

    def wrapper_calls(self, name: str) -> int:
        return self.calls[name] - self.c_calls[name]

    def _nvmlGetFunctionPointer(self, name: str) -> Any:
        self.pointer_lookups[name] += 1
        if name in self._no_pointer or name not in _C_FUNCTIONS:
            raise self.NVMLError(ERR_FUNCTION_NOT_FOUND)
        if name not in self._pointers:
            proto, body = _C_FUNCTIONS[name]
            counted = name[:-3] if name == "nvmlDeviceGetMemoryInfo_v2" else name

            def c_function(*args: Any, body: Callable[..., None] = body, counted: str = counted) -> int:
                self.c_calls[counted] += 1
                try:
                    body(self, *args)
                except self.NVMLError as e:
                    return e.value
                return 0
            self._pointers[name] = proto(c_function)  # kept alive as long as the fake
        return self._pointers[name]


def _uint(method: str) -> Callable[..., None]:
    def body(fake: CLevelFake, h: Any, *args: Any) -> None:
        *plain, out = args
        out[0] = getattr(FakeNvml, method)(fake, h, *plain)
    return body


def _util(fake: CLevelFake, h: Any, out: Any) -> None:
    v = FakeNvml.nvmlDeviceGetUtilizationRates(fake, h)
    out.contents.gpu, out.contents.memory = v.gpu, v.memory


def _memory(fake: CLevelFake, h: Any, out: Any) -> None:
    v = FakeNvml.nvmlDeviceGetMemoryInfo(fake, h)
    o = out.contents
    o.total, o.free, o.used = v.total, v.free, v.used


def _memory_v2(fake: CLevelFake, h: Any, out: Any) -> None:
    o = out.contents
    if o.version != NVML_MEMORY_V2:
        raise fake.NVMLError(ERR_ARGUMENT_VERSION_MISMATCH)
    v = FakeNvml.nvmlDeviceGetMemoryInfo(fake, h, version=NVML_MEMORY_V2)
    o.total, o.reserved, o.free, o.used = v.total, v.reserved, v.free, v.used


def _procs(fake: CLevelFake, h: Any, count: Any, slots: Any) -> None:
    procs = FakeNvml.nvmlDeviceGetComputeRunningProcesses_v3(fake, h)
    room = count[0]
    count[0] = len(procs)
    if room < len(procs):
        raise fake.NVMLError(INSUFFICIENT_SIZE)
    for k, p in enumerate(procs):
        slots[k].pid = p.pid
        slots[k].usedGpuMemory = NOT_AVAILABLE if p.usedGpuMemory is None else p.usedGpuMemory
        slots[k].gpuInstanceId = p.gpuInstanceId
        slots[k].computeInstanceId = p.computeInstanceId
    for k in range(len(procs), room):  # what a driver leaves past the count is not the caller's
        slots[k].pid = 999_999


def _proto(*outs: Any, plain: int = 0) -> Any:
    return ctypes.CFUNCTYPE(ctypes.c_int, H, *([ctypes.c_uint] * plain), *outs)


_C_FUNCTIONS: dict[str, tuple[Any, Callable[..., None]]] = {
    "nvmlDeviceGetUtilizationRates": (_proto(P(pynvml.c_nvmlUtilization_t)), _util),
    "nvmlDeviceGetMemoryInfo": (_proto(P(pynvml.c_nvmlMemory_t)), _memory),
    "nvmlDeviceGetMemoryInfo_v2": (_proto(P(pynvml.c_nvmlMemory_v2_t)), _memory_v2),
    "nvmlDeviceGetTemperature": (_proto(P(ctypes.c_uint), plain=1), _uint("nvmlDeviceGetTemperature")),
    "nvmlDeviceGetPowerUsage": (_proto(P(ctypes.c_uint)), _uint("nvmlDeviceGetPowerUsage")),
    "nvmlDeviceGetEnforcedPowerLimit": (_proto(P(ctypes.c_uint)), _uint("nvmlDeviceGetEnforcedPowerLimit")),
    "nvmlDeviceGetPowerManagementLimit": (_proto(P(ctypes.c_uint)), _uint("nvmlDeviceGetPowerManagementLimit")),
    "nvmlDeviceGetClockInfo": (_proto(P(ctypes.c_uint), plain=1), _uint("nvmlDeviceGetClockInfo")),
    "nvmlDeviceGetCurrentClocksEventReasons": (_proto(P(ctypes.c_ulonglong)), _uint("nvmlDeviceGetCurrentClocksEventReasons")),
    "nvmlDeviceGetCurrentClocksThrottleReasons": (_proto(P(ctypes.c_ulonglong)), _uint("nvmlDeviceGetCurrentClocksThrottleReasons")),
    "nvmlDeviceGetComputeRunningProcesses_v3": (_proto(P(ctypes.c_uint), P(pynvml.c_nvmlProcessInfo_v3_t)), _procs),
}
