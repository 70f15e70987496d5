"""A fake NVML library with the protocol of the module-level ``pynvml`` functions.

:class:`FakeNvml` answers the same calls the adapter makes on ``pynvml``
(``nvmlInit``, ``nvmlDeviceGetHandleByIndex``, ``nvmlDeviceGetMemoryInfo``,
``nvmlDeviceGetComputeRunningProcesses_v3`` ...) and raises the same
``NVMLError`` subclasses, so :class:`backend.telemetry.nvml.NvmlAdapter` runs
its real code path against it.  It models 8 H200-like GPUs (about 141 GB
each) with plausible, smoothly varying readings, GPU processes with pids, and
every failure the adapter handles:

* ``init_error="no_library" | "driver_not_loaded" | "rm_mismatch" | "no_permission"``
* ``fail(function, gpu=None, code=ERR_NOT_SUPPORTED)`` per function (and GPU)
* ``lose(gpu)`` / ``recover(gpu)`` for a GPU that fell off the bus
* ``mig={gpu: instances}`` for MIG mode with GPU/compute instances
* ``follow=callable``: the managed processes of a demo placed on GPUs as
  their tensor parallelism or CUDA_VISIBLE_DEVICES says (servers from GPU 0,
  training runs one GPU each from GPU 3)
* the total energy counter (mJ since "driver load"): the GPU's own power
  readings integrated over time (before the first question, ``uptime_s`` at
  250 W plus 15 W per index); ``reload_driver(gpu)`` sets it back to 0 as a
  driver reload does, and ``fail("energy", gpu)`` makes it NotSupported
* slow fields: volatile ECC counts (``set_ecc``), NVLink link states (``nvlink_links``,
  ``set_nvlink_down``) and PCIe TX/RX throughput; each can be made
  NotSupported per GPU with ``fail("ecc" | "energy" | "nvlink" | "pcie", gpu)``
* ``missing={"memory_v2", "procs_v3", "procs_v2", "event_reasons", "temperature"}``
  for bindings newer than the driver (FunctionNotFound), and
  ``version_mismatch={...}`` for ArgumentVersionMismatch.

It is thread-safe and deterministic for a given clock.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections import Counter
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable, Iterable

from backend.telemetry import nvml_codes as _n

try:  # the real error hierarchy, so ``except pynvml.NVMLError_NotSupported`` works too
    import pynvml as _pynvml

    NVMLError = _pynvml.NVMLError
    NVMLLibraryMismatchError = _pynvml.NVMLLibraryMismatchError
except ImportError:  # pragma: no cover - nvidia-ml-py is a requirement

    class NVMLError(Exception):  # type: ignore[no-redef]
        def __init__(self, value: int):
            super().__init__(value)
            self.value = value

        def __str__(self) -> str:
            return f"NVML Error with code {self.value}"

    class NVMLLibraryMismatchError(Exception):  # type: ignore[no-redef]
        pass


GB = 1000**3
GIB = 1024**3
H200_TOTAL = 143771 * 1024**2  # what NVML reports for an H200 (~141 GB usable)
H200_NAME = "NVIDIA H200"

_ALIASES = {
    "utilization": "nvmlDeviceGetUtilizationRates",
    "memory": "nvmlDeviceGetMemoryInfo",
    "temperature": "nvmlDeviceGetTemperature",
    "power": "nvmlDeviceGetPowerUsage",
    "power_limit": "nvmlDeviceGetEnforcedPowerLimit",
    "clocks": "nvmlDeviceGetClockInfo",
    "throttle": "nvmlDeviceGetCurrentClocksEventReasons",
    "processes": "nvmlDeviceGetComputeRunningProcesses",
    "ecc": "nvmlDeviceGetTotalEccErrors",
    "energy": "nvmlDeviceGetTotalEnergyConsumption",
    "nvlink": "nvmlDeviceGetNvLinkState",
    "pcie": "nvmlDeviceGetPcieThroughput",
}

INIT_ERRORS = {
    "no_library": _n.ERR_LIBRARY_NOT_FOUND,
    "driver_not_loaded": _n.ERR_DRIVER_NOT_LOADED,
    "rm_mismatch": _n.ERR_LIB_RM_VERSION_MISMATCH,
    "no_permission": _n.ERR_NO_PERMISSION,
}

# Which managed kinds hold GPUs in the demo, and how much memory each.
_FOLLOW_MEM = {"server": 61 * GIB + 512 * 1024**2, "training": 38 * GIB}


def _alive(pid: int) -> bool:
    """A process a GPU would still list: it exists and has not ended.  An
    ended child its parent has not reaped yet (a zombie) holds no GPU memory:
    the supervisor's wrapper keeps its child unreaped while it ends what the
    child left behind, and a relaunch can start the next server meanwhile."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return True  # no procfs: existence is all there is to know
    state = stat[stat.rfind(b")") + 2:][:1]  # the field after the command, which may hold ')'
    return state not in (b"Z", b"X")


