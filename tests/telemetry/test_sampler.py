"""Sampler: ring buffer, downsampled history in a tmp store, threads, cost figures."""

from __future__ import annotations

import os
import threading
import time

import pytest

from backend.telemetry.fake import FakeNvml
from backend.telemetry.model import GpuFrame, GpuSample, NvmlState, NvmlStatus
from backend.telemetry.nvml import NvmlAdapter
from backend.telemetry.sampler import Sampler
from state.store import Store
from state.telemetry import Bucket, TelemetryStore

GIB = 1024**3


class Clock:
    def __init__(self, t: float = 1_700_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "state.db")
    yield s
    s.close()


def make(clock, store=None, **kw):
    fake = FakeNvml(clock=clock, processes={0: [(os.getpid(), 10 * GIB)]})
    adapter = NvmlAdapter(fake, source="fake", clock=clock)
    return fake, Sampler(adapter, store=store, clock=clock, **kw)


def test_ring_keeps_only_the_last_window_at_full_rate(tmp_path):
    clock = Clock()
    fake, s = make(clock, ring_s=10, disk_paths=[tmp_path])
    t_first = clock.t
    for _ in range(25):
        s.sample_once()
        clock.t += 1
    series = s.history(0, "util_gpu", since=t_first - 100)
    assert len(series.t) == 11  # capacity = ring_s / interval + 1
    assert series.t[0] == t_first + 14 and series.t[-1] == t_first + 24
    assert list(series.t) == sorted(series.t)
    assert all(v is not None for v in series.value)
    assert s.recent(0, "util_gpu", 3) == list(series.value[-3:])
    host = s.history(None, "mem_percent", since=t_first)
    assert len(host.t) == 11 and host.value[-1] is not None


def test_na_readings_stay_gaps_in_history():
    clock = Clock()
    fake, s = make(clock)
    s.sample_once()
    clock.t += 1
    fake.fail("power", gpu=0)
    s.sample_once()
    clock.t += 1
    series = s.history(0, "power_w", since=0)
    assert series.value[0] is not None and series.value[1] is None


def test_downsampled_buckets_go_to_the_store_and_are_read_back(store):
    T0 = 1_699_999_980.0  # a multiple of 60
    clock = Clock(T0)
    fake, s = make(clock, store=store, ring_s=30, bucket_s=60)
    fake.set_util(1, 10.0)
    for k in range(150):  # 2.5 minutes at 1 Hz
        if k == 70:
            fake.set_util(1, 90.0)
        s.sample_once()
        clock.t += 1
    ts = TelemetryStore(store)
    rows = ts.read("gpu", 1, "util_gpu", since=0)
    assert [r.t0 for r in rows] == [T0, T0 + 60]  # third bucket still open
    first, second = rows
    assert (first.n, first.vmin, first.vmax, first.vmean) == (60, 10.0, 10.0, 10.0)
    assert (second.n, second.vmin, second.vmax) == (60, 10.0, 90.0)
    assert second.vmean == pytest.approx((10 * 10 + 50 * 90) / 60)
    assert ts.read("host", -1, "mem_percent", since=0)[0].n == 60
    # two hours back reaches past the 30 s ring: buckets that end before the ring, then full rate
    series = s.history(1, "util_gpu", since=clock.t - 7200)
    assert series.resolution_s == 60
    oldest = T0 + 150 - 31  # the ring holds the last 31 readings
    assert series.t[0] == T0 + 30 and (series.vmin[0], series.vmax[0]) == (10.0, 10.0)
    assert series.t[1:] == tuple(oldest + k for k in range(31))
    assert series.value[1:] == (90.0,) * 31
    # inside the ring only full-rate readings
    recent = s.history(1, "util_gpu", since=clock.t - 10)
    assert recent.resolution_s == 1.0 and len(recent.t) == 10
    s.stop()  # flushes the open bucket
    assert len(ts.read("gpu", 1, "util_gpu", since=0)) == 3


