"""The NVML adapter's versioned calls: each core reading has an ordered list of
candidate functions (``CORE_CALLS``); the first one this driver and these
bindings both support is remembered, a field that is NotSupported /
NoPermission (or that no candidate can read) is remembered per GPU and asked
again only every ``reprobe_s``, and per-call timings are kept when asked for.

:class:`VersionedCalls` is mixed into :class:`backend.telemetry.nvml.NvmlAdapter`
and uses its library, error classes and caches.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any, Callable

from backend.telemetry.nvml_direct import BATCH_KEYS, DirectPass, direct_pass, direct_reader
from backend.telemetry.nvml_codes import (
    CORE_CALLS,
    ERR_FUNCTION_NOT_FOUND,
    LOST_CODES,
    NVML_MEMORY_V2,
    STICKY_CODES,
    VERSION_CODES,
    _REASONS,
    _Lost,
    error_code,
    reason_for,
)


def _bind(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Callable[[Any], Any]:
    """``fn`` with its arguments after the handle bound: ``call(handle)``."""
    if not args and not kwargs:
        return fn
    if not kwargs:
        return lambda h: fn(h, *args)
    return lambda h: fn(h, *args, **kwargs)


class VersionedCalls:
    """Candidate lists, the chosen candidate of each call, skips and timings
    (mixed into NvmlAdapter)."""

    _lib: Any
    _err_cls: type[BaseException]
    _mismatch_cls: tuple[type[BaseException], ...]
    _memory_v2: bool
    _reprobe_s: float
    _choice: dict[str, int]
    _calls: dict[str, list[tuple[Callable[..., Any] | None, str, tuple[Any, ...], dict[str, Any]]]]
    _labels: dict[str, list[str]]
    _skip: dict[tuple[int, str], tuple[float, str]]
    _plan: list[tuple[str, Callable[[Any], Any] | None]] | None
    _direct: bool
    _batch: DirectPass | None
    _fast: dict[Any, Any]
    _times: dict[str, deque[float]] | None
    _calls_us: float

    def _try(self, fn: Callable[..., Any], *args: Any) -> tuple[Any, str | None]:
        """Call ``fn``; return (value, None) or (None, reason).  Lost GPUs raise _Lost."""
        try:
            return fn(*args), None
        except self._err_cls as e:  # type: ignore[misc]
            code = error_code(e)
            if code in LOST_CODES:
                raise _Lost(reason_for(e)) from None
            return None, reason_for(e)
        except self._mismatch_cls as e:  # type: ignore[misc]
            return None, f"{_REASONS[ERR_FUNCTION_NOT_FOUND]} ({e})"

    def _resolve_calls(self, lib: Any) -> None:
        """Look the core functions up once (not per pass); a name missing from
        the bindings is kept as ``None`` and skipped."""
        v2 = getattr(lib, "nvmlMemory_v2", NVML_MEMORY_V2)
        calls = {}
        labels = {}
        for key, cands in CORE_CALLS.items():
            if key == "memory" and not self._memory_v2:
                cands = tuple(c for c in cands if "version" not in c[2])
            calls[key] = [
                (
                    getattr(lib, name, None),
                    name,
                    args,
                    {k: (v2 if (k == "version" and v is None) else v) for k, v in kwargs.items()},
                )
                for name, args, kwargs, _label in cands
            ]
            labels[key] = [c[3] for c in cands]
        self._calls = calls
        self._labels = labels
        self._skip = {}
        self._plan = None
        self._fast = {}

    def _build_plan(self) -> list[tuple[str, Callable[[Any], Any] | None]]:
        """The candidate each core call has settled on, as ``call(handle)`` for
        the pass: the C function itself where ``nvml_direct`` knows its
        signature (and the adapter was not told otherwise), else the bindings'
        function with its arguments bound; ``None`` when the bindings lack it."""
        plan: list[tuple[str, Callable[[Any], Any] | None]] = []
        chosen = []
        for key in CORE_CALLS:
            cands = self._calls.get(key) or [(None, key, (), {})]
            fn, name, args, kwargs = cands[min(self._choice.get(key, 0), len(cands) - 1)]
            call = None
            if fn is not None:
                call = direct_reader(self._lib, name, args, kwargs) if self._direct else None
                if call is None:
                    call = _bind(fn, args, kwargs)
                if key in BATCH_KEYS:
                    chosen.append((key, name, args, kwargs))
            plan.append((key, call))
        self._plan = plan
        self._batch = direct_pass(self._lib, chosen) if self._direct else None
        return plan

    def _versioned(self, key: str, h: Any, gpu: int | None = None, failed: BaseException | None = None) -> tuple[Any, str | None]:
        """Call the first candidate of ``key`` that this driver and these bindings both support.

        A candidate that is missing from the bindings, not found in the
        driver, or rejects the struct version is skipped, and the one that
        works is remembered.  For a GPU's core pass (``gpu`` given) a field
        that is NotSupported / NoPermission, or that no candidate can read,
        is remembered too: it stays N/A with its reason and is asked again
        only every ``reprobe_s``, not every pass.  ``failed``: the error the
        current candidate just raised in the pass's direct call (it is handled
        as if raised here, without calling NVML again).
        """
        if gpu is not None and self._skip:
            skip = self._skip.get((gpu, key))
            if skip is not None:
                if time.monotonic() < skip[0]:
                    return None, skip[1]
                del self._skip[(gpu, key)]
                self._fast = {}
        times = self._times
        t0 = time.perf_counter() if times is not None else 0.0
        try:
            value, why, sticky = self._call_candidates(key, h, failed)
        finally:
            if times is not None:
                dt = (time.perf_counter() - t0) * 1e6
                self._calls_us += dt
                dq = times.get(key)
                if dq is None:
                    dq = times[key] = deque(maxlen=4096)
                dq.append(dt)
        if sticky and gpu is not None:
            self._skip[(gpu, key)] = (time.monotonic() + self._reprobe_s, why or "N/A")
            self._fast = {}
        return value, why

    def _call_candidates(self, key: str, h: Any, failed: BaseException | None = None) -> tuple[Any, str | None, bool]:
        cands = self._calls.get(key)
        if cands is None:  # library not resolved (should not happen once initialised)
            self._resolve_calls(self._lib)
            cands = self._calls[key]
        start = self._choice.get(key, 0)
        last_reason = "not available"
        for i in range(start, len(cands)):
            fn, name, args, kwargs = cands[i]
            if fn is None:
                last_reason = f"{name} is not in this nvidia-ml-py"
                continue
            try:
                if failed is not None:
                    err, failed = failed, None
                    raise err
                value = fn(h, *args, **kwargs)
            except self._err_cls as e:  # type: ignore[misc]
                code = error_code(e)
                if code in LOST_CODES:
                    raise _Lost(reason_for(e)) from None
                if code in VERSION_CODES:
                    last_reason = reason_for(e)
                    continue
                if i != start:
                    self._set_choice(key, i)
                return None, reason_for(e), code in STICKY_CODES
            except self._mismatch_cls as e:  # type: ignore[misc]
                last_reason = f"{_REASONS[ERR_FUNCTION_NOT_FOUND]} ({e})"
                continue
            except TypeError as e:  # bindings too old for this signature
                last_reason = f"{name}: {e}"
                continue
            if i != start:
                self._set_choice(key, i)
            return value, None, False
        return None, last_reason, True

    def _set_choice(self, key: str, i: int) -> None:
        self._choice[key] = i
        self._plan = None
        self._fast = {}

    def set_call_timing(self, on: bool) -> None:
        """Keep per-call timings (two clock reads per NVML call) or stop and drop them."""
        self._times = {} if on else None

    def call_times(self, reset: bool = False) -> dict[str, dict[str, float]]:
        """Per-call timings in µs per GPU (median, p90, n) when the adapter was
        made with ``time_calls=True``; ``"pass"`` is the whole core pass per
        GPU and ``"rest"`` the part of it spent outside NVML calls."""
        if self._times is None:
            return {}
        out = {}
        for key, dq in list(self._times.items()):
            xs = sorted(dq)
            if xs:
                out[key] = {"median": xs[len(xs) // 2], "p90": xs[int(0.9 * (len(xs) - 1))], "n": float(len(xs))}
        if reset:
            self._times = {}
        return out

    def chosen(self) -> dict[str, str]:
        """Which candidate each versioned call settled on (for diagnostics)."""
        labels = getattr(self, "_labels", {})
        return {k: labels[k][v] for k, v in self._choice.items() if k in labels and v < len(labels[k])}

    def _time_note(self, key: str, us: float) -> None:
        times = self._times
        if times is None:
            return
        dq = times.get(key)
        if dq is None:
            dq = times[key] = deque(maxlen=4096)
        dq.append(us)

    def _memory(self, h: Any, gpu: int | None = None) -> tuple[Any, str | None]:
        return self._versioned("memory", h, gpu)
