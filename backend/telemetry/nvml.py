"""NVML adapter: one batched pass over every GPU, returning frozen snapshots.

The adapter talks to a *library object* with the protocol of the module-level
``pynvml`` functions (``nvmlInit``, ``nvmlDeviceGetHandleByIndex``, ...,
``NVMLError``).  In production that is the ``pynvml`` module from
nvidia-ml-py; in tests and the demo workspace it is
:class:`backend.telemetry.fake.FakeNvml`.  The code path is the same.

Rules:

* Initialised lazily, on the first question.  A missing library or driver
  is one clear :class:`NvmlState` with a message; nothing raises to callers.
  A failed initialisation is retried at most every ``retry_init_s``.
* A field that fails (NotSupported, NoPermission, ...) is ``None`` with the
  reason kept in the sample's ``na`` mapping; never 0.
* Struct versions that differ between the driver and the bindings are
  handled: each versioned call has an ordered list of candidates (memory info
  v2 -> v1 when v2 is asked for, process info v3 -> v2 -> unversioned, clock
  event reasons -> throttle reasons, temperature -> temperatureV); the first
  that works is remembered, and the pass then calls it directly.
* The GPU process list is read every ``procs_interval_s`` (5 s), not every
  pass; samples in between carry the last list with the time it was read.
* A field that is NotSupported or NoPermission, or that no candidate can
  read, is remembered per GPU: it stays N/A with its reason and is asked
  again only every ``reprobe_s`` (or on :meth:`NvmlAdapter.refresh_static`),
  not every pass.  The core functions are looked up once, not per pass.
* A GPU that reports GpuIsLost / Unknown / ResetRequired is shown as lost
  (all fields N/A) and retried on the next pass.
* Handles and static information (name, uuid, bus id, total memory, MIG
  mode and instances) are read once and cached.
* Slow fields (ECC, energy, NVLink, PCIe throughput) are never read in the
  core pass; :meth:`NvmlAdapter.read_slow` reads them on its own cadence.
  The total energy counter is read for every pass too, right after it
  (:meth:`NvmlAdapter.read_energy`, ``nvml_energy.py``): job energy is
  measured from it.

* The usual pass calls the chosen C functions itself (``nvml_direct.py``):
  a GPU's eight scalar calls write into one buffer that one unpack reads,
  without nvidia-ml-py's per-call Python; any other case, and any call that
  fails, goes field by field (``nvml_fieldwise.py``).

Static and slow readings live in ``nvml_static.py``, the candidate lists of
the versioned calls in ``nvml_calls.py``, codes and the call table in
``nvml_codes.py``.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Callable

from backend.telemetry.model import (
    GpuFrame,
    GpuProcess,
    GpuSample,
    GpuStatic,
    MigDevice,
    NvmlState,
    NvmlStatus,
    SlowFields,
    _new,
    _set,
    gpu_frame,
)

from backend.telemetry.nvml_codes import *  # noqa: F403 - codes and constants, re-exported
from backend.telemetry.nvml_codes import _text
from backend.telemetry.nvml_calls import VersionedCalls
from backend.telemetry.nvml_direct import DirectPass
from backend.telemetry.nvml_energy import EnergyReads
from backend.telemetry.nvml_fieldwise import _NOT_READ, FieldwisePass, _FastCalls
from backend.telemetry.nvml_static import SlowReads, StaticReads


def _import_pynvml() -> Any:
    import pynvml  # noqa: PLC0415 (lazy on purpose)

    return pynvml


class NvmlAdapter(FieldwisePass, VersionedCalls, StaticReads, SlowReads, EnergyReads):
    """Lazy, thread-safe NVML reader.

    ``lib`` is the NVML library object (``pynvml`` module or a fake); when
    ``None`` the adapter imports ``pynvml`` on first use.  ``source`` is a
    label shown on the page ("nvml" or "fake").

    ``procs_interval_s``: the GPU process list is read every this many
    seconds (of ``clock``), not every pass: it is the dearest core call
    (about 110 µs per GPU with a process on it, against about 150 µs for
    all the other core fields together on an H200).  Between reads each
    sample carries the last list and ``processes_t``, when it was read;
    :meth:`want_processes` asks for a read in the next pass.
    ``memory_v2``: read memory through ``nvmlMemory_v2`` (used without the
    driver's reserved memory) instead of v1 (used including it), about
    40 µs more per GPU.
    ``direct_calls``: the pass calls the chosen C functions itself
    (``nvml_direct``) rather than through nvidia-ml-py's wrappers, about
    45 µs less per pass on an H200; the wrappers stay for every other call.
    """

    def __init__(
        self,
        lib: Any = None,
        *,
        source: str = "nvml",
        retry_init_s: float = 60.0,
        reprobe_s: float = 300.0,
        time_calls: bool = False,
        procs_interval_s: float = 5.0,
        memory_v2: bool = False,
        direct_calls: bool = True,
        clock: Callable[[], float] = time.time,
    ):
        self._lib = lib
        self._source = source
        self._retry_init_s = retry_init_s
        self._clock = clock
        self._lock = threading.RLock()
        self._state = NvmlState(NvmlStatus.NOT_STARTED, "NVML not queried yet", source=source)
        self._init_at: float | None = None
        self._handles: list[Any] = []
        self._static: list[GpuStatic] = []
        self._mig: dict[int, list[tuple[Any, MigDevice]]] = {}
        self._choice: dict[str, int] = {}  # versioned call -> index of the candidate that works
        self._slow: dict[int, SlowFields] = {}
        self._pcie: dict[int, tuple[float, float | None, float | None, dict[str, str]]] = {}
        self._err_cls: type[BaseException] = Exception
        self._mismatch_cls: tuple[type[BaseException], ...] = ()
        # core calls resolved once per library: key -> [(function or None, name, args, kwargs)]
        self._calls: dict[str, list[tuple[Callable[..., Any] | None, str, tuple[Any, ...], dict[str, Any]]]] = {}
        # (gpu, key) -> (monotonic time to probe again, reason): NotSupported / NoPermission /
        # no candidate works; such a field is N/A without calling NVML every pass
        self._skip: dict[tuple[int, str], tuple[float, str]] = {}
        self._reprobe_s = reprobe_s
        self._pass_lock = threading.Lock()
        # per-call timings (µs per GPU), kept only when asked for (perf/gpu_proof.py)
        self._times: dict[str, deque[float]] | None = {} if time_calls else None
        self._calls_us = 0.0  # µs spent in timed NVML calls during the current pass
        self.procs_interval_s = procs_interval_s
        self._memory_v2 = memory_v2
        self._direct = direct_calls
        self._procs_at: float | None = None  # clock time of the last process-list pass
        self._procs_due = True
        # gpu -> (processes or None, clock time read, why N/A)
        self._procs_cache: dict[int, tuple[tuple[GpuProcess, ...] | None, float, str | None]] = {}
        # the chosen candidate of each core call: (key, call(handle) or None); None = rebuild
        self._plan: list[tuple[str, Callable[[Any], Any] | None]] | None = None
        self._batch: DirectPass | None = None  # the scalar calls as one C-level pass (see nvml_direct)
        # (gpu, with processes) -> the pass's direct calls for that GPU; see _fast_calls
        self._fast: dict[tuple[int, bool], _FastCalls | None] = {}

    # -- state ---------------------------------------------------------

    @property
    def source(self) -> str:
        return self._source

    def state(self) -> NvmlState:
        self._ensure_init()
        return self._state

    def static(self) -> tuple[GpuStatic, ...]:
        self._ensure_init()
        return tuple(self._static)

    def gpu_count(self) -> int:
        self._ensure_init()
        return len(self._handles)

    def _ensure_init(self) -> bool:
        st = self._state.status
        if st is NvmlStatus.OK:
            return True
        now = time.monotonic()
        if self._init_at is not None and now - self._init_at < self._retry_init_s:
            return False
        with self._lock:
            if self._state.status is NvmlStatus.OK:
                return True
            self._init_at = now
            self._state = self._init()
            return self._state.status is NvmlStatus.OK

    def _init(self) -> NvmlState:
        src = self._source
        if self._lib is None:
            try:
                self._lib = _import_pynvml()
            except ImportError as e:
                return NvmlState(
                    NvmlStatus.NO_LIBRARY,
                    f"nvidia-ml-py is not installed ({e}); GPU telemetry is off",
                    source=src,
                )
        lib = self._lib
        self._err_cls = getattr(lib, "NVMLError", Exception)
        mm = getattr(lib, "NVMLLibraryMismatchError", None)
        self._mismatch_cls = (mm,) if isinstance(mm, type) else ()
        self._resolve_calls(lib)
        try:
            lib.nvmlInit()
        except self._err_cls as e:  # type: ignore[misc]
            code = error_code(e)
            if code == ERR_LIBRARY_NOT_FOUND:
                return NvmlState(
                    NvmlStatus.NO_LIBRARY,
                    "No NVIDIA driver: libnvidia-ml.so.1 was not found on this machine",
                    source=src,
                )
            if code == ERR_DRIVER_NOT_LOADED:
                return NvmlState(
                    NvmlStatus.NO_DRIVER,
                    "No NVIDIA driver: the kernel driver is not loaded (check `lsmod | grep nvidia`)",
                    source=src,
                )
            if code == ERR_LIB_RM_VERSION_MISMATCH:
                return NvmlState(
                    NvmlStatus.ERROR,
                    "NVML and the kernel driver differ in version (driver upgraded without a"
                    " module reload); reload the nvidia module or reboot",
                    source=src,
                )
            return NvmlState(NvmlStatus.ERROR, f"NVML failed to start: {reason_for(e)}", source=src)
        except OSError as e:
            return NvmlState(NvmlStatus.NO_LIBRARY, f"No NVIDIA driver: {e}", source=src)
        driver = nvml_version = None
        try:
            driver = _text(lib.nvmlSystemGetDriverVersion())
        except self._err_cls:  # type: ignore[misc]
            pass
        try:
            nvml_version = _text(lib.nvmlSystemGetNVMLVersion())
        except (self._err_cls, AttributeError):  # type: ignore[misc]
            pass
        try:
            count = int(lib.nvmlDeviceGetCount())
        except self._err_cls as e:  # type: ignore[misc]
            return NvmlState(NvmlStatus.ERROR, f"NVML cannot count GPUs: {reason_for(e)}", source=src)
        self._handles = []
        self._static = []
        for i in range(count):
            h = None
            try:
                h = lib.nvmlDeviceGetHandleByIndex(i)
            except self._err_cls:  # type: ignore[misc]
                h = None
            self._handles.append(h)
            self._static.append(self._read_static(i, h))
            self._mig[i] = self._read_mig(i, h) if self._static[-1].mig_enabled else []
        msg = f"{count} GPU{'s' if count != 1 else ''}" + (f", driver {driver}" if driver else "")
        return NvmlState(NvmlStatus.OK, msg, driver_version=driver, nvml_version=nvml_version, source=src)

    def shutdown(self) -> None:
        with self._lock:
            if self._state.status is NvmlStatus.OK and self._lib is not None:
                try:
                    self._lib.nvmlShutdown()
                except self._err_cls:  # type: ignore[misc]
                    pass
            self._state = NvmlState(NvmlStatus.NOT_STARTED, "NVML shut down", source=self._source)
            self._init_at = None
            self._handles = []
            self._static = []

    # -- core pass -----------------------------------------------------

    def want_processes(self) -> None:
        """Read the GPU process list in the next pass (it is otherwise read
        every ``procs_interval_s``)."""
        self._procs_due = True

    def sample(self) -> GpuFrame:
        """Read the core fields of every GPU in one pass.

        ``GpuFrame.nvml_s`` is the wall time of the whole pass: the NVML calls
        and turning their answers into samples, nothing else.  The process
        list is part of the pass only every ``procs_interval_s``.

        The usual pass is two loops in this function: for each GPU the scalar
        C calls of :class:`DirectPass` into its buffer (and the process list
        when due), then for each GPU one unpack and the sample.  Once a second the CPU arrives here cold (on an H200 machine
        each function entered costs several µs), so the loop enters as few
        as it can.  A GPU that cannot go this way (MIG, a field remembered as
        unsupported, a handle not found, bindings without direct calls) or a
        call that fails goes through :meth:`_sample_gpu`, which sorts each
        field out by its candidate list.
        """
        with self._pass_lock:
            t0 = time.perf_counter()
            now = self._clock()
            if self._state.status is not NvmlStatus.OK and not self._ensure_init():
                return GpuFrame(now, self._state, (), time.perf_counter() - t0)
            last = self._procs_at
            procs = self._procs_due or last is None or not 0 <= now - last < self.procs_interval_s
            if procs:
                self._procs_due = False
                self._procs_at = now
            mono = time.monotonic()
            rows = self._fast.get(procs)
            if rows is None or mono >= rows[0]:
                rows = self._fast_rows(procs, mono)
            self._calls_us = 0.0
            static, cache, slow = self._static, self._procs_cache, self._slow
            # First every GPU's calls, then every sample: the C calls of the next GPU would leave the
            # conversion's Python cold again (each GPU has its own buffer, see DirectPass.bind).
            gpus: list[Any] = []
            read: list[tuple[int, int, Any, Any, Any]] = []  # (slot in gpus, index, fast, bound, process list)
            for i, h, fast, bound in rows[1]:
                if fast is None:
                    gpus.append(self._sample_gpu(i, now, procs, mono))
                    continue
                if bound.version is not None:
                    bound.version[0].version = bound.version[1]
                for fn, args in bound.calls:  # args: the handle, plain arguments, the output's place
                    ret = fn(*args)
                    if ret:
                        break
                else:
                    raw: Any = _NOT_READ
                    if procs:
                        call = fast.procs
                        try:
                            raw = call(h) if call is not None else None  # copies, not the reader's slots
                        except Exception as e:  # noqa: BLE001 - the field-by-field pass sorts it out
                            failed = (len(fast.keys) - 1, e) if self._fast.get(procs) is rows else None
                            gpus.append(self._sample_gpu(i, now, procs, mono, failed=failed))
                            continue
                    elif cache.get(i) is None:
                        gpus.append(self._sample_gpu(i, now, procs, mono))
                        continue
                    read.append((len(gpus), i, fast, bound, raw))
                    gpus.append(None)
                    continue
                # a call failed: field by field, that call's answer handled without asking again
                # (unless an earlier GPU's failure has changed the chosen calls since these rows were made)
                k = next(j for j, c in enumerate(bound.calls) if c[0] is fn and c[1] is args)
                still = self._fast.get(procs) is rows
                gpus.append(self._sample_gpu(i, now, procs, mono, failed=(k, self._err_cls(ret)) if still else None))
            for slot, i, fast, bound, raw in read:
                na = fast.na.copy() if fast.na else {}
                if raw is not _NOT_READ:
                    plist = self._processes(i, raw) if raw is not None else None
                    cache[i] = (plist, now, na.get("processes"))
                    plist_t = now
                else:
                    plist, plist_t, why = cache[i]
                    if plist is None:
                        na["processes"] = why or "N/A"
                ug, um, total, used, temp, power, plimit, sm, mclk, mask = bound.unpack(bound.out)
                st = static[i]
                g = _new(GpuSample)
                _set(g, "__dict__", {
                    "index": i, "t": now, "uuid": st.uuid, "name": st.name, "bus_id": st.bus_id,
                    "lost": False, "util_gpu": float(ug), "util_mem": float(um), "mem_used": used,
                    "mem_total": total, "temp_c": float(temp), "power_w": power / 1000.0,
                    "power_limit_w": plimit / 1000.0, "sm_clock_mhz": float(sm), "mem_clock_mhz": float(mclk),
                    "throttle": decode_throttle(mask), "processes": plist, "processes_t": plist_t,
                    "mig_enabled": st.mig_enabled, "mig_devices": (), "slow": slow.get(i), "na": na,
                })
                gpus[slot] = g
            spent = time.perf_counter() - t0
            n = len(gpus)
            if self._times is not None and n:
                self._time_note("pass", spent * 1e6 / n)
                self._time_note("rest", max(0.0, spent * 1e6 - self._calls_us) / n)
            return gpu_frame(now, self._state, tuple(gpus), spent, procs)

    def _fast_rows(self, procs: bool, mono: float) -> tuple[float, tuple[tuple[int, Any, Any, Any], ...]]:
        """(valid until, one row per GPU: index, handle, its direct calls with a
        :class:`DirectPass` or ``None`` for the field-by-field pass, and that
        pass bound to the GPU's handle and its own buffer)."""
        rows = []
        until = float("inf")
        for i, h in enumerate(self._handles):
            fast = None
            bound: Any = None
            if h is not None and self._times is None and not self._mig.get(i):
                fast = self._fast_calls(i, procs)
                if fast is not None:
                    until = min(until, fast.until)
                    if fast.batch is None:
                        fast = None
                    else:
                        bound = fast.batch.bind(h)
            rows.append((i, h, fast, bound))
        entry = (until, tuple(rows))
        self._fast[procs] = entry  # type: ignore[index]  # cleared with the per-GPU entries
        return entry

def open_adapter(mode: str = "auto", *, demo: bool = False, fake_kwargs: dict[str, Any] | None = None) -> NvmlAdapter:
    """Pick the GPU source.

    ``mode``: ``"nvml"`` (the real library, even if it is missing: the page
    then says there is no driver), ``"fake"`` (the fake 8-GPU source), or
    ``"auto"``: the real library when it initialises; otherwise the fake when
    ``demo`` is true, else the real adapter in its "no driver" state.
    """
    from backend.telemetry.fake import FakeNvml  # noqa: PLC0415 (it imports pynvml, which this module defers)

    if mode == "fake":
        return NvmlAdapter(FakeNvml(**(fake_kwargs or {})), source="fake")
    real = NvmlAdapter()
    if mode == "nvml":
        return real
    if mode != "auto":
        raise ValueError(f"GPU source {mode!r}: expected 'auto', 'nvml' or 'fake'")
    if real.state().ok or not demo:
        return real
    return NvmlAdapter(FakeNvml(**(fake_kwargs or {})), source="fake")