@dataclass(frozen=True)
class FakeHandle:
    index: int
    mig: int | None = None  # MIG device slot under ``index``


class FakeNvml:
    """Stand-in for the ``pynvml`` module (see the module docstring)."""

    NVMLError = NVMLError
    NVMLLibraryMismatchError = NVMLLibraryMismatchError
    nvmlMemory_v2 = _n.NVML_MEMORY_V2

    def __init__(
        self,
        gpus: int = 8,
        *,
        init_error: str | None = None,
        mig: dict[int, int] | None = None,
        missing: Iterable[str] = (),
        version_mismatch: Iterable[str] = (),
        not_supported: dict[int | None, Iterable[str]] | None = None,
        processes: dict[int, list[tuple[int, int | None]]] | None = None,
        follow: Callable[[], Iterable[Any]] | None = None,
        clock: Callable[[], float] = time.time,
        name: str = H200_NAME,
        memory_total: int = H200_TOTAL,
        call_cost_s: float = 0.0,
        nvlink_links: int = 18,
        uptime_s: float = 3 * 86400.0,
    ):
        if init_error is not None and init_error not in INIT_ERRORS:
            raise ValueError(f"init_error {init_error!r}: one of {sorted(INIT_ERRORS)}")
        self._lock = threading.Lock()
        self._n = gpus
        self._init_error = init_error
        self._mig = dict(mig or {})
        self._missing = set(missing)
        self._mismatch = set(version_mismatch)
        self._fail: dict[tuple[str, int | None], int] = {}
        for gpu, fns in (not_supported or {}).items():
            for fn in fns:
                self.fail(fn, gpu=gpu)
        self._lost: set[int] = set()
        self._procs: dict[int, list[tuple[int, int | None]]] = {i: list(v) for i, v in (processes or {}).items()}
        self._follow = follow
        self._clock = clock
        self._name = name
        self._total = memory_total
        self._throttle_override: dict[int, int] = {}
        self._util_override: dict[int, float] = {}
        self._call_cost_s = call_cost_s
        self.initialised = False
        self.calls: Counter[str] = Counter()
        self._nvlink_links = nvlink_links
        self._nvlink_down: dict[int, set[int]] = {}
        self._ecc: dict[int, tuple[int, int]] = {}  # gpu -> (corrected, uncorrected) volatile
        self._loaded_at = clock() - uptime_s  # when the "driver" was loaded (energy counts from here)
        self._energy: dict[int, tuple[float, float]] = {}  # gpu -> (clock time, mJ) of the counter's last advance

    # -- failure injection ----------------------------------------------

    def fail(self, function: str, gpu: int | None = None, code: int = _n.ERR_NOT_SUPPORTED) -> None:
        """Make ``function`` (name or alias) raise ``code`` (on one GPU or all)."""
        fn = _ALIASES.get(function, function)
        with self._lock:
            self._fail[(fn, gpu)] = code

    def clear_failures(self) -> None:
        with self._lock:
            self._fail.clear()

    def lose(self, gpu: int, code: int = _n.ERR_GPU_IS_LOST) -> None:
        with self._lock:
            self._lost.add(gpu)
            self._lost_code = code

    def recover(self, gpu: int) -> None:
        with self._lock:
            self._lost.discard(gpu)

    def set_processes(self, gpu: int, procs: list[tuple[int, int | None]]) -> None:
        """``procs``: ``[(pid, used bytes or None), ...]`` on ``gpu``."""
        with self._lock:
            self._settle_energy(gpu)
            self._procs[gpu] = list(procs)

    def add_process(self, pid: int, gpus: Iterable[int], used: int | None) -> None:
        with self._lock:
            for g in gpus:
                self._settle_energy(g)
                self._procs.setdefault(g, []).append((pid, used))

    def clear_processes(self) -> None:
        with self._lock:
            self._settle_energy()
            self._procs.clear()

    def set_throttle(self, gpu: int, mask: int | None) -> None:
        with self._lock:
            if mask is None:
                self._throttle_override.pop(gpu, None)
            else:
                self._throttle_override[gpu] = mask

    def set_ecc(self, gpu: int, corrected: int, uncorrected: int) -> None:
        """Volatile ECC error counts of ``gpu`` (since the driver was loaded)."""
        with self._lock:
            self._ecc[gpu] = (corrected, uncorrected)

    def set_nvlink_down(self, gpu: int, links: Iterable[int]) -> None:
        """Mark NVLink ``links`` of ``gpu`` inactive (the others stay active)."""
        with self._lock:
            self._nvlink_down[gpu] = set(links)

    def reload_driver(self, gpu: int | None = None) -> None:
        """The energy counter of ``gpu`` (or every GPU) starts again from 0, as after a driver reload."""
        with self._lock:
            for g in ([gpu] if gpu is not None else range(self._n)):
                self._energy[g] = (self._clock(), 0.0)

    def set_util(self, gpu: int, util: float | None) -> None:
        with self._lock:
            self._settle_energy(gpu)
            if util is None:
                self._util_override.pop(gpu, None)
            else:
                self._util_override[gpu] = util

    # -- plumbing --------------------------------------------------------

    def _enter(self, fn: str, handle: FakeHandle | None = None) -> None:
        self.calls[fn] += 1
        if self._call_cost_s:
            time.sleep(self._call_cost_s)
        if not self.initialised and fn != "nvmlInit":
            raise NVMLError(_n.ERR_UNINITIALIZED)
        if handle is not None:
            if handle.index in self._lost:
                raise NVMLError(getattr(self, "_lost_code", _n.ERR_GPU_IS_LOST))
            code = self._fail.get((fn, handle.index), self._fail.get((fn, None)))
            if code is not None:
                raise NVMLError(code)
        else:
            code = self._fail.get((fn, None))
            if code is not None:
                raise NVMLError(code)

    def _versioned(self, key: str) -> None:
        if key in self._missing:
            raise NVMLError(_n.ERR_FUNCTION_NOT_FOUND)
        if key in self._mismatch:
            raise NVMLError(_n.ERR_ARGUMENT_VERSION_MISMATCH)

    def _holders(self, gpu: int) -> list[tuple[int, int | None]]:
        procs = list(self._procs.get(gpu, ()))
        if self._follow is not None:
            procs.extend(self._followed().get(gpu, ()))
        return procs

    def _followed(self) -> dict[int, list[tuple[int, int | None]]]:
        """Place the managed processes of the demo on GPUs as they would sit
        on a real machine: a process whose spec sets CUDA_VISIBLE_DEVICES
        on those GPUs; otherwise a server on as many GPUs as its tensor
        parallelism (``--tp-size``, 1 when absent) from GPU 0 on, and each
        training run on one GPU counting from 3.  The placement is kept for a
        second, but never past the end of a process it names: a real GPU does
        not list a process that has exited (a relaunched server's old pid)."""
        now = time.monotonic()
        cached = getattr(self, "_follow_cache", None)
        if cached is not None and now - cached[0] < 1.0 and all(
                _alive(pid) for procs in cached[1].values() for pid, _ in procs):
            return cached[1]
        out: dict[int, list[tuple[int, int | None]]] = {}
        self._follow_cache = (now, out)
        try:
            managed = list(self._follow()) if self._follow else []
        except Exception:  # noqa: BLE001 - a failing provider just means no followed processes
            return out
        train_slot = 3
        server_slot = 0
        for m in managed:
            name, kind, pid = _managed_fields(m)
            if pid is None or kind not in _FOLLOW_MEM or not self._n:
                continue
            visible, tp = _placement(m)
            if kind == "server":
                gpus = visible[:tp] if visible else [(server_slot + k) % self._n for k in range(min(tp, self._n))]
                server_slot += 0 if visible else tp
            else:
                gpus = visible[:1] if visible else [train_slot % self._n]
                train_slot += 0 if visible else 1
            for g in gpus:
                if 0 <= g < self._n:
                    out.setdefault(g, []).append((pid, _FOLLOW_MEM[kind]))
        return out

    def _util(self, gpu: int, t: float, busy: bool | None = None) -> float:
        if gpu in self._util_override:
            return self._util_override[gpu]
        if self._holders(gpu) if busy is None else busy:
            v = 86.0 + 12.0 * math.sin(t / 9.0 + gpu * 0.7) + 2.0 * math.sin(t * 1.3 + gpu)
            return float(max(0, min(100, round(v))))
        return float(round(1.5 + 1.5 * math.sin(t / 5.0 + gpu)))

    # -- library protocol ------------------------------------------------

    def nvmlInit(self) -> None:
        self._enter("nvmlInit")
        if self._init_error is not None:
            raise NVMLError(INIT_ERRORS[self._init_error])
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialised = False

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return "570.133.20"

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._enter("nvmlSystemGetNVMLVersion")
        return "12.570.133.20"

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return self._n

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < self._n:
            raise NVMLError(_n.ERR_INVALID_ARGUMENT)
        if index in self._lost:
            raise NVMLError(_n.ERR_GPU_IS_LOST)
        return FakeHandle(index)

    def nvmlDeviceGetName(self, h: FakeHandle) -> str:
        self._enter("nvmlDeviceGetName", h)
        if h.mig is not None:
            return f"{self._name} MIG 2g.35gb"
        return self._name

    def nvmlDeviceGetUUID(self, h: FakeHandle) -> str:
        self._enter("nvmlDeviceGetUUID", h)
        if h.mig is not None:
            return f"MIG-5e1f{h.index:02d}{h.mig:02d}-0000-4000-8000-00000000fa4e"
        return f"GPU-8a1c{h.index:04d}-7f3e-4b1d-9c2a-0000000{h.index:05d}"

    def nvmlDeviceGetPciInfo(self, h: FakeHandle) -> SimpleNamespace:
        self._enter("nvmlDeviceGetPciInfo", h)
        bus = [0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB][h.index % 8] + 0x100 * (h.index // 8)
        return SimpleNamespace(busId=f"00000000:{bus:02X}:00.0".encode())

    def nvmlDeviceGetMemoryInfo(self, h: FakeHandle, version: int | None = None) -> SimpleNamespace:
        self._enter("nvmlDeviceGetMemoryInfo", h)
        if version:
            self._versioned("memory_v2")
        with self._lock:
            if h.mig is not None:
                total = 35 * GIB
                used = 512 * 1024**2 + sum(u or 0 for pid, u in self._mig_procs(h.index, h.mig))
            else:
                total = self._total
                base = 596 * 1024**2
                used = base + sum(u or 0 for _, u in self._holders(h.index))
        used = min(used, total)
        reserved = 0 if h.mig is not None else 530 * 1024**2
        if version:
            return SimpleNamespace(version=version, total=total, reserved=reserved, free=total - used - reserved, used=used)
        return SimpleNamespace(total=total, free=total - used, used=used + reserved)

    def nvmlDeviceGetUtilizationRates(self, h: FakeHandle) -> SimpleNamespace:
        self._enter("nvmlDeviceGetUtilizationRates", h)
        if self._mig.get(h.index) or h.mig is not None:
            raise NVMLError(_n.ERR_NOT_SUPPORTED)  # as on real GPUs in MIG mode
        with self._lock:
            u = self._util(h.index, self._clock())
        return SimpleNamespace(gpu=int(u), memory=int(u * 0.55))

    def nvmlDeviceGetTemperature(self, h: FakeHandle, sensor: int) -> int:
        self._enter("nvmlDeviceGetTemperature", h)
        self._versioned("temperature")
        with self._lock:
            u = self._util(h.index, self._clock())
        return int(31 + u * 0.38 + (h.index % 3))

    def nvmlDeviceGetTemperatureV(self, h: FakeHandle, sensor: int) -> int:
        self._enter("nvmlDeviceGetTemperatureV", h)
        with self._lock:
            u = self._util(h.index, self._clock())
        return int(31 + u * 0.38 + (h.index % 3))

    def _power_w(self, gpu: int, t: float, busy: bool | None = None) -> float:
        return 78 + self._util(gpu, t, busy) * 5.9

    def nvmlDeviceGetPowerUsage(self, h: FakeHandle) -> int:
        self._enter("nvmlDeviceGetPowerUsage", h)
        with self._lock:
            w = self._power_w(h.index, self._clock())
        return int(w * 1000)

    def nvmlDeviceGetEnforcedPowerLimit(self, h: FakeHandle) -> int:
        self._enter("nvmlDeviceGetEnforcedPowerLimit", h)
        return 700_000

    def nvmlDeviceGetPowerManagementLimit(self, h: FakeHandle) -> int:
        self._enter("nvmlDeviceGetPowerManagementLimit", h)
        return 700_000

    def nvmlDeviceGetClockInfo(self, h: FakeHandle, clock_type: int) -> int:
        self._enter("nvmlDeviceGetClockInfo", h)
        if clock_type == _n.NVML_CLOCK_MEM:
            return 2619
        with self._lock:
            u = self._util(h.index, self._clock())
        return 1980 if u > 10 else 345

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: FakeHandle) -> int:
        self._enter("nvmlDeviceGetCurrentClocksEventReasons", h)
        self._versioned("event_reasons")
        return self._throttle(h)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: FakeHandle) -> int:
        self._enter("nvmlDeviceGetCurrentClocksThrottleReasons", h)
        return self._throttle(h)

    def _throttle(self, h: FakeHandle) -> int:
        with self._lock:
            if h.index in self._throttle_override:
                return self._throttle_override[h.index]
            u = self._util(h.index, self._clock())
        return 0x1 if u < 5 else 0x0

    def _proc_list(self, h: FakeHandle) -> list[SimpleNamespace]:
        with self._lock:
            if self._mig.get(h.index):
                out = []
                for slot in range(self._mig[h.index]):
                    for pid, used in self._mig_procs(h.index, slot):
                        out.append(SimpleNamespace(pid=pid, usedGpuMemory=used, gpuInstanceId=slot + 1, computeInstanceId=0))
                return out
            return [
                SimpleNamespace(pid=pid, usedGpuMemory=used, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF)
                for pid, used in self._holders(h.index)
            ]

    def _mig_procs(self, gpu: int, slot: int) -> list[tuple[int, int | None]]:
        # processes registered on a MIG parent are spread over its instances in order
        procs = self._procs.get(gpu, [])
        n = max(1, self._mig.get(gpu, 1))
        return [p for k, p in enumerate(procs) if k % n == slot]

    def nvmlDeviceGetComputeRunningProcesses_v3(self, h: FakeHandle) -> list[SimpleNamespace]:
        self._enter("nvmlDeviceGetComputeRunningProcesses_v3", h)
        self._versioned("procs_v3")
        return self._proc_list(h)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, h: FakeHandle) -> list[SimpleNamespace]:
        self._enter("nvmlDeviceGetComputeRunningProcesses_v2", h)
        self._versioned("procs_v2")
        return self._proc_list(h)

    def nvmlDeviceGetComputeRunningProcesses(self, h: FakeHandle) -> list[SimpleNamespace]:
        self._enter("nvmlDeviceGetComputeRunningProcesses", h)
        return self._proc_list(h)

    def nvmlDeviceGetTotalEccErrors(self, h: FakeHandle, error_type: int, counter_type: int) -> int:
        self._enter("nvmlDeviceGetTotalEccErrors", h)
        with self._lock:
            corrected, uncorrected = self._ecc.get(h.index, (3 * h.index, 0))
        return uncorrected if error_type == _n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED else corrected

    def nvmlDeviceGetTotalEnergyConsumption(self, h: FakeHandle) -> int:
        """mJ since the driver was loaded: the power readings integrated up to now (before the first
        question, the time since the driver was loaded at a mean of 250 W plus 15 W per index)."""
        self._enter("nvmlDeviceGetTotalEnergyConsumption", h)
        with self._lock:
            return int(self._advance_energy(h.index, self._clock()))

    def _settle_energy(self, gpu: int | None = None) -> None:
        """Bring the energy counters up to now before a change of load, so the change counts from now on."""
        for g in ([gpu] if gpu is not None else list(self._energy)):
            if g in self._energy:
                self._advance_energy(g, self._clock())

    def _advance_energy(self, gpu: int, now: float) -> float:
        """The counter of ``gpu`` at ``now``: the power integrated since its last advance, in steps of at most
        0.25 s (at most 4,000 steps; a longer wait in a test's clock takes longer steps)."""
        last = self._energy.get(gpu)
        if last is None:
            mj = max(0.0, now - self._loaded_at) * (250.0 + 15.0 * gpu) * 1000.0
            self._energy[gpu] = (now, mj)
            return mj
        t, mj = last
        span = now - t
        if span <= 0:  # a clock that stands (or steps back in a test): the counter never goes down
            return mj
        n = max(1, min(4000, int(span / 0.25) + 1))
        dt = span / n
        busy = bool(self._holders(gpu))  # who holds the GPU now stands for the whole step
        mj += sum(self._power_w(gpu, t + (k + 0.5) * dt, busy) for k in range(n)) * dt * 1000.0
        self._energy[gpu] = (now, mj)
        return mj

    def nvmlDeviceGetNvLinkState(self, h: FakeHandle, link: int) -> int:
        self._enter("nvmlDeviceGetNvLinkState", h)
        if link >= self._nvlink_links:
            raise NVMLError(_n.ERR_INVALID_ARGUMENT)
        with self._lock:
            return 0 if link in self._nvlink_down.get(h.index, ()) else 1

    def nvmlDeviceGetPcieThroughput(self, h: FakeHandle, counter: int) -> int:
        self._enter("nvmlDeviceGetPcieThroughput", h)
        return 1200 + 300 * h.index + 50 * counter  # KB/s

    def nvmlDeviceGetMigMode(self, h: FakeHandle) -> list[int]:
        self._enter("nvmlDeviceGetMigMode", h)
        on = 1 if self._mig.get(h.index) else 0
        return [on, on]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: FakeHandle) -> int:
        self._enter("nvmlDeviceGetMaxMigDeviceCount", h)
        return 7 if self._mig.get(h.index) else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: FakeHandle, index: int) -> FakeHandle:
        self._enter("nvmlDeviceGetMigDeviceHandleByIndex", h)
        if index >= self._mig.get(h.index, 0):
            raise NVMLError(_n.ERR_NOT_FOUND)
        return FakeHandle(h.index, index)

    def nvmlDeviceIsMigDeviceHandle(self, h: FakeHandle) -> int:
        self._enter("nvmlDeviceIsMigDeviceHandle")
        return 1 if h.mig is not None else 0

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, h: FakeHandle) -> FakeHandle:
        self._enter("nvmlDeviceGetDeviceHandleFromMigDeviceHandle")
        return FakeHandle(h.index)

    def nvmlDeviceGetGpuInstanceId(self, h: FakeHandle) -> int:
        self._enter("nvmlDeviceGetGpuInstanceId", h)
        if h.mig is None:
            raise NVMLError(_n.ERR_INVALID_ARGUMENT)
        return h.mig + 1

    def nvmlDeviceGetComputeInstanceId(self, h: FakeHandle) -> int:
        self._enter("nvmlDeviceGetComputeInstanceId", h)
        if h.mig is None:
            raise NVMLError(_n.ERR_INVALID_ARGUMENT)
        return 0


