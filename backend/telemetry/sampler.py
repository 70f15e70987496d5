"""The telemetry sampler: one per dashboard process, in the background.

A daemon thread takes one batched GPU pass and one host reading every
``interval_s`` (1 s), keeps the last ``ring_s`` (an hour) at full rate in a
ring buffer in memory, and folds every reading into min/mean/max buckets of
``bucket_s`` (a minute) that go to the state store (``state/telemetry.py``)
when they close; buckets older than ``retention_s`` are pruned.  A second
thread reads the slow fields (ECC, energy, NVLink; PCIe throughput rarely or
on request) and, every ``energy_interval_s`` (5 s), every GPU's total energy
counter into its own record (``energy_log.py``); :meth:`Sampler.energy_trace`
gives it back for measuring a job's energy.

Readers never touch NVML: :meth:`Sampler.latest` returns the last snapshot
and :meth:`Sampler.history` reads the ring (and the store for older data).
The sampler measures its own cost (wall time per sample, GPU pass per GPU,
CPU share) and puts the running figures in every snapshot.  The ring and the
buckets live in ``ring.py``.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from pathlib import Path
from collections import deque
from typing import Any, Callable, Iterable, Sequence

from backend.telemetry.alerts import gpu_alerts
from backend.telemetry.attribution import Attribution, LeftJobs, attribute, coerce_managed
from backend.telemetry.host import HostReader
from backend.telemetry.model import (
    GPU_SERIES,
    HOST_SERIES,
    GpuFrame,
    HostSample,
    NvmlState,
    NvmlStatus,
    SamplerCost,
    Series,
    TelemetrySnapshot,
)
from backend.telemetry.energy import CounterTrace
from backend.telemetry.energy_log import EnergyLog
from backend.telemetry.nvml import NvmlAdapter, open_adapter
from backend.telemetry.promattach import attach_prometheus
from backend.telemetry.ring import Buckets, Ring

__all__ = ["Sampler", "make_sampler", "make_workspace_sampler", "attach_prometheus"]

log = logging.getLogger(__name__)

HOST = -1  # ring / store index for host series


class Sampler:
    """Background GPU + host sampler.

    Parameters
    ----------
    adapter:
        The GPU source (:class:`NvmlAdapter` over real ``pynvml`` or the
        fake); ``None`` means the real NVML adapter.
    store:
        The state :class:`state.store.Store` for the downsampled history;
        ``None`` keeps only the in-memory hour.
    disk_paths:
        Volumes to report (the workspace and output directories).
    managed:
        Callable returning the managed processes as ``(name, kind, pid)``
        or ``(name, kind, pid, state)`` tuples, or objects with those
        attributes; used for attribution and the idle-while-RUNNING alert.
    """

    def __init__(
        self,
        adapter: NvmlAdapter | None = None,
        *,
        store: Any = None,
        disk_paths: Sequence[str | os.PathLike[str]] = (),
        managed: Callable[[], Iterable[Any]] | None = None,
        interval_s: float = 1.0,
        ring_s: float = 3600.0,
        bucket_s: float = 60.0,
        retention_s: float = 7 * 86400.0,
        slow_interval_s: float = 10.0,
        energy_interval_s: float | None = 5.0,
        pcie_interval_s: float | None = 300.0,
        attribution_interval_s: float = 5.0,
        idle_samples: int = 30,
        clock: Callable[[], float] = time.time,
    ):
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        self.adapter = adapter if adapter is not None else NvmlAdapter()
        self._history = None
        if store is not None:
            from state.telemetry import TelemetryStore  # noqa: PLC0415

            self._history = TelemetryStore(store)
        self.host = HostReader(disk_paths, clock=clock)
        self._managed = managed
        self.interval_s = interval_s
        self._capacity = max(2, int(math.ceil(ring_s / interval_s)) + 1)
        self._bucket_s = bucket_s
        self._retention_s = retention_s
        self.slow_interval_s = slow_interval_s
        self.energy_interval_s = energy_interval_s  # None: the energy counter is not read
        every = energy_interval_s or slow_interval_s
        # a reading waits for the gap after a core pass, and a slow-field pass in between for one more: two
        # readings lie up to ``every`` plus two core intervals apart, which a slow core cadence makes long
        self.energy = EnergyLog(capacity=max(2, int(math.ceil(ring_s / every)) + 1), bucket_s=bucket_s,
                                history=self._history, interval_s=every + 2 * interval_s)
        self.pcie_interval_s = pcie_interval_s
        self._attr_interval_s = attribution_interval_s
        self._idle_samples = idle_samples
        self._clock = clock
        # other nodes through Prometheus, and this sampler served as an exporter (make_workspace_sampler)
        self.prom: Any = None  # promsource.PromSource
        self.exporter: Any = None  # promexport.Exporter
        self.prom_problems: list[str] = []  # [telemetry.prometheus] problems, as path:line: key: why

        self._rings: dict[int, Ring] = {}
        self._ring_lock = threading.Lock()
        self._buckets = Buckets(bucket_s)
        self._latest: TelemetrySnapshot | None = None
        self._stop = threading.Event()
        self._slow_wake = threading.Event()
        self._pcie_requested = False
        self._pcie_requested_at: float | None = None  # clock time of a pending on-demand PCIe read
        self._threads: list[threading.Thread] = []
        self._sample_lock = threading.Lock()  # sample_once from tests vs the thread

        self._attr: Attribution | None = None
        self._attr_at = -1e18
        self._attr_key: frozenset[tuple[int, int]] | None = None
        self._left = LeftJobs()
        self.gone_keep_s = 120.0  # how long a job's process that left the managed list stays the job's
        self._errors: list[str] = []
        self._last_prune = -1e18
        self._pcie_at = -1e18

        # cost accounting
        self._n = 0
        self._mean_ms: float | None = None
        self._last_ms: float | None = None
        self._window_ms: deque[float] = deque(maxlen=300)
        self._window_us: deque[float] = deque(maxlen=300)
        self._sampled = threading.Event()  # set after each core sample
        self._slow_ms: float | None = None
        self._cpu_core = 0.0  # CPU seconds of the core thread
        self._cpu_slow = 0.0  # CPU seconds of the slow thread
        self._wall0: float | None = None

    # -- lifecycle -----------------------------------------------------

    @property
    def running(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    def start(self) -> "Sampler":
        if self.running:
            return self
        self._stop.clear()
        self._wall0 = time.monotonic()
        self._cpu_core = self._cpu_slow = 0.0
        self._threads = [
            threading.Thread(target=self._loop, name="telemetry-sampler", daemon=True),
            threading.Thread(target=self._slow_loop, name="telemetry-slow", daemon=True),
        ]
        for t in self._threads:
            t.start()
        if self.prom is not None:
            self.prom.start()
        if self.exporter is not None:
            try:
                self.exporter.start()
            except OSError as e:  # the address is taken or not ours: say so, keep sampling
                msg = f"exporter on {self.exporter.address} did not start: {e}"
                log.warning(msg)
                self.prom_problems.append(msg)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop both threads and wait for them; flush the open bucket."""
        self._stop.set()
        self._slow_wake.set()
        self._sampled.set()  # wakes a slow thread waiting for the gap after a core pass
        for t in self._threads:
            t.join(timeout)
        self._threads = []
        if self.prom is not None:
            self.prom.stop(timeout)
        if self.exporter is not None:
            self.exporter.stop()
        with self._sample_lock:
            self._flush_buckets()
        self.energy.flush()

    def __enter__(self) -> "Sampler":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _loop(self) -> None:
        c0 = time.thread_time()
        try:
            self.adapter.state()  # lazy NVML start-up, kept out of the per-sample figures
        except Exception as e:  # noqa: BLE001
            self._note_error(f"NVML start-up failed: {e!r}")
        self._cpu_core += time.thread_time() - c0
        nxt = time.monotonic()
        while not self._stop.is_set():
            c0 = time.thread_time()
            try:
                self.sample_once()
            except Exception as e:  # noqa: BLE001 - the sampler must keep going
                log.exception("telemetry sample failed")
                self._note_error(f"sample failed: {e!r}")
            self._cpu_core += time.thread_time() - c0
            nxt += self.interval_s
            delay = nxt - time.monotonic()
            if delay < 0:  # fell behind (suspend, slow NVML): do not burst
                nxt = time.monotonic()
                delay = 0.0
            self._stop.wait(delay)

    def _slow_loop(self) -> None:
        # the first slow pass waits one core interval so the first core sample is not delayed
        self._stop.wait(min(self.interval_s, self.slow_interval_s))
        every, slow_at = self.energy_interval_s, 0.0  # slow_at: monotonic time the next slow pass is due
        while not self._stop.is_set():
            c0 = time.thread_time()
            if every:
                try:  # on its own: a failing energy read must not stop the slow fields
                    self.read_energy_once()
                except Exception as e:  # noqa: BLE001
                    log.exception("energy counter read failed")
                    self._note_error(f"energy counter read failed: {e!r}")
            if self._slow_wake.is_set() or time.monotonic() >= slow_at:
                self._slow_wake.clear()
                slow_at = time.monotonic() + self.slow_interval_s
                try:
                    self.read_slow_once()
                except Exception as e:  # noqa: BLE001
                    log.exception("slow telemetry read failed")
                    self._note_error(f"slow read failed: {e!r}")
            self._cpu_slow += time.thread_time() - c0
            self._slow_wake.wait(min(every or self.slow_interval_s, max(0.0, slow_at - time.monotonic())))

    def read_energy_once(self) -> None:
        """Every GPU's total energy counter into :attr:`energy`, in the gap after a core pass."""
        read = getattr(self.adapter, "read_energy", None)
        if read is not None and self._after_core_sample():
            self.energy.record(self._clock(), read())

    def request_slow(self, *, pcie: bool = True) -> None:
        """Ask the slow thread for a pass now (PCIe throughput included).

        Returns at once: the NVML calls happen on the slow thread, in the gap
        after the next core pass, never in the caller's thread.
        """
        if pcie:
            if self._pcie_requested_at is None:
                self._pcie_requested_at = self._clock()
            self._pcie_requested = True
        self._slow_wake.set()

    @property
    def pcie_requested_at(self) -> float | None:
        """When an on-demand PCIe read was asked for (clock time), while it is
        still pending; ``None`` once the slow thread has read every GPU."""
        return self._pcie_requested_at

    def _after_core_sample(self) -> bool:
        """Wait for the gap right after a core sample, so slow NVML calls
        (which hold the driver) do not delay the 1 s pass.  False when stopping."""
        if not self.running or threading.current_thread() not in self._threads:
            return not self._stop.is_set()  # called directly (tests, scripts): no wait
        self._sampled.clear()
        while not self._stop.is_set():
            if self._sampled.wait(1.0):  # set by each core pass and by stop(); no busy polling
                return not self._stop.is_set()
        return False

    def read_slow_once(self) -> None:
        mono = time.monotonic()
        pcie = self._pcie_requested or (
            self.pcie_interval_s is not None and mono - self._pcie_at >= self.pcie_interval_s
        )
        asked_at = self._pcie_requested_at
        if not self._after_core_sample():
            return
        t0 = time.perf_counter()
        self.adapter.read_slow(pcie=False)
        spent = time.perf_counter() - t0
        if pcie:
            self._pcie_requested = False
            self._pcie_at = mono
            budget = 0.4 * self.interval_s
            gap_start = time.perf_counter() - spent
            for i in range(self.adapter.gpu_count()):
                if time.perf_counter() - gap_start > budget:  # wait for the next gap
                    if not self._after_core_sample():
                        return
                    gap_start = time.perf_counter()
                t1 = time.perf_counter()
                self.adapter.read_pcie(i)
                spent += time.perf_counter() - t1
            if self._pcie_requested_at == asked_at and not self._pcie_requested:
                self._pcie_requested_at = None  # answered (a request made during the pass stays pending)
        self._slow_ms = spent * 1000.0

    def _note_error(self, msg: str) -> None:
        self._errors = (self._errors + [f"{time.strftime('%H:%M:%S')} {msg}"])[-5:]

    # -- one sample ----------------------------------------------------

    def sample_once(self) -> TelemetrySnapshot:
        with self._sample_lock:
            t0 = time.perf_counter()
            frame = self.adapter.sample()
            host: HostSample | None
            try:
                host = self.host.sample()
            except Exception as e:  # noqa: BLE001
                log.exception("host sample failed")
                self._note_error(f"host sample failed: {e!r}")
                host = None
            now = frame.t
            self._record(frame, host)
            attr = self._attribute(frame)
            recent = {g.index: self.recent(g.index, "util_gpu", self._idle_samples) for g in frame.gpus}
            alerts = tuple(gpu_alerts(frame.gpus, recent, attr, idle_samples=self._idle_samples))
            self._fold(frame, host, now)
            elapsed = time.perf_counter() - t0
            self._account(elapsed, frame)
            snap = TelemetrySnapshot(
                t=now,
                state=frame.state,
                gpus=frame.gpus,
                host=host,
                cost=self.cost(),
                attribution=attr,
                alerts=alerts,
                interval_s=self.interval_s,
                errors=tuple(self._errors),
                energy_mj=self.energy.values,
                energy_na=self.energy.na,
            )
            self._latest = snap
            self._sampled.set()
            return snap

    def _account(self, elapsed: float, frame: GpuFrame) -> None:
        self._n += 1
        ms = elapsed * 1000.0
        self._last_ms = ms
        self._mean_ms = ms if self._mean_ms is None else self._mean_ms * 0.9 + ms * 0.1
        self._window_ms.append(ms)
        if frame.gpus:
            self._window_us.append(frame.nvml_s * 1e6 / len(frame.gpus))

    def cost(self) -> SamplerCost:
        share = None
        if self._wall0 is not None:
            wall = time.monotonic() - self._wall0
            if wall > 0:
                share = (self._cpu_core + self._cpu_slow) / wall
        us = sorted(self._window_us)
        ms = sorted(self._window_ms)
        return SamplerCost(
            samples=self._n,
            last_ms=self._last_ms,
            mean_ms=self._mean_ms,
            median_ms=ms[len(ms) // 2] if ms else None,
            nvml_per_gpu_us=us[len(us) // 2] if us else None,
            nvml_per_gpu_us_p90=us[int(0.9 * (len(us) - 1))] if us else None,
            nvml_per_gpu_us_mean=sum(us) / len(us) if us else None,
            cpu_share=share,
            slow_last_ms=self._slow_ms,
        )

    def pass_costs(self) -> list[float]:
        """The GPU pass of each recent sample, µs per GPU, oldest first (the
        window behind ``cost().nvml_per_gpu_us``)."""
        return list(self._window_us)

    def _record(self, frame: GpuFrame, host: HostSample | None) -> None:
        with self._ring_lock:
            for g in frame.gpus:
                ring = self._rings.get(g.index)
                if ring is None:
                    ring = self._rings[g.index] = Ring(self._capacity, GPU_SERIES)
                ring.append(frame.t, {f: getattr(g, f) for f in GPU_SERIES})
            if host is not None:
                ring = self._rings.get(HOST)
                if ring is None:
                    ring = self._rings[HOST] = Ring(self._capacity, HOST_SERIES)
                ring.append(host.t, {f: getattr(host, f) for f in HOST_SERIES})

    def _fold(self, frame: GpuFrame, host: HostSample | None, now: float) -> None:
        if self._history is None:
            return
        b0 = math.floor(now / self._bucket_s) * self._bucket_s
        if self._buckets.t0 is not None and b0 != self._buckets.t0:
            self._flush_buckets()
        self._buckets.t0 = b0
        for g in frame.gpus:
            for f in GPU_SERIES:
                self._buckets.add("gpu", g.index, f, getattr(g, f))
        if host is not None:
            for f in HOST_SERIES:
                self._buckets.add("host", HOST, f, getattr(host, f))
            for d in host.disks:
                self._buckets.add("host", HOST, f"disk_percent:{d.path}", d.percent)
        mono = time.monotonic()
        if mono - self._last_prune > 3600.0:
            self._last_prune = mono
            try:
                self._history.prune(now - self._retention_s)
            except Exception as e:  # noqa: BLE001
                self._note_error(f"pruning history failed: {e!r}")

    def _flush_buckets(self) -> None:
        if self._history is None:
            return
        rows = self._buckets.drain()
        if rows:
            try:
                self._history.write(rows)
            except Exception as e:  # noqa: BLE001 - a closed or busy store must not stop sampling
                log.warning("writing telemetry history failed: %r", e)
                self._note_error(f"writing history failed: {e!r}")

    def _attribute(self, frame: GpuFrame) -> Attribution | None:
        procs = [p for g in frame.gpus for p in (g.processes or ())]
        key = frozenset((p.gpu_index, p.pid) for p in procs)
        mono = time.monotonic()
        fresh = frame.procs_read  # a new process list (memory figures too): join it again
        if self._attr is not None and not fresh and key == self._attr_key and mono - self._attr_at < self._attr_interval_s:
            return self._attr
        managed: list[Any] | None = [] if self._managed is None else None
        if self._managed is not None:
            try:
                managed = coerce_managed(self._managed())
            except Exception as e:  # noqa: BLE001 - the provider belongs to someone else
                log.exception("managed process provider failed")
                self._note_error(f"managed process list failed: {e!r}")
        # a job's processes that left the managed list still hold its memory while the GPUs list them
        managed, gone = self._left.update(managed, {p.pid for p in procs}, mono, self.gone_keep_s)
        try:
            self._attr = attribute(procs, managed + gone, now=frame.t)
        except Exception as e:  # noqa: BLE001
            log.exception("attribution failed")
            self._note_error(f"attribution failed: {e!r}")
        self._attr_key = key
        self._attr_at = mono
        return self._attr

    # -- readers -------------------------------------------------------

    def latest(self) -> TelemetrySnapshot | None:
        """The last snapshot, or ``None`` before the first sample.  Never blocks on NVML."""
        return self._latest

    def state(self) -> NvmlState:
        snap = self._latest
        return snap.state if snap is not None else NvmlState(NvmlStatus.NOT_STARTED, "no sample yet")

    def recent(self, gpu_index: int | None, field: str, n: int) -> list[float | None]:
        with self._ring_lock:
            ring = self._rings.get(HOST if gpu_index is None else gpu_index)
            if ring is None or field not in ring.cols:
                return []
            return ring.last(field, n)

    def history(self, gpu_index: int | None, field: str, since: float, until: float | None = None) -> Series:
        """A history trace for one GPU (or the host, ``gpu_index=None``).

        Wherever the in-memory ring has readings (the last hour) they are
        returned at full rate; before the ring's oldest reading, the stored
        min/mean/max buckets (those that end by then) fill in.
        """
        idx = HOST if gpu_index is None else gpu_index
        with self._ring_lock:
            ring = self._rings.get(idx)
            oldest = ring.oldest() if ring is not None else None
            if ring is not None and field in ring.cols:
                rt, rv = ring.read(field, since, until)
            else:
                rt, rv = [], []
        if self._history is None or (oldest is not None and since >= oldest):
            return Series(field, gpu_index, tuple(rt), tuple(rv), tuple(rv), tuple(rv), self.interval_s)
        scope = "host" if idx == HOST else "gpu"
        end = oldest if oldest is not None else until
        buckets = self._history.read(scope, idx, field, since, end, width_s=self._bucket_s)
        if oldest is not None:
            buckets = [b for b in buckets if b.t0 + b.width_s <= oldest + 1e-6]
        ts: list[float] = []
        vs: list[float | None] = []
        lo: list[float | None] = []
        hi: list[float | None] = []
        prev_end = None
        for b in buckets:
            if prev_end is not None and b.t0 > prev_end + 1e-6:  # nothing recorded: keep it a gap
                ts.append(prev_end)
                vs.append(None)
                lo.append(None)
                hi.append(None)
            ts.append(b.t0 + b.width_s / 2)
            vs.append(b.vmean)
            lo.append(b.vmin)
            hi.append(b.vmax)
            prev_end = b.t0 + b.width_s
        if prev_end is not None and rt and rt[0] > prev_end + self._bucket_s:  # dashboard was down
            ts.append(prev_end)
            vs.append(None)
            lo.append(None)
            hi.append(None)
        ts.extend(rt)
        vs.extend(rv)
        lo.extend(rv)
        hi.extend(rv)
        res = self._bucket_s if buckets else self.interval_s
        return Series(field, gpu_index, tuple(ts), tuple(vs), tuple(lo), tuple(hi), res)

    def energy_trace(self, gpu_index: int, since: float, until: float) -> CounterTrace:
        """GPU ``gpu_index``'s energy counter over ``[since, until]`` (``EnergyLog.trace``)."""
        return self.energy.trace(gpu_index, since, until)

    def gpu_indices(self) -> list[int]:
        with self._ring_lock:
            return sorted(i for i in self._rings if i != HOST)


def make_sampler(
    *,
    gpu_source: str = "auto",
    demo: bool = False,
    store: Any = None,
    disk_paths: Sequence[str | os.PathLike[str]] = (),
    managed: Callable[[], Iterable[Any]] | None = None,
    interval_s: float = 1.0,
    fake_gpus: int = 8,
    **kwargs: Any,
) -> Sampler:
    """Build the dashboard's sampler (not started).

    ``gpu_source``: ``"auto"`` (real NVML; the fake only when NVML is not
    usable and ``demo`` is true), ``"nvml"`` or ``"fake"``.  With the fake,
    the managed processes are placed on its GPUs (a server on the GPUs its
    CUDA_VISIBLE_DEVICES or tensor parallelism names, a training run on one)
    so attribution shows the demo's jobs.
    """
    adapter = open_adapter(gpu_source, demo=demo, fake_kwargs={"gpus": fake_gpus, "follow": managed})
    return Sampler(adapter, store=store, disk_paths=disk_paths, managed=managed, interval_s=interval_s, **kwargs)


def make_workspace_sampler(workspace: Any, store: Any, *, managed: Callable[[], Iterable[Any]] | None = None) -> Sampler:
    """The sampler for a workspace (not started), from its ``[telemetry]`` section.

    ``source`` auto / nvml / fake and ``interval_s`` come from the config; the
    disks reported are the workspace root, its outputs directory and any
    extra ``volumes``.  ``auto`` uses the fake GPUs only in a demo workspace
    on a machine without a usable NVIDIA driver.
    """
    tcfg = getattr(workspace.config, "telemetry", None)
    source = getattr(tcfg, "source", "auto")
    interval = float(getattr(tcfg, "interval_s", 1.0))
    paths: list[str] = []
    for p in [workspace.root, getattr(workspace, "outputs_dir", None), *(getattr(tcfg, "volumes", None) or [])]:
        if p is None:
            continue
        s = str(Path(p).expanduser())
        if s not in paths:
            paths.append(s)
    sampler = make_sampler(
        gpu_source=source,
        demo=bool(getattr(workspace, "is_demo", False)),
        store=store,
        disk_paths=paths,
        managed=managed,
        interval_s=interval,
    )
    pcfg = getattr(tcfg, "prometheus", None)
    if pcfg is not None:
        attach_prometheus(sampler, pcfg, root=Path(workspace.root), config_path=workspace.config_path,
                          managed=managed, source=source)
    return sampler
