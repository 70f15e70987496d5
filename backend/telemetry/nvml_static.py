"""The NVML adapter's static and slow readings, kept apart from the 1 s pass.

:class:`StaticReads`: name, uuid, bus id, total memory and MIG layout, read
once per GPU and on :meth:`~StaticReads.refresh_static`.
:class:`SlowReads`: ECC, energy, NVLink and PCIe throughput, read on the
sampler's slow thread (PCIe on demand).  Both are mixed into
:class:`backend.telemetry.nvml.NvmlAdapter` and use its library, handles
and error handling.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from backend.telemetry.model import GpuStatic, MigDevice, SlowFields, frozen_map
from backend.telemetry.nvml_codes import (
    LOST_CODES,
    NVML_DEVICE_MIG_ENABLE,
    NVML_MEMORY_ERROR_TYPE_CORRECTED,
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
    NVML_NVLINK_MAX_LINKS,
    NVML_PCIE_UTIL_RX_BYTES,
    NVML_PCIE_UTIL_TX_BYTES,
    NVML_VOLATILE_ECC,
    _Lost,
    _text,
    error_code,
    reason_for,
)


class StaticReads:
    """Static information and MIG layout (mixed into NvmlAdapter)."""

    _lib: Any
    _handles: list[Any]
    _static: list[GpuStatic]
    _mig: dict[int, list[tuple[Any, MigDevice]]]
    _err_cls: type[BaseException]


    def _read_static(self, i: int, h: Any) -> GpuStatic:
        if h is None:
            return GpuStatic(i, None, None, None, None, None)
        lib = self._lib
        vals: dict[str, Any] = {}
        for key, fn in (
            ("uuid", lib.nvmlDeviceGetUUID),
            ("name", lib.nvmlDeviceGetName),
            ("pci", lib.nvmlDeviceGetPciInfo),
        ):
            try:
                vals[key], _ = self._try(fn, h)
            except _Lost:
                vals[key] = None
        mem = None
        try:
            m, _ = self._memory(h)
            mem = int(m.total) if m is not None else None
        except _Lost:
            pass
        mig = None
        try:
            mode, _ = self._try(getattr(lib, "nvmlDeviceGetMigMode"), h)
            if mode is not None:
                cur = mode[0] if isinstance(mode, (list, tuple)) else mode
                mig = cur == NVML_DEVICE_MIG_ENABLE
        except (_Lost, AttributeError):
            pass
        pci = vals.get("pci")
        bus = _text(getattr(pci, "busId", None)) if pci is not None else None
        return GpuStatic(i, _text(vals.get("uuid")), _text(vals.get("name")), bus, mem, mig)

    def _read_mig(self, i: int, h: Any) -> list[tuple[Any, MigDevice]]:
        lib = self._lib
        out: list[tuple[Any, MigDevice]] = []
        try:
            n, _ = self._try(lib.nvmlDeviceGetMaxMigDeviceCount, h)
            for k in range(int(n or 0)):
                try:
                    mh = lib.nvmlDeviceGetMigDeviceHandleByIndex(h, k)
                except self._err_cls:  # type: ignore[misc]
                    continue  # NotFound: slot unused
                uuid, _ = self._try(lib.nvmlDeviceGetUUID, mh)
                name, _ = self._try(lib.nvmlDeviceGetName, mh)
                gi, _ = self._try(lib.nvmlDeviceGetGpuInstanceId, mh)
                ci, _ = self._try(lib.nvmlDeviceGetComputeInstanceId, mh)
                out.append((mh, MigDevice(i, k, _text(uuid), _text(name), gi, ci, None, None)))
        except _Lost:
            return []
        return out

    def refresh_static(self) -> None:
        """Re-read MIG layout (it changes only when an admin reconfigures)."""
        if not self._ensure_init():
            return
        with self._lock:
            self._skip = {}  # fields remembered as unsupported are asked again too
            self._fast = {}
            for i, h in enumerate(self._handles):
                st = self._read_static(i, h)
                if st.uuid is not None or self._static[i].uuid is None:
                    self._static[i] = st
                self._mig[i] = self._read_mig(i, h) if st.mig_enabled else []


class SlowReads:
    """ECC, energy, NVLink and PCIe throughput (mixed into NvmlAdapter)."""

    _lib: Any
    _handles: list[Any]
    _slow: dict[int, SlowFields]
    _pcie: dict[int, tuple[float, float | None, float | None, dict[str, str]]]
    _err_cls: type[BaseException]


    def read_pcie(self, i: int) -> SlowFields | None:
        """Read PCIe TX/RX throughput of one GPU (two calls of ~20 ms each on
        an H200) and fold it into that GPU's slow fields."""
        if not self._ensure_init() or not 0 <= i < len(self._handles) or self._handles[i] is None:
            return None
        lib, h = self._lib, self._handles[i]
        now = self._clock()
        try:
            tx, why_tx = self._try(lib.nvmlDeviceGetPcieThroughput, h, NVML_PCIE_UTIL_TX_BYTES)
            rx, why_rx = self._try(lib.nvmlDeviceGetPcieThroughput, h, NVML_PCIE_UTIL_RX_BYTES)
        except _Lost as lost:
            tx = rx = None
            why_tx = why_rx = lost.reason
        pna = {}
        if tx is None:
            pna["pcie_tx_bps"] = why_tx or "N/A"
        if rx is None:
            pna["pcie_rx_bps"] = why_rx or "N/A"
        entry = (now, tx * 1024.0 if tx is not None else None, rx * 1024.0 if rx is not None else None, pna)
        self._pcie[i] = entry  # NVML reports KB/s
        old = self._slow.get(i)
        if old is None:
            return None
        na = {k: v for k, v in old.na.items() if not k.startswith("pcie_")}
        na.update(pna)
        new = replace(old, pcie_tx_bps=entry[1], pcie_rx_bps=entry[2], pcie_t=now, na=frozen_map(na))
        self._slow = {**self._slow, i: new}
        return new

    def read_slow(self, *, pcie: bool = False) -> dict[int, SlowFields]:
        """Read ECC, energy and NVLink (and PCIe throughput when ``pcie``).

        PCIe throughput blocks about 20 ms per call on an H200, so callers
        ask for it rarely and never from the 1 s path.
        """
        if not self._ensure_init():
            return {}
        lib = self._lib
        out: dict[int, SlowFields] = {}
        for i, h in enumerate(list(self._handles)):
            if h is None:
                continue
            now = self._clock()
            na: dict[str, str] = {}
            try:
                unc, why = self._try(lib.nvmlDeviceGetTotalEccErrors, h, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC)
                if unc is None:
                    na["ecc_uncorrected_volatile"] = why  # type: ignore[assignment]
                cor, why = self._try(lib.nvmlDeviceGetTotalEccErrors, h, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC)
                if cor is None:
                    na["ecc_corrected_volatile"] = why  # type: ignore[assignment]
                energy, why = self._recent_energy(i)  # type: ignore[attr-defined]  # nvml_energy.py
                if energy is None and why is None:
                    energy, why = self._try(lib.nvmlDeviceGetTotalEnergyConsumption, h)
                if energy is None:
                    na["energy_j"] = why  # type: ignore[assignment]
                active = total = 0
                link_why = None
                for link in range(NVML_NVLINK_MAX_LINKS):
                    try:
                        on = lib.nvmlDeviceGetNvLinkState(h, link)
                    except self._err_cls as e:  # type: ignore[misc]
                        code = error_code(e)
                        if code in LOST_CODES:
                            raise _Lost(reason_for(e)) from None
                        if link == 0:
                            link_why = reason_for(e)
                        break
                    total += 1
                    active += 1 if on else 0
                if link_why is not None:
                    na["nvlink_active"] = na["nvlink_total"] = link_why
                if pcie:
                    tx, why_tx = self._try(lib.nvmlDeviceGetPcieThroughput, h, NVML_PCIE_UTIL_TX_BYTES)
                    rx, why_rx = self._try(lib.nvmlDeviceGetPcieThroughput, h, NVML_PCIE_UTIL_RX_BYTES)
                    pna = {}
                    if tx is None:
                        pna["pcie_tx_bps"] = why_tx or "N/A"
                    if rx is None:
                        pna["pcie_rx_bps"] = why_rx or "N/A"
                    self._pcie[i] = (
                        now,
                        tx * 1024.0 if tx is not None else None,  # NVML reports KB/s
                        rx * 1024.0 if rx is not None else None,
                        pna,
                    )
            except _Lost as lost:
                out[i] = SlowFields(now, na=frozen_map({"all": lost.reason}))
                continue
            p = self._pcie.get(i)
            if p is None:
                na["pcie_tx_bps"] = na["pcie_rx_bps"] = "PCIe throughput not read yet (read on demand)"
            else:
                na.update(p[3])
            out[i] = SlowFields(
                t=now,
                ecc_uncorrected_volatile=int(unc) if unc is not None else None,
                ecc_corrected_volatile=int(cor) if cor is not None else None,
                energy_j=energy / 1000.0 if energy is not None else None,
                nvlink_active=None if link_why else active,
                nvlink_total=None if link_why else total,
                pcie_tx_bps=p[1] if p else None,
                pcie_rx_bps=p[2] if p else None,
                pcie_t=p[0] if p else None,
                na=frozen_map(na),
            )
        self._slow = {**self._slow, **out}
        return out