_TP_FLAGS = ("--tp-size", "--tp", "--tensor-parallel-size")


def _placement(m: Any) -> tuple[list[int], int]:
    """(GPUs from CUDA_VISIBLE_DEVICES or [], tensor parallelism) of a managed
    process, read from its spec's environment and argv where it has them."""
    spec = getattr(m, "spec", None)
    env = getattr(spec, "env", None) or {}
    argv = list(getattr(spec, "argv", None) or ())
    visible = []
    for part in str(env.get("CUDA_VISIBLE_DEVICES", "")).split(","):
        if part.strip().isdigit():
            visible.append(int(part))
    tp = 1
    for k, arg in enumerate(argv):
        flag, eq, val = arg.partition("=")
        if flag in _TP_FLAGS:
            val = val if eq else (argv[k + 1] if k + 1 < len(argv) else "")
            if val.isdigit() and int(val) > 0:
                tp = int(val)
    return visible, tp


def _managed_fields(m: Any) -> tuple[str, str, int | None]:
    if isinstance(m, (tuple, list)):
        name, kind, pid = m[0], m[1], m[2]
    else:
        name, kind, pid = getattr(m, "name"), getattr(m, "kind"), getattr(m, "pid", None)
    kind = getattr(kind, "value", kind)
    return str(name), str(kind), (int(pid) if pid else None)