def test_pruning_drops_buckets_older_than_retention(store):
    ts = TelemetryStore(store)
    now = 1_700_000_000.0
    ts.write([Bucket("gpu", 0, "util_gpu", now - 10 * 86400, 60, 5, 1, 2, 3), Bucket("gpu", 0, "util_gpu", now - 60, 60, 5, 1, 2, 3)])
    clock = Clock(now)
    fake, s = make(clock, store=store, retention_s=7 * 86400)
    s.sample_once()
    assert [b.t0 for b in ts.read("gpu", 0, "util_gpu", since=0)] == [now - 60]


def test_snapshot_has_attribution_alerts_and_cost():
    clock = Clock()
    fake, s = make(clock, managed=lambda: [("main", "server", os.getpid(), "RUNNING")], idle_samples=3)
    fake.set_util(0, 1.0)
    for _ in range(3):
        snap = s.sample_once()
        clock.t += 1
    assert snap.state.status is NvmlStatus.OK and len(snap.gpus) == 8
    assert snap.attribution.jobs[0].summary == "server main holds GPU 0, 10.0 GiB"
    assert [a.kind for a in snap.alerts] == ["idle"]
    assert snap.cost.samples == 3 and snap.cost.last_ms > 0 and snap.cost.nvml_per_gpu_us > 0
    assert s.latest() is snap


def test_a_failing_managed_provider_does_not_stop_sampling():
    clock = Clock()

    def broken():
        raise RuntimeError("supervisor not ready")

    fake, s = make(clock, managed=broken)
    snap = s.sample_once()
    assert len(snap.gpus) == 8
    assert any("managed process list failed" in e for e in snap.errors)


def test_no_driver_still_samples_the_host(tmp_path):
    s = Sampler(NvmlAdapter(FakeNvml(init_error="no_library")), disk_paths=[tmp_path])
    snap = s.sample_once()
    assert snap.state.status is NvmlStatus.NO_LIBRARY and snap.gpus == ()
    assert snap.host.mem_total > 0 and snap.host.disks[0].total > 0
    assert "first reading" in snap.host.na["cpu_percent"]
    snap = s.sample_once()
    assert snap.host.cpu_percent is not None


def test_background_threads_start_stop_and_join(tmp_path, store):
    fake = FakeNvml()
    s = Sampler(NvmlAdapter(fake), store=store, interval_s=0.05, slow_interval_s=0.05, pcie_interval_s=None)
    s.start()
    deadline = time.monotonic() + 10
    while (s.latest() is None or s.latest().cost.samples < 5) and time.monotonic() < deadline:
        time.sleep(0.02)
    s.request_slow(pcie=True)
    deadline = time.monotonic() + 10
    while fake.calls["nvmlDeviceGetPcieThroughput"] == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    s.stop()
    assert not s.running
    assert not [t for t in threading.enumerate() if t.name.startswith("telemetry-")]
    snap = s.latest()
    assert snap.cost.samples >= 5 and snap.cost.cpu_share is not None
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 16  # once, on request
    n = snap.cost.samples
    time.sleep(0.2)
    assert s.latest().cost.samples == n  # really stopped


class BlockingAdapter(NvmlAdapter):
    """The fake NVML whose core pass, once armed, blocks until released."""

    def __init__(self):
        super().__init__(FakeNvml(), source="fake")
        self.armed = False
        self.entered = threading.Event()
        self.release = threading.Event()

    def sample(self):
        if self.armed:
            self.entered.set()
            self.release.wait()
        return super().sample()


def test_readers_and_requests_return_while_an_nvml_pass_is_blocked():
    adapter = BlockingAdapter()
    s = Sampler(adapter, interval_s=0.01, pcie_interval_s=None)
    s.sample_once()
    adapter.armed = True
    s.start()
    done = threading.Event()

    def read():
        for _ in range(100):
            assert s.latest() is not None
            s.history(0, "util_gpu", since=0)
            s.recent(0, "util_gpu", 5)
            s.cost()
        s.request_slow(pcie=True)
        done.set()

    try:
        assert adapter.entered.wait(30)  # the sampler thread is inside a pass, held there
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        finished = done.wait(30)  # safety net only: the readers must not need the pass to end
        held = not adapter.release.is_set()
    finally:
        adapter.release.set()
        s.stop()
    assert finished and held
    assert s.pcie_requested_at is not None or adapter._lib.calls["nvmlDeviceGetPcieThroughput"] == 16


