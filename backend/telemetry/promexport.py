"""Specdeck's sampler as a Prometheus exporter, in nvitop-exporter's metric names.

A node without DCGM or nvitop-exporter still shows on every other Specdeck's GPUs page: the
sampler's latest snapshot is written at each scrape as ``gpu_utilization_Percentage``,
``gpu_memory_used_MiB`` ... with ``hostname``/``index``/``devicename``/``uuid`` labels, the GPU
processes as ``process_gpu_memory_MiB`` (``pid``, ``username``), and which managed job holds each
pid as ``specdeck_gpu_job_info`` (labels ``managed_job`` and ``managed_kind``: a ``job`` label would
be renamed ``exported_job`` by Prometheus, whose own ``job`` is the scrape job).  A reading that is N/A is left out (the reader then shows it
N/A, never 0), and so is every GPU series of a snapshot older than ``stale_after_s``.  With
``[telemetry] source = "fake"`` this is the fake GPU exporter the tests scrape.

Also here: the checks of ``[telemetry.prometheus]`` that the file's schema does not make (the
URL's scheme, ``export`` as HOST:PORT, a readable token file), as ``path:line: key: why``.
"""

from __future__ import annotations

import logging
import re
import time
import urllib.parse
from pathlib import Path
from typing import Any, Callable, Iterator

from backend.telemetry.model import TelemetrySnapshot
from backend.telemetry.promnames import MIB, NVITOP, NVITOP_PROC_MEM, SPECDECK_ENERGY, SPECDECK_INFO, SPECDECK_JOB

log = logging.getLogger(__name__)

GPU_LABELS = ["hostname", "index", "devicename", "uuid"]
PROC_LABELS = GPU_LABELS + ["pid", "username"]
HELP = {
    "util_gpu": "GPU utilization (%).", "util_mem": "GPU memory utilization (%).",
    "mem_used": "GPU memory used (MiB).", "mem_total": "GPU memory total (MiB).", "mem_free": "GPU memory free (MiB).",
    "temp_c": "GPU temperature (C).", "power_w": "GPU power usage (W).", "power_limit_w": "GPU power limit (W).",
    "sm_clock_mhz": "GPU SM clock (MHz).", "mem_clock_mhz": "GPU memory clock (MHz).",
}


def parse_address(text: str) -> tuple[str, int]:
    """``"HOST:PORT"`` (``[::1]:9464`` for IPv6) as ``(host, port)``; ``ValueError`` says why not."""
    m = re.fullmatch(r"\[([0-9A-Fa-f:.]+)\]:(\d{1,5})|([A-Za-z0-9_.-]+):(\d{1,5})", (text or "").strip())
    if not m:
        raise ValueError(f"{text!r} is not HOST:PORT (for example 127.0.0.1:9464)")
    host = m.group(1) or m.group(3)
    port = int(m.group(2) or m.group(4))
    if not 1 <= port <= 65535:
        raise ValueError(f"port {port} is not between 1 and 65535")
    return host, port


