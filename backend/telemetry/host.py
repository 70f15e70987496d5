"""Host telemetry through psutil: CPU, memory, disks (given paths) and network rates.

psutil is optional here so the GPU proof script runs on a bare machine:
without it, CPU, memory and network are N/A with the reason, and disks and
load still come from the standard library.
"""

from __future__ import annotations

import os
import shutil
import time
from typing import Callable, Sequence

from backend.telemetry.model import DiskUsage, HostSample, frozen_map

try:
    import psutil
except ImportError:  # pragma: no cover - exercised only on bare machines
    psutil = None  # type: ignore[assignment]

NO_PSUTIL = "psutil is not installed"


class HostReader:
    def __init__(self, disk_paths: Sequence[str | os.PathLike[str]] = (), *, clock: Callable[[], float] = time.time):
        self._paths = [str(p) for p in disk_paths]
        self._clock = clock
        self._net_prev: tuple[float, int, int] | None = None
        self._cpu_primed = False
        self._cpu_count = os.cpu_count()

    @property
    def disk_paths(self) -> list[str]:
        return list(self._paths)

    def sample(self) -> HostSample:
        now = self._clock()
        mono = time.monotonic()
        na: dict[str, str] = {}
        cpu = mem_used = mem_total = mem_pct = swap = rx = tx = None
        if psutil is None:
            for f in ("cpu_percent", "mem_used", "mem_total", "mem_percent", "swap_used", "net_rx_bps", "net_tx_bps"):
                na[f] = NO_PSUTIL
        else:
            c = psutil.cpu_percent(interval=None)
            if self._cpu_primed:
                cpu = float(c)
            else:
                self._cpu_primed = True
                na["cpu_percent"] = "first reading: CPU share needs two samples"
            vm = psutil.virtual_memory()
            mem_used, mem_total, mem_pct = int(vm.total - vm.available), int(vm.total), float(vm.percent)
            try:
                swap = int(psutil.swap_memory().used)
            except (OSError, RuntimeError) as e:
                na["swap_used"] = f"cannot read swap: {e}"
            try:
                io = psutil.net_io_counters()
            except (OSError, RuntimeError) as e:
                io = None
                na["net_rx_bps"] = na["net_tx_bps"] = f"cannot read network counters: {e}"
            if io is not None:
                prev = self._net_prev
                self._net_prev = (mono, int(io.bytes_recv), int(io.bytes_sent))
                if prev is None or mono <= prev[0]:
                    na["net_rx_bps"] = na["net_tx_bps"] = "first reading: rates need two samples"
                else:
                    dt = mono - prev[0]
                    rx = max(0, io.bytes_recv - prev[1]) / dt
                    tx = max(0, io.bytes_sent - prev[2]) / dt
        try:
            load = os.getloadavg()[0]
        except OSError as e:
            load = None
            na["load_1m"] = f"no load average: {e}"
        disks = tuple(self._disk(p) for p in self._paths)
        return HostSample(
            t=now,
            cpu_percent=cpu,
            cpu_count=self._cpu_count,
            load_1m=load,
            mem_used=mem_used,
            mem_total=mem_total,
            mem_percent=mem_pct,
            swap_used=swap,
            disks=disks,
            net_rx_bps=rx,
            net_tx_bps=tx,
            na=frozen_map(na),
        )

    @staticmethod
    def _disk(path: str) -> DiskUsage:
        try:
            if psutil is not None:
                u = psutil.disk_usage(path)
                return DiskUsage(path, int(u.total), int(u.used), int(u.free), float(u.percent))
            u2 = shutil.disk_usage(path)
            pct = 100.0 * u2.used / u2.total if u2.total else None
            return DiskUsage(path, u2.total, u2.used, u2.free, pct)
        except OSError as e:
            return DiskUsage(path, None, None, None, None, na=f"cannot read {path}: {e.strerror or e}")