def test_pcie_is_read_on_request_by_the_slow_pass_and_stays_pending_until_then():
    clock = Clock()
    fake, s = make(clock, pcie_interval_s=None)
    s.sample_once()
    s.read_slow_once()
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 0  # no interval, no request: not read
    assert s.latest().gpus[1].slow is None  # the snapshot before the slow pass
    s.sample_once()
    assert s.latest().gpus[1].slow.pcie_t is None
    assert s.pcie_requested_at is None
    s.request_slow(pcie=True)
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 0  # the caller never reads NVML
    assert s.pcie_requested_at == clock.t
    clock.t += 5
    s.request_slow(pcie=True)  # asking again keeps the first request time
    assert s.pcie_requested_at == clock.t - 5
    s.read_slow_once()
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 16
    assert s.pcie_requested_at is None
    g = s.sample_once().gpus[1]
    assert g.slow.pcie_t == clock.t and g.slow.pcie_tx_bps == 1500 * 1024.0
    s.read_slow_once()
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 16  # answered once, not again


def test_history_across_a_dashboard_restart_keeps_the_gap(store):
    now = 1_699_999_980.0
    TelemetryStore(store).write([Bucket("gpu", 0, "util_gpu", now - 3600 + 60 * k, 60, 60, 1, 5, 9) for k in range(3)])
    clock = Clock(now)
    fake, s = make(clock, store=store)
    for _ in range(3):
        s.sample_once()
        clock.t += 1
    series = s.history(0, "util_gpu", since=now - 7200)
    assert series.value[:3] == (5, 5, 5) and series.vmax[0] == 9
    assert series.value[3] is None  # the hour the dashboard was down stays a gap
    assert series.t[4:] == (now, now + 1, now + 2)


class FixedPasses:
    """An adapter whose GPU passes take the given times (µs per GPU), in order."""

    def __init__(self, per_gpu_us, gpus: int = 4):
        self.times = list(per_gpu_us)
        self.gpus = gpus

    def state(self):
        return NvmlState(NvmlStatus.OK, "fixed passes", source="fake")

    def gpu_count(self):
        return self.gpus

    def sample(self):
        us = self.times.pop(0)
        gpus = tuple(GpuSample(index=i, t=0.0, uuid=None, name=None, bus_id=None) for i in range(self.gpus))
        return GpuFrame(0.0, self.state(), gpus, us * self.gpus / 1e6)


def test_pass_cost_figures_are_the_median_p90_and_mean_of_the_window():
    passes = [120, 95, 310, 101, 99, 150, 97]  # µs per GPU; sorted: 95 97 99 101 120 150 310
    s = Sampler(FixedPasses(passes), clock=Clock())
    for _ in passes:
        s.sample_once()
    assert s.pass_costs() == pytest.approx(passes)
    cost = s.cost()
    assert cost.nvml_per_gpu_us == pytest.approx(101)  # the middle one of seven
    assert cost.nvml_per_gpu_us_p90 == pytest.approx(150)  # the sixth of seven (rank 0.9 * 6 = 5.4, rounded down)
    assert cost.nvml_per_gpu_us_mean == pytest.approx(972 / 7)
    assert cost.samples == 7


def test_pass_cost_window_is_the_last_300_passes():
    passes = [1000.0] * 10 + [50.0] * 300  # the ten slow first passes fall out of the window
    s = Sampler(FixedPasses(passes, gpus=1), clock=Clock())
    for _ in passes:
        s.sample_once()
    cost = s.cost()
    assert len(s.pass_costs()) == 300
    assert cost.nvml_per_gpu_us == pytest.approx(50) and cost.nvml_per_gpu_us_p90 == pytest.approx(50)
    assert cost.samples == 310