class SnapshotCollector:
    """A prometheus_client collector over ``latest()`` (the sampler's snapshot)."""

    def __init__(self, latest: Callable[[], TelemetrySnapshot | None], *, hostname: str, source: str,
                 stale_after_s: float = 10.0, clock: Callable[[], float] = time.time):
        self._latest = latest
        self.hostname = hostname
        self.source = source
        self.stale_after_s = stale_after_s
        self._clock = clock

    def describe(self) -> list:  # no families announced at registration: collect() is dynamic
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily  # noqa: PLC0415

        snap = self._latest()
        info = GaugeMetricFamily(SPECDECK_INFO, "Specdeck's exporter: its GPU source and the age of its snapshot.",
                                 labels=["hostname", "source", "state"])
        age = None if snap is None else max(0.0, self._clock() - snap.t)
        state = "no sample" if snap is None else ("stale" if age > self.stale_after_s else snap.state.status.value)
        info.add_metric([self.hostname, snap.state.source if snap is not None else self.source, state], 1.0)
        yield info
        if snap is None or age is None or age > self.stale_after_s:
            return
        fams = {f: GaugeMetricFamily(name, HELP.get(f, name), labels=GPU_LABELS) for f, (name, _s) in NVITOP.items()}
        procs = GaugeMetricFamily(NVITOP_PROC_MEM, "Process GPU memory (MiB).", labels=PROC_LABELS)
        jobs = GaugeMetricFamily(SPECDECK_JOB, "The Specdeck job a GPU process belongs to.",
                                 labels=GPU_LABELS + ["pid", "managed_job", "managed_kind"])
        energy = CounterMetricFamily(SPECDECK_ENERGY, "NVML's total energy counter: mJ since the driver was loaded "
                                     "(read every few seconds).", labels=GPU_LABELS)
        counters = getattr(snap, "energy_mj", None) or {}
        attr = snap.attribution
        holders = {(h.gpu_index, h.pid): h for h in (attr.holders if attr is not None else ())}
        for g in snap.gpus:
            if g.lost:
                continue
            labels = [self.hostname, str(g.index), g.name or "", g.uuid or ""]
            free = None if g.mem_used is None or g.mem_total is None else g.mem_total - g.mem_used
            for fld, (_name, scale) in NVITOP.items():
                v = free if fld == "mem_free" else getattr(g, fld, None)
                if v is not None:
                    fams[fld].add_metric(labels, float(v) / scale)
            if counters.get(g.index) is not None:
                energy.add_metric(labels, float(counters[g.index]))
            for p in g.processes or ():
                h = holders.get((g.index, p.pid))
                if p.used_memory is not None:
                    procs.add_metric(labels + [str(p.pid), (h.user if h else None) or ""], p.used_memory / MIB)
                if h is not None and h.job:
                    jobs.add_metric(labels + [str(p.pid), h.job, h.kind or ""], 1.0)
        yield from fams.values()
        yield procs
        yield jobs
        yield energy


class Exporter:
    """Serves a :class:`SnapshotCollector` on ``address`` (``HOST:PORT``) in a daemon thread."""

    def __init__(self, address: str, collector: SnapshotCollector):
        self.host, self.port = parse_address(address)
        self.collector = collector
        self._server = None
        self._thread = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def start(self) -> "Exporter":
        if self._server is not None:
            return self
        from prometheus_client import CollectorRegistry, start_http_server  # noqa: PLC0415

        registry = CollectorRegistry(auto_describe=False)
        registry.register(self.collector)
        self._server, self._thread = start_http_server(self.port, addr=self.host, registry=registry)
        if self.port == 0:
            self.port = self._server.server_address[1]
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)
        self._server = self._thread = None


def config_problem(config_path: Path | str, key: str, why: str) -> str:
    """``path:line: telemetry.prometheus.KEY: why`` (the line where the file has the key)."""
    from backend.tomllines import locate  # noqa: PLC0415

    try:
        text = Path(config_path).read_text(encoding="utf-8")
    except OSError:
        text = ""
    line = locate(text, ("telemetry.prometheus", key)) if text else None
    return f"{config_path}{f':{line}' if line else ''}: telemetry.prometheus.{key}: {why}"


def check_prometheus(pcfg: Any, config_path: Path | str) -> list[str]:
    """The problems of ``[telemetry.prometheus]`` as ``path:line: key: why`` (empty when fine)."""

    def problem(key: str, why: str) -> str:
        return config_problem(config_path, key, why)

    out = []
    url = getattr(pcfg, "url", None)
    if url:
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.netloc:
            out.append(problem("url", f"{url!r} is not an http(s) URL such as http://127.0.0.1:9090"))
    export = getattr(pcfg, "export", None)
    if export:
        try:
            parse_address(export)
        except ValueError as exc:
            out.append(problem("export", str(exc)))
    token_file = getattr(pcfg, "token_file", None)
    if token_file and not url:
        out.append(problem("token_file", "is set but url is not: the token is for the Prometheus at url"))
    return out
