"""Job energy from NVML's total energy counter, against the fake NVML's counter: the fake's counter is its
own power integrated; the adapter reads it (NotSupported remembered); the sampler keeps it in memory and in
the store; the cost takes a job's energy as the counter's rise (a driver reload, a gap, an unsupported GPU,
a GPU shared with another job), falling back to the power readings and naming the method."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from backend.flows import cost
from backend.telemetry import energy
from backend.telemetry.fake import FakeNvml
from backend.telemetry.nvml import NvmlAdapter
from backend.telemetry.sampler import Sampler
from state.store import Store
from state.telemetry import Bucket

T0 = 1_700_000_000.0
BUSY_W = 78 + 50 * 5.9  # the fake's power at 50 % utilisation
IDLE_W = 78 + 10 * 5.9


class Clock:
    def __init__(self, t: float = T0):
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "state.db")
    yield s
    s.close()


def rig(store=None, gpus=2, **kw):
    clock = Clock()
    fake = FakeNvml(gpus=gpus, clock=clock)
    for g in range(gpus):
        fake.set_util(g, 50)
    adapter = NvmlAdapter(fake, source="fake", clock=clock)
    return clock, fake, Sampler(adapter, store=store, clock=clock, energy_interval_s=5.0, **kw)


def run(clock, s, seconds, *, every=5, on_second=None):
    """``seconds`` of 1 s passes, the energy counter read every ``every`` passes."""
    for k in range(int(seconds)):
        clock.t += 1
        if on_second is not None:
            on_second(k)
        s.sample_once()
        if k % every == 0:
            s.read_energy_once()


def test_the_fakes_counter_is_its_power_integrated_and_a_reload_sets_it_back():
    clock = Clock()
    fake = FakeNvml(gpus=1, clock=clock)
    fake.nvmlInit()
    h = fake.nvmlDeviceGetHandleByIndex(0)
    fake.set_util(0, 50)
    c0 = fake.nvmlDeviceGetTotalEnergyConsumption(h)
    assert c0 == pytest.approx(3 * 86400 * 250.0 * 1000, rel=1e-9)  # three days since "driver load" at 250 W
    clock.t += 100
    assert fake.nvmlDeviceGetPowerUsage(h) == int(BUSY_W * 1000)
    c1 = fake.nvmlDeviceGetTotalEnergyConsumption(h)
    assert (c1 - c0) / 1000 == pytest.approx(BUSY_W * 100, abs=1)
    fake.set_util(0, 10)  # a change of load counts from now on
    clock.t += 50
    c2 = fake.nvmlDeviceGetTotalEnergyConsumption(h)
    assert (c2 - c1) / 1000 == pytest.approx(IDLE_W * 50, abs=1)
    fake.reload_driver(0)
    clock.t += 10
    assert fake.nvmlDeviceGetTotalEnergyConsumption(h) / 1000 == pytest.approx(IDLE_W * 10, abs=1)


def test_the_adapter_reads_every_gpus_counter_and_remembers_one_that_is_not_supported():
    clock = Clock()
    fake = FakeNvml(gpus=3, clock=clock)
    fake.fail("energy", gpu=1)
    a = NvmlAdapter(fake, source="fake", clock=clock)
    got = a.read_energy()
    assert got[0][0] > 0 and got[0][1] is None and got[2][0] > got[0][0]  # GPU 2 ran at a higher mean
    assert got[1] == (None, "not supported on this GPU")
    calls = fake.calls["nvmlDeviceGetTotalEnergyConsumption"]
    assert a.read_energy()[1] == (None, "not supported on this GPU")
    assert fake.calls["nvmlDeviceGetTotalEnergyConsumption"] == calls + 2  # GPU 1 not asked again
    # the slow fields show the counter's last reading without asking again
    slow = a.read_slow(pcie=False)
    assert fake.calls["nvmlDeviceGetTotalEnergyConsumption"] == calls + 2
    assert slow[0].energy_j == pytest.approx(a.read_energy()[0][0] / 1000, rel=1e-6)


def test_a_jobs_energy_is_the_counters_rise_over_its_time():
    clock, fake, s = rig()
    run(clock, s, 120)
    start, end = T0 + 12.5, T0 + 102.5  # edges between two counter readings
    e = cost.measure_energy(cost.telemetry_power(s), [0, 1], start, end)
    assert e.method == "energy counter"
    assert e.kwh * 3.6e6 == pytest.approx(2 * BUSY_W * 90, rel=1e-3)
    assert e.how.startswith("NVML energy counter (100 % of its GPU-time covered; whole-GPU energy)")
    # the snapshot carries the last reading (at second 116 of 120)
    now = fake.nvmlDeviceGetTotalEnergyConsumption(fake.nvmlDeviceGetHandleByIndex(0))
    assert s.energy.t == T0 + 116 and (now - s.latest().energy_mj[0]) / 1000 == pytest.approx(BUSY_W * 4, abs=1)


def test_the_power_readings_place_a_jobs_edge_inside_a_counter_step():
    clock, fake, s = rig(gpus=1)
    fake.set_util(0, 10)
    # idle until second 52.5 of the run, busy after: a job that starts with its load mid-step
    run(clock, s, 120, every=10, on_second=lambda k: fake.set_util(0, 50) if k == 52 else None)
    start, end = T0 + 53.0, T0 + 113.0
    truth = BUSY_W * 60
    shaped = cost.measure_energy(cost.telemetry_power(s), [0], start, end).kwh * 3.6e6
    plain = energy.rise(s.energy_trace(0, start, end), start, end).joules  # by time alone
    assert abs(shaped - truth) < abs(plain - truth)
    assert shaped == pytest.approx(truth, rel=0.02)


def test_a_driver_reload_leaves_its_step_out_and_says_so():
    clock, fake, s = rig(gpus=1)
    run(clock, s, 200, on_second=lambda k: fake.reload_driver(0) if k == 100 else None)
    trace = s.energy_trace(0, T0, T0 + 200)
    assert trace.resets == 1 and all(st.c1 >= st.c0 for st in trace.steps if st.ok)
    e = cost.measure_energy(cost.telemetry_power(s), [0], T0 + 10, T0 + 190)
    assert e.method == "energy counter"  # one 5 s step of 180 s left out: 97 % covered, filled at the mean
    assert e.kwh * 3.6e6 == pytest.approx(BUSY_W * 180, rel=1e-3)
    assert "97 % of its GPU-time covered" in e.how and "counter went down 1×" in e.how


def test_an_unsupported_counter_falls_back_to_the_power_readings_with_why():
    clock, fake, s = rig()
    fake.fail("energy", gpu=1)
    run(clock, s, 100)
    e = cost.measure_energy(cost.telemetry_power(s), [0, 1], T0 + 10, T0 + 90)
    assert e.method == "energy counter + power samples"
    assert e.kwh * 3.6e6 == pytest.approx(2 * BUSY_W * 80, rel=2e-3)
    assert "NVML energy counter on GPU 0, power readings on GPU 1" in e.how
    assert "energy counter of GPU 1: not supported on this GPU" in e.how
    only_power = cost.measure_energy(cost.telemetry_power(s), [1], T0 + 10, T0 + 90)
    assert only_power.method == "power samples" and only_power.how.startswith("GPU power readings")


def test_a_gap_in_the_readings_is_not_counted_and_too_large_a_gap_falls_back_then_leaves_energy_unknown():
    clock, fake, s = rig(gpus=1)
    run(clock, s, 60)
    clock.t += 300  # the dashboard was down: neither counter nor power readings
    run(clock, s, 60)
    trace = s.energy_trace(0, T0, clock.t)
    assert any(not st.ok for st in trace.steps)  # the step over the gap
    r = energy.rise(trace, T0 + 10, T0 + 410)
    assert r.covered_s < 130 and r.joules / 1000 < BUSY_W * 130 / 1000 + 1  # the gap's energy is not counted
    e = cost.measure_energy(cost.telemetry_power(s), [0], T0 + 10, T0 + 410)
    assert e.kwh is None and "power readings cover only" in e.how and "energy counter of GPU 0" in e.how


def test_stored_buckets_give_the_counter_back_to_the_command_line_and_a_reset_spoils_its_buckets(store):
    clock, fake, s = rig(store=store, gpus=1, ring_s=60)
    run(clock, s, 600, on_second=lambda k: fake.reload_driver(0) if k == 300 else None)
    s.stop()
    readings = cost.stored_power(store)
    # minutes start 20 s into the run (T0 is 20 s past a minute): before the reload's minute and its neighbours
    e1 = cost.measure_energy(readings, [0], T0 + 40, T0 + 220)
    assert e1.method == "energy counter" and e1.kwh * 3.6e6 == pytest.approx(BUSY_W * 180, rel=0.01)
    assert "went down" not in e1.how
    trace = readings.energy(0, T0 + 60, T0 + 540)
    assert trace.resets >= 1
    bad = [st for st in trace.steps if not st.ok and st.t1 > st.t0]
    assert bad and all(st.t0 >= T0 + 220 and st.t1 <= T0 + 400 for st in bad)  # the reload's minute and its neighbours
    e2 = cost.measure_energy(readings, [0], T0 + 60, T0 + 540)  # three minutes of eight spoiled: power readings
    assert e2.method == "power samples" and e2.kwh * 3.6e6 == pytest.approx(BUSY_W * 480, rel=0.01)


def test_a_bucket_whose_rise_is_faster_than_any_gpu_is_a_reset_inside_it():
    rows = [Bucket("gpu", 0, energy.FIELD, T0 + 60 * k, 60.0, 60, v0, v0, v1)
            for k, (v0, v1) in enumerate([(1e6, 2e6), (2.1e6, 9e12), (9e12 + 1e5, 9e12 + 2e5)])]
    trace = energy.from_buckets(rows, max_gap_s=65)
    assert [st.ok for st in trace.steps if st.t1 > st.t0] == [True, False, True]


def test_a_shared_gpu_says_its_figure_is_the_whole_gpus_and_names_the_other_jobs():
    clock, fake, s = rig()
    run(clock, s, 100)
    attr = SimpleNamespace(jobs=(), jobs_on=lambda g: {0: ("train-a", "bench-b"), 1: ("train-a",)}[g])
    # a running job (no end yet): who the attribution sees on its GPUs now shares them
    c = cost.span_cost(T0 + 10, None, (0, 1), gpus_from="CUDA_VISIBLE_DEVICES", power=cost.telemetry_power(s),
                       what="train-a", attribution=attr, now=T0 + 90)
    assert c.shared_with == ("bench-b",) and c.energy_method == "energy counter"
    assert "not split with the other jobs seen on its GPUs (bench-b)" in c.energy_why
    assert c.to_dict()["energy_method"] == "energy counter" and c.to_dict()["shared_with"] == ["bench-b"]
    alone = cost.span_cost(T0 + 10, None, (1,), gpus_from="x", power=cost.telemetry_power(s), what="train-a",
                           attribution=attr, now=T0 + 90)
    assert alone.shared_with == () and "not split" not in alone.energy_why
    # a finished job: today's holders of its GPUs say nothing of who shared them then, so none is named
    done = cost.span_cost(T0 + 10, T0 + 90, (0, 1), gpus_from="CUDA_VISIBLE_DEVICES", power=cost.telemetry_power(s),
                          what="train-a", attribution=attr)
    assert done.shared_with == () and done.energy_method == "energy counter" and "not split" not in done.energy_why


def test_the_running_sampler_reads_the_counter_on_its_own_cadence_and_the_slow_fields_on_theirs():
    fake = FakeNvml(gpus=2)
    s = Sampler(NvmlAdapter(fake, source="fake"), interval_s=0.05, energy_interval_s=0.1, slow_interval_s=30.0,
                pcie_interval_s=None)
    with s:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(s.energy_trace(0, 0, time.time() + 1).steps) < 3:
            s._sampled.wait(0.2)  # woken by each core pass
    assert len(s.energy_trace(0, 0, time.time() + 1).steps) >= 3
    assert fake.calls["nvmlDeviceGetTotalEccErrors"] == 2 * 2  # one slow pass (two ECC calls a GPU) in 30 s
    latest = s.latest()
    assert latest is not None and latest.energy_mj[0] is not None and latest.energy_mj[1] is not None


def test_a_slow_core_cadence_still_uses_the_counter():
    """At ``[telemetry] interval_s = 8`` a reading waits for the gap after a core pass and a slow-field pass for
    another one: readings come 16 s apart.  Those steps still count (they were refused as gaps before)."""
    clock, fake, s = rig(gpus=1, interval_s=8.0)
    fake.set_util(0, 50)
    for k in range(12):  # a reading every 16 s, as the running sampler gives them at this cadence
        clock.t += 16
        s.energy.record(clock.t, {0: (1_000_000 + 16_000 * 400 * k, None)})  # 400 W
    trace = s.energy_trace(0, T0 + 16, clock.t)
    assert trace.steps and all(st.ok for st in trace.steps if st.t1 > st.t0)
    e = cost.measure_energy(cost.telemetry_power(s), [0], T0 + 16, T0 + 16 * 12)
    assert e.method == "energy counter"
    assert e.kwh == pytest.approx(400 * 16 * 11 / 3.6e6, rel=1e-6)
