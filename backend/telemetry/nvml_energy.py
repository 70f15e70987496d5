"""The total energy counter of every GPU, read once per sampler pass (mixed into NvmlAdapter).

``nvmlDeviceGetTotalEnergyConsumption`` gives the mJ a GPU has used since the driver was loaded (Volta and
newer).  It is read right after the core pass, by the same thread, through the C function itself where
``nvml_direct`` can call it (one 8-byte answer), else through the bindings.  One call took about 3 ms of
wall and CPU time on an H200 machine (perf/energy_gpu_proof.py), so the sampler makes it every few seconds
on its slow thread, not in the 1 s pass, and the slow fields reuse its last answer.  A GPU that answers
NotSupported or NoPermission is remembered and asked again only every ``reprobe_s``; a lost GPU is N/A for
that pass.  Energy per job is measured from these readings (``backend.telemetry.energy``).
"""

from __future__ import annotations

import time
from typing import Any, Callable

from backend.telemetry.model import NvmlStatus
from backend.telemetry.nvml_codes import ERR_FUNCTION_NOT_FOUND, STICKY_CODES, VERSION_CODES, _REASONS, error_code, reason_for
from backend.telemetry.nvml_direct import direct_reader

ENERGY_CALL = "nvmlDeviceGetTotalEnergyConsumption"


class EnergyReads:
    """``read_energy``: {GPU index: (mJ since the driver was loaded, or None; why None)}."""

    _lib: Any
    _handles: list[Any]
    _err_cls: type[BaseException]
    _mismatch_cls: tuple[type[BaseException], ...]
    _reprobe_s: float
    _direct: bool
    _state: Any

    def _energy_reader(self) -> Callable[[Any], Any] | None:
        lib = self._lib
        cached = getattr(self, "_energy_call", None)
        if cached is not None and cached[0] is lib:
            return cached[1]
        call = direct_reader(lib, ENERGY_CALL, (), {}) if self._direct else None
        if call is None:
            call = getattr(lib, ENERGY_CALL, None)
        self._energy_call = (lib, call)
        self._energy_skip: dict[int, tuple[float, str]] = {}
        return call

    def read_energy(self) -> dict[int, tuple[int | None, str | None]]:
        """Every GPU's total energy counter in mJ, or None with why (an empty mapping without NVML)."""
        if self._state.status is not NvmlStatus.OK and not self._ensure_init():  # type: ignore[attr-defined]
            return {}
        call = self._energy_reader()
        out: dict[int, tuple[int | None, str | None]] = {}
        if call is None:
            why = f"{ENERGY_CALL} is not in this nvidia-ml-py"
            return {i: (None, why) for i in range(len(self._handles))}
        skips = self._energy_skip
        mono = time.monotonic()
        for i, h in enumerate(self._handles):
            if h is None:
                out[i] = (None, "GPU handle not available")
                continue
            skip = skips.get(i) if skips else None
            if skip is not None and mono < skip[0]:
                out[i] = (None, skip[1])
                continue
            try:
                out[i] = (int(call(h)), None)
            except self._err_cls as e:  # type: ignore[misc]
                code, why = error_code(e), reason_for(e)
                if code in STICKY_CODES or code in VERSION_CODES:
                    skips[i] = (mono + self._reprobe_s, why)
                out[i] = (None, why)
            except self._mismatch_cls as e:  # type: ignore[misc]
                why = f"{_REASONS[ERR_FUNCTION_NOT_FOUND]} ({e})"
                skips[i] = (mono + self._reprobe_s, why)
                out[i] = (None, why)
        self._energy_seen = (mono, out)
        return out

    def _recent_energy(self, i: int, max_age_s: float = 30.0) -> tuple[int | None, str | None]:
        """GPU ``i``'s counter as :meth:`read_energy` last read it, when that was within ``max_age_s``
        ((None, None) otherwise): the slow fields show it without a second call of some milliseconds."""
        seen = getattr(self, "_energy_seen", None)
        if seen is None or time.monotonic() - seen[0] > max_age_s or i not in seen[1]:
            return None, None
        return seen[1][i]