def test_a_process_that_left_the_managed_list_stays_its_jobs_while_the_gpus_list_it():
    """A relaunched server's old pid: the GPUs list it while it lets go of its memory, the supervisor no
    longer does.  That memory is the server's (a preflight that counts it free must see it so) until the GPUs
    no longer list it, or for at most gone_keep_s; then a process still there is nobody's."""
    from backend.telemetry.attribution import probe_free_memory

    clock = Clock()
    old, new = os.getppid(), os.getpid()  # the old is not in the new one's process tree
    views = [[("sim", "server", old, "RUNNING")], [("sim", "server", None, "STARTING")],
             [("sim", "server", new, "STARTING")], [("sim", "server", new, "RUNNING")]]
    fake, s = make(clock, managed=lambda: views[0])
    fake.set_processes(0, [(old, 10 * GIB)])
    s.sample_once()  # the join that saw the old pid managed
    views.pop(0)
    clock.t += 1
    free = probe_free_memory(s, exclude="sim")  # the GPUs still list it; the supervisor no longer does
    assert free[0][2] == free[1][2]  # as free as a GPU nothing runs on
    holders = [(h.pid, h.job) for h in s.latest().attribution.holders]
    assert holders == [(old, "sim")]
    views.pop(0)
    fake.set_processes(0, [(old, 10 * GIB), (new, 10 * GIB)])
    for _ in range(3):  # the new process is up, the old one still lets go: both the server's
        clock.t += 1
        s.adapter.want_processes()
        snap = s.sample_once()
        assert [(h.pid, h.job) for h in snap.attribution.holders] == [(old, "sim"), (new, "sim")]
        assert [(j.name, sorted(j.pids)) for j in snap.attribution.jobs] == [("sim", sorted([old, new]))]
    s.gone_keep_s = 0.0  # past the limit: a process still on the GPU is shown as it is, nobody's
    s.adapter.want_processes()
    snap = s.sample_once()
    assert [(h.pid, h.job) for h in snap.attribution.holders] == [(old, None), (new, "sim")]
    s.gone_keep_s = 120.0
    views.pop(0)
    fake.set_processes(0, [(new, 10 * GIB)])
    clock.t += 1
    s.adapter.want_processes()
    snap = s.sample_once()
    assert [(j.name, j.state, j.pids) for j in snap.attribution.jobs] == [("sim", "RUNNING", (new,))]
    fake.set_processes(0, [(old, 10 * GIB), (new, 10 * GIB)])  # the old pid again, once forgotten: nobody's
    s.adapter.want_processes()
    snap = s.sample_once()
    assert [(h.pid, h.job) for h in snap.attribution.holders] == [(old, None), (new, "sim")]


def test_a_job_with_an_old_and_a_new_pid_on_the_gpus_is_one_job_with_both():
    clock = Clock()
    old, new = os.getppid(), os.getpid()  # the old is not in the new one's process tree
    views = [[("sim", "server", old, "RUNNING")], [("sim", "server", new, "STARTING")]]
    fake, s = make(clock, managed=lambda: views[0])
    fake.set_processes(0, [(old, 10 * GIB)])
    s.sample_once()
    views.pop(0)
    fake.set_processes(0, [(old, 10 * GIB), (new, 2 * GIB)])
    clock.t += 1
    s.adapter.want_processes()
    snap = s.sample_once()
    (job,) = snap.attribution.jobs
    assert (job.name, job.state, job.pids, job.mem_by_gpu) == ("sim", "STARTING", (new, old) if new < old else (old, new),
                                                              ((0, 12 * GIB),))


def test_a_managed_list_that_fails_again_and_again_keeps_the_last_one_read():
    clock = Clock()
    calls = []

    def managed():
        calls.append(1)
        if len(calls) > 1:
            raise RuntimeError("supervisor busy")
        return [("sim", "server", os.getpid(), "RUNNING")]

    fake, s = make(clock, managed=managed)
    for _ in range(4):  # one good read, then three failures in a row
        s.adapter.want_processes()
        snap = s.sample_once()
        clock.t += 1
        assert [(j.name, j.pids) for j in snap.attribution.jobs] == [("sim", (os.getpid(),))]
    assert len(calls) == 4 and any("managed process list failed" in e for e in snap.errors)
