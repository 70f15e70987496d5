"""The adapter's field-by-field pass: each core call of a GPU by name, through
the chosen calls (the C functions or the bindings' functions), and on a
failure through each call's candidate list; also the GPU process list,
MIG devices and lost GPUs.  The usual pass (``NvmlAdapter.sample``) hands a
GPU to :meth:`FieldwisePass._sample_gpu` when it cannot read it in one
:class:`DirectPass`, or when one of its calls fails.

:class:`FieldwisePass` is mixed into :class:`backend.telemetry.nvml.NvmlAdapter`
and uses its library, caches and versioned calls.
"""

from __future__ import annotations

import time
from typing import Any, Callable, NamedTuple, Sequence

from backend.telemetry.model import GpuProcess, GpuSample, MigDevice, _new, _set, frozen_map, gpu_sample
from backend.telemetry.nvml_codes import (
    CORE_CALLS,
    CORE_FIELDS,
    NVML_VALUE_NOT_AVAILABLE_ULL,
    _NO_INSTANCE,
    _Lost,
    decode_throttle,
    reason_for,
)
from backend.telemetry.nvml_direct import BATCH_KEYS, DirectPass

_NOT_READ = object()  # the process list was not read in this pass


class _FastCalls(NamedTuple):
    keys: tuple[str, ...]
    calls: tuple[Callable[[Any], Any], ...]
    na: dict[str, str]  # fields of the calls left out, with why
    skipped: dict[str, None]  # calls left out (remembered as unsupported)
    until: float  # monotonic time the first left-out call is due to be probed again
    batch: DirectPass | None = None  # the scalar calls on the C functions, when none is left out
    procs: Callable[[Any], Any] | None = None  # the process-list call, when it is made


class FieldwisePass:
    """GPU by GPU, field by field (mixed into NvmlAdapter)."""

    _lib: Any
    _err_cls: type[BaseException]
    _handles: list[Any]
    _static: list[Any]
    _mig: dict[int, list[tuple[Any, MigDevice]]]
    _slow: dict[int, Any]
    _skip: dict[tuple[int, str], tuple[float, str]]
    _fast: dict[Any, Any]
    _plan: Any
    _batch: DirectPass | None
    _times: Any
    _procs_cache: dict[int, tuple[tuple[GpuProcess, ...] | None, float, str | None]]

    def _sample_gpu(
        self, i: int, now: float, read_procs: bool, mono: float, failed: tuple[int, BaseException] | None = None
    ) -> GpuSample:
        """GPU ``i`` field by field.  ``failed``: (index in the pass's calls,
        error) of a call the usual pass just made, handled as its answer."""
        h = self._handles[i]
        if h is None:  # lost at start-up, or handle unavailable: try again
            try:
                h = self._lib.nvmlDeviceGetHandleByIndex(i)
            except self._err_cls as e:  # type: ignore[misc]
                self._procs_cache.pop(i, None)
                return self._lost_sample(i, now, reason_for(e))
            self._handles[i] = h
            self._static[i] = self._read_static(i, h)
            self._fast = {}  # this GPU can take the usual pass again
        cached = self._procs_cache.get(i)
        procs_now = read_procs or cached is None
        fast = None
        if self._times is None:
            fast = self._fast.get((i, procs_now))
            if fast is None or mono >= fast.until:
                fast = self._fast_calls(i, procs_now)
        try:
            if failed is not None and fast is not None:
                got, na = self._finish_carefully(i, h, fast, [], failed[1], failed_at=failed[0])
            else:
                got, na = self._general_pass(i, h, fast, procs_now)
            migs: tuple[MigDevice, ...] = ()
            if self._mig.get(i):
                migs = tuple(self._sample_mig(mh, md) for mh, md in self._mig[i])
        except _Lost as lost:
            self._procs_cache.pop(i, None)
            return self._lost_sample(i, now, lost.reason)
        st = self._static[i]
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
        procs, procs_t = self._procs_part(i, raw, now, cached, na)
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

    def _procs_part(self, i: int, raw: Any, now: float, cached: Any, na: dict[str, str]) -> tuple[Any, Any]:
        """The sample's (processes, processes_t): the list just read (kept for
        the passes in between), or the one read last with its time."""
        if raw is not _NOT_READ:
            procs = self._processes(i, raw) if raw is not None else None
            self._procs_cache[i] = (procs, now, na.get("processes"))
            return procs, now
        procs, procs_t, why = cached
        if procs is None:
            na["processes"] = why or "N/A"
        return procs, procs_t

    def _general_pass(self, i: int, h: Any, fast: "_FastCalls | None", procs: bool) -> tuple[dict[str, Any], dict[str, str]]:
        """Every core call of GPU ``i`` by name: through the chosen calls (the
        bindings' functions, or per-call C readers) when there are any, else
        through the candidate lists."""
        if fast is None:
            return self._careful_pass(i, h, procs)
        values: list[Any] = []
        try:
            for call in fast.calls:
                values.append(call(h))
        except Exception as e:  # noqa: BLE001 - the careful path sorts it out (or re-raises)
            return self._finish_carefully(i, h, fast, values, e)
        got: dict[str, Any] = dict(fast.skipped)
        got.update(zip(fast.keys, values))
        return got, dict(fast.na)

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
        self, i: int, h: Any, fast: "_FastCalls", values: list[Any], err: BaseException, failed_at: int | None = None
    ) -> tuple[dict[str, Any], dict[str, str]]:
        """The direct calls got ``values`` and then call ``failed_at`` (by
        default the next one) answered ``err``: that call is sorted out by its
        candidate list (without calling it again), and every other call not
        in ``values`` goes through its own."""
        got: dict[str, Any] = dict(fast.skipped)
        na = dict(fast.na)
        done = len(values)
        failed = done if failed_at is None else failed_at
        got.update(zip(fast.keys[:done], values))
        for j in range(done, len(fast.keys)):
            key = fast.keys[j]
            value, why = self._versioned(key, h, i, failed=err if j == failed else None)
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
        one and rebuilds these calls.  ``batch``: the scalar calls as one
        :class:`DirectPass` when the C functions can be called and none of
        them is left out; ``procs``: the process-list call, if made."""
        mono = time.monotonic()
        entry = self._fast.get((i, procs))
        if entry is not None and mono < entry.until:
            return entry
        plan = self._plan if self._plan is not None else self._build_plan()
        keys, calls, na, skipped = [], [], {}, {}
        until = float("inf")
        procs_call = None
        for key, call in plan:
            if key == "procs" and not procs:
                continue
            skip = self._skip.get((i, key))
            if skip is not None and mono < skip[0]:
                skipped[key] = None
                for f in CORE_FIELDS[key]:
                    na[f] = skip[1]
                until = min(until, skip[0])
                continue
            if call is None:
                return None
            keys.append(key)
            calls.append(call)
            if key == "procs":
                procs_call = call
        batch = self._batch if not any(k in skipped for k in BATCH_KEYS) else None
        entry = _FastCalls(tuple(keys), tuple(calls), na, skipped, until, batch, procs_call)
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
            g = _new(GpuProcess)  # the frozen record without its per-field __setattr__ (see gpu_sample)
            _set(g, "__dict__", {
                "gpu_index": i,
                "pid": int(p.pid),
                "used_memory": int(used) if used is not None else None,
                "type": "C",
                "gpu_instance_id": None if gi in (None, _NO_INSTANCE) else int(gi),
                "compute_instance_id": None if ci in (None, _NO_INSTANCE) else int(ci),
            })
            out.append(g)
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
