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

Static and slow readings live in ``nvml_static.py``, the candidate lists of
the versioned calls in ``nvml_calls.py``, codes and the call table in
``nvml_codes.py``.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any, Callable, NamedTuple, Sequence

from backend.telemetry.model import (
    GpuFrame,
    GpuProcess,
    GpuSample,
    GpuStatic,
    MigDevice,
    NvmlState,
    NvmlStatus,
    SlowFields,
    frozen_map,
    gpu_sample,
)

from backend.telemetry.nvml_codes import *  # noqa: F403 - codes and constants, re-exported
from backend.telemetry.nvml_codes import _NO_INSTANCE, _Lost, _text
from backend.telemetry.nvml_calls import VersionedCalls
from backend.telemetry.nvml_static import SlowReads, StaticReads


_NOT_READ = object()  # the process list was not read in this pass


class _FastCalls(NamedTuple):
    keys: tuple[str, ...]
    calls: tuple[Callable[[Any], Any], ...]
    na: dict[str, str]  # fields of the calls left out, with why
    skipped: dict[str, None]  # calls left out (remembered as unsupported)
    until: float  # monotonic time the first left-out call is due to be probed again


def _bind(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[[Any], Any]:
    """``fn`` with its arguments after the handle bound: ``call(handle)``."""
    if not args and not kwargs:
        return fn
    if not kwargs:
        return lambda h: fn(h, *args)
    return lambda h: fn(h, *args, **kwargs)


def _import_pynvml() -> Any:
    import pynvml  # noqa: PLC0415 (lazy on purpose)

    return pynvml


class NvmlAdapter(VersionedCalls, StaticReads, SlowReads):
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
        # per-call timings (µs per GPU), kept only when asked for (bench/gpu_proof.py)
        self._times: dict[str, deque[float]] | None = {} if time_calls else None
        self._calls_us = 0.0  # µs spent in timed NVML calls during the current pass
        self.procs_interval_s = procs_interval_s
        self._memory_v2 = memory_v2
        self._procs_at: float | None = None  # clock time of the last process-list pass
        self._procs_due = True
        # gpu -> (processes or None, clock time read, why N/A)
        self._procs_cache: dict[int, tuple[tuple[GpuProcess, ...] | None, float, str | None]] = {}
        # the chosen candidate of each core call: (key, function, args, kwargs); None = rebuild
        self._plan: list[tuple[str, Callable[..., Any] | None, tuple[Any, ...], dict[str, Any]]] | None = None
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
        """
        with self._pass_lock:
            t0 = time.perf_counter()
            now = self._clock()
            if not self._ensure_init():
                return GpuFrame(now, self._state, (), time.perf_counter() - t0)
            n = len(self._handles)
            self._calls_us = 0.0
            last = self._procs_at
            procs = self._procs_due or last is None or not 0 <= now - last < self.procs_interval_s
            if procs:
                self._procs_due = False
                self._procs_at = now
            gpus = tuple([self._sample_gpu(i, now, procs) for i in range(n)])
            spent = time.perf_counter() - t0
            if self._times is not None and n:
                self._time_note("pass", spent * 1e6 / n)
                self._time_note("rest", max(0.0, spent * 1e6 - self._calls_us) / n)
            return GpuFrame(now, self._state, gpus, spent, procs_read=procs)

    def _sample_gpu(self, i: int, now: float, read_procs: bool) -> GpuSample:
        st = self._static[i]
        h = self._handles[i]
        lib = self._lib
        if h is None:  # lost at start-up, or handle unavailable: try again
            try:
                h = lib.nvmlDeviceGetHandleByIndex(i)
            except self._err_cls as e:  # type: ignore[misc]
                self._procs_cache.pop(i, None)
                return self._lost_sample(i, now, reason_for(e))
            self._handles[i] = h
            st = self._static[i] = self._read_static(i, h)
        cached = self._procs_cache.get(i)
        procs_now = read_procs or cached is None
        fast = None if self._times is not None else self._fast_calls(i, procs_now)
        got: dict[str, Any] | None = None
        values: list[Any] = []
        na: dict[str, str] = {}
        try:
            if fast is None:
                got, na = self._careful_pass(i, h, procs_now)
            else:
                try:  # the chosen candidates, called directly: the common case, nearly a raw pass
                    for call in fast.calls:
                        values.append(call(h))
                except Exception as e:  # noqa: BLE001 - the careful path sorts it out (or re-raises)
                    got, na = self._finish_carefully(i, h, fast, values, e)
                else:
                    if fast.skipped:  # some calls left out: go by name
                        got = dict(fast.skipped)
                        got.update(zip(fast.keys, values))
                        na = dict(fast.na)
            migs: tuple[MigDevice, ...] = ()
            if self._mig.get(i):
                migs = tuple(self._sample_mig(mh, md) for mh, md in self._mig[i])
        except _Lost as lost:
            self._procs_cache.pop(i, None)
            return self._lost_sample(i, now, lost.reason)
        if got is None:  # every call made, in CORE_CALLS order
            util, mem, temp, power, plimit, sm, mclk, mask = values[:8]
            raw = values[8] if procs_now else _NOT_READ
        else:
            util, mem, temp, power, plimit = got["util"], got["memory"], got["temp"], got["power"], got["plimit"]
            sm, mclk, mask = got["sm_clock"], got["mem_clock"], got["throttle"]
            raw = got.get("procs", _NOT_READ)
        if mem is None:
            used = None
            total = st.memory_total
            if total is None:
                na["mem_total"] = na["mem_used"]
        else:
            used, total = int(mem.used), int(mem.total)
        if raw is not _NOT_READ:
            procs = self._processes(i, raw) if raw is not None else None
            procs_t = now
            self._procs_cache[i] = (procs, now, na.get("processes"))
        else:
            procs, procs_t, why = cached  # type: ignore[misc]
            if procs is None:
                na["processes"] = why or "N/A"
        return gpu_sample({
            "index": i,
            "t": now,
            "uuid": st.uuid,
            "name": st.name,
            "bus_id": st.bus_id,
            "lost": False,
            "util_gpu": float(util.gpu) if util is not None else None,
            "util_mem": float(util.memory) if util is not None else None,
            "mem_used": used,
            "mem_total": total,
            "temp_c": float(temp) if temp is not None else None,
            "power_w": power / 1000.0 if power is not None else None,
            "power_limit_w": plimit / 1000.0 if plimit is not None else None,
            "sm_clock_mhz": float(sm) if sm is not None else None,
            "mem_clock_mhz": float(mclk) if mclk is not None else None,
            "throttle": decode_throttle(int(mask)) if mask is not None else None,
            "processes": procs,
            "processes_t": procs_t,
            "mig_enabled": st.mig_enabled,
            "mig_devices": migs,
            "slow": self._slow.get(i),
            "na": na,
        })

    def _careful_pass(self, i: int, h: Any, procs: bool) -> tuple[dict[str, Any], dict[str, str]]:
        """Every core call of GPU ``i`` through the candidate lists, each failure
        N/A with its reason (lost GPUs raise ``_Lost``)."""
        na: dict[str, str] = {}
        got: dict[str, Any] = {}
        for key in CORE_CALLS:
            if key == "procs" and not procs:
                continue
            value, why = self._versioned(key, h, i)
            got[key] = value
            if value is None:
                for f in CORE_FIELDS[key]:
                    na[f] = why or "N/A"
        return got, na

    def _finish_carefully(
        self, i: int, h: Any, fast: "_FastCalls", values: list[Any], err: BaseException
    ) -> tuple[dict[str, Any], dict[str, str]]:
        """The direct calls got ``values`` and then the next one raised ``err``:
        that call is sorted out by its candidate list (without calling it
        again), and the rest go through theirs."""
        got: dict[str, Any] = dict(fast.skipped)
        na = dict(fast.na)
        done = len(values)
        got.update(zip(fast.keys[:done], values))
        for j in range(done, len(fast.keys)):
            key = fast.keys[j]
            value, why = self._versioned(key, h, i, failed=err if j == done else None)
            got[key] = value
            if value is None:
                for f in CORE_FIELDS[key]:
                    na[f] = why or "N/A"
        return got, na

    def _fast_calls(self, i: int, procs: bool) -> "_FastCalls | None":
        """GPU ``i``'s direct calls: the chosen candidate of each core call,
        bound to its arguments; fields remembered as unsupported are left out
        (N/A with their reason) until their re-probe time.  ``None`` when a
        chosen candidate is missing from the bindings.  A candidate that
        fails sends the pass to the careful path, which settles on the next
        one and rebuilds these calls."""
        mono = time.monotonic()
        entry = self._fast.get((i, procs))
        if entry is not None and mono < entry.until:
            return entry
        plan = self._plan if self._plan is not None else self._build_plan()
        keys, calls, na, skipped = [], [], {}, {}
        until = float("inf")
        for key, fn, args, kwargs in plan:
            if key == "procs" and not procs:
                continue
            skip = self._skip.get((i, key))
            if skip is not None and mono < skip[0]:
                skipped[key] = None
                for f in CORE_FIELDS[key]:
                    na[f] = skip[1]
                until = min(until, skip[0])
                continue
            if fn is None:
                return None
            keys.append(key)
            calls.append(_bind(fn, args, kwargs))
        entry = _FastCalls(tuple(keys), tuple(calls), na, skipped, until)
        self._fast[(i, procs)] = entry
        return entry

    def _processes(self, i: int, procs: Sequence[Any]) -> tuple[GpuProcess, ...]:
        out = []
        for p in procs:
            used = getattr(p, "usedGpuMemory", None)
            if used == NVML_VALUE_NOT_AVAILABLE_ULL:  # older bindings pass "not available" through
                used = None
            gi = getattr(p, "gpuInstanceId", None)
            ci = getattr(p, "computeInstanceId", None)
            out.append(
                GpuProcess(
                    gpu_index=i,
                    pid=int(p.pid),
                    used_memory=int(used) if used is not None else None,
                    type="C",
                    gpu_instance_id=None if gi in (None, _NO_INSTANCE) else int(gi),
                    compute_instance_id=None if ci in (None, _NO_INSTANCE) else int(ci),
                )
            )
        return tuple(out)

    def _sample_mig(self, mh: Any, md: MigDevice) -> MigDevice:
        mem, why = self._memory(mh)
        if mem is None:
            return MigDevice(
                md.parent_index, md.mig_index, md.uuid, md.name, md.gpu_instance_id,
                md.compute_instance_id, None, None, frozen_map({"memory_used": why or "N/A"}),
            )
        return MigDevice(
            md.parent_index, md.mig_index, md.uuid, md.name, md.gpu_instance_id,
            md.compute_instance_id, int(mem.used), int(mem.total), {},
        )

    def _lost_sample(self, i: int, now: float, reason: str) -> GpuSample:
        st = self._static[i]
        fields = (
            "util_gpu", "util_mem", "mem_used", "temp_c", "power_w", "power_limit_w",
            "sm_clock_mhz", "mem_clock_mhz", "throttle", "processes",
        )
        return GpuSample(
            index=i,
            t=now,
            uuid=st.uuid,
            name=st.name,
            bus_id=st.bus_id,
            lost=True,
            mem_total=st.memory_total,
            mig_enabled=st.mig_enabled,
            na=frozen_map({f: reason for f in fields}),
        )

def open_adapter(mode: str = "auto", *, demo: bool = False, fake_kwargs: dict[str, Any] | None = None) -> NvmlAdapter:
    """Pick the GPU source.

    ``mode``: ``"nvml"`` (the real library, even if it is missing: the page
    then says there is no driver), ``"fake"`` (the fake 8-GPU source), or
    ``"auto"``: the real library when it initialises; otherwise the fake when
    ``demo`` is true, else the real adapter in its "no driver" state.
    """
    from backend.telemetry.fake import FakeNvml  # noqa: PLC0415

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
