"""Job cost (backend.flows.cost): GPU-hours from a job's time and GPUs, energy from the telemetry's power
readings, and N/A with the reason (never 0) wherever either is not known."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from backend.flows import cost
from backend.telemetry.model import Series
from specdeck_types.bench import BenchConfig, BenchResult


def _power(watts_by_gpu: dict[int, float], *, every: float = 1.0, gaps: tuple[tuple[float, float], ...] = ()):
    """A PowerReader with a reading every ``every`` s at a constant draw per GPU, none inside ``gaps``."""
    calls = []

    def read(gpu: int, since: float, until: float) -> Series:
        calls.append((gpu, since, until))
        ts, vs = [], []
        t = since
        while t <= until:
            if not any(a <= t < b for a, b in gaps):
                ts.append(t)
                vs.append(watts_by_gpu[gpu])
            t += every
        return Series("power_w", gpu, tuple(ts), tuple(vs), tuple(vs), tuple(vs), every)

    read.calls = calls
    return read


def _view(name="train-a", env=None, started=1000.0, ended=4600.0, live=False):
    spec = SimpleNamespace(env=env or {})  # what the cost reads of a ProcessSpec
    return SimpleNamespace(name=name, spec=spec, started_at=started, ended_at=ended, live=live,
                           state_since=ended or started)


def test_visible_devices_reads_indices_and_says_why_not():
    assert cost.visible_devices({"CUDA_VISIBLE_DEVICES": "3,1"}) == ((1, 3), "")
    gpus, why = cost.visible_devices({})
    assert gpus is None and "no CUDA_VISIBLE_DEVICES" in why
    gpus, why = cost.visible_devices({"CUDA_VISIBLE_DEVICES": ""})
    assert gpus is None and "no GPU" in why
    gpus, why = cost.visible_devices({"CUDA_VISIBLE_DEVICES": "GPU-1234"})
    assert gpus is None and "GPU-1234" in why


def test_a_finished_training_run_costs_gpus_times_hours_and_its_energy():
    view = _view(env={"CUDA_VISIBLE_DEVICES": "0,1"})  # one hour on two GPUs
    power = _power({0: 300.0, 1: 500.0})
    c = cost.process_cost(view, power=power)
    assert c.gpus == (0, 1) and c.gpus_from == "CUDA_VISIBLE_DEVICES"
    assert c.gpu_hours == pytest.approx(2.0)
    assert c.energy_kwh == pytest.approx(0.8, rel=0.01)  # (300 + 500) W for one hour
    assert not c.running
    assert {g for g, *_ in power.calls} == {0, 1}


def test_a_running_job_counts_up_to_now():
    view = _view(env={"CUDA_VISIBLE_DEVICES": "2"}, started=0.0, ended=None, live=True)
    c = cost.process_cost(view, power=_power({2: 100.0}), now=1800.0)
    assert c.running and c.gpu_hours == pytest.approx(0.5)
    assert c.energy_kwh == pytest.approx(0.05, rel=0.01)


def test_gpus_from_the_telemetry_attribution_when_the_spec_names_none():
    view = _view(name="sglang-w", env={})
    attribution = SimpleNamespace(jobs=(SimpleNamespace(name="other", gpus=(5,)),
                                        SimpleNamespace(name="sglang-w", gpus=(6, 4))))
    c = cost.process_cost(view, attribution=attribution, power=None)
    assert c.gpus == (4, 6) and "telemetry" in c.gpus_from
    assert c.gpu_hours == pytest.approx(2.0)
    assert c.energy_kwh is None and c.energy_why == "no GPU telemetry"


def test_no_gpu_known_is_na_with_why_never_zero():
    c = cost.process_cost(_view(env={}), attribution=SimpleNamespace(jobs=()), power=_power({0: 1.0}))
    assert c.gpu_hours is None and c.energy_kwh is None
    assert "no GPU known" in c.gpu_hours_why and "CUDA_VISIBLE_DEVICES" in c.gpu_hours_why
    assert c.short == "GPUs not known"  # the few words beside the N/A
    c = cost.process_cost(_view(started=None, ended=None))
    assert c.gpu_hours is None and c.gpu_hours_why == "not started yet" and c.short == "not started"
    never = cost.process_cost(None)
    assert never.short == "not started" and "not started from this workspace" in never.gpu_hours_why


def test_energy_is_unknown_when_the_readings_cover_too_little_of_the_run():
    view = _view(env={"CUDA_VISIBLE_DEVICES": "0"})  # 1000 .. 4600
    c = cost.process_cost(view, power=_power({0: 300.0}, gaps=((1000.0, 2800.0),)))
    assert c.gpu_hours == pytest.approx(1.0)  # the GPU-hours stand
    assert c.energy_kwh is None and "cover only 50 %" in c.energy_why
    # a short gap is filled at the covered part's mean power
    c = cost.process_cost(view, power=_power({0: 300.0}, gaps=((2000.0, 2100.0),)))
    assert c.energy_kwh == pytest.approx(0.3, rel=0.01)


def test_bucketed_history_counts_each_bucket_for_its_width():
    # the store's 60 s buckets (their middle as the time), as the sampler's history gives them
    def read(gpu, since, until):
        ts = tuple(since + 30.0 + 60.0 * i for i in range(60))
        vs = tuple(200.0 for _ in ts)
        return Series("power_w", gpu, ts, vs, vs, vs, 60.0)

    kwh, how = cost.energy_kwh(read, [0], 0.0, 3600.0)
    assert kwh == pytest.approx(0.2, rel=0.001) and "100 %" in how


class _Fleet:
    def __init__(self, servers):
        self._s = servers

    def names(self):
        return list(self._s)

    def config(self, name):
        return self._s[name]


def test_a_regeneration_job_costs_its_servers_gpus():
    fleet = _Fleet({"big": SimpleNamespace(host="127.0.0.1", port=30001, gpus=[0, 1, 2, 3]),
                    "small": SimpleNamespace(host="127.0.0.1", port=30002, gpus=[7])})
    view = _view(name="regen-x", env={}, started=0.0, ended=3600.0)
    snap = {"servers": {"http://localhost:30002": {"state": "up"}, "http://127.0.0.1:30001": {"name": "big"}}}
    c = cost.regen_cost(view, snap, fleet, power=None)
    assert c.gpus == (0, 1, 2, 3, 7) and c.gpu_hours == pytest.approx(5.0)
    assert "big" in c.gpus_from and "small" in c.gpus_from
    c = cost.regen_cost(view, {"servers": {"http://10.0.0.9:8000": {}}}, fleet)
    assert c.gpu_hours is None and "no managed server" in c.gpu_hours_why and c.short == "GPUs not known"
    # a server of the workspace that sets no gpus: which GPUs it holds is not known
    fleet = _Fleet({"big": SimpleNamespace(host="127.0.0.1", port=30001, gpus=[])})
    c = cost.regen_cost(view, {"servers": {"http://127.0.0.1:30001": {}}}, fleet)
    assert c.gpu_hours is None and "server big's config sets no gpus" in c.gpu_hours_why


def test_a_run_followed_from_its_progress_log_is_na_because_it_was_not_started_here():
    fleet = _Fleet({"big": SimpleNamespace(host="127.0.0.1", port=30001, gpus=[0])})
    snap = {"servers": {"http://127.0.0.1:30001": {"name": "big"}}, "started_at": 0.0}
    c = cost.regen_cost(None, snap, fleet, power=_power({0: 1.0}), now=3600.0)
    assert c.gpu_hours is None and c.energy_kwh is None  # never 0
    assert c.short == "run not started here"
    assert "progress log" in c.gpu_hours_why and "no process record" in c.gpu_hours_why
    assert c.to_dict()["gpu_hours"] is None and c.to_dict()["gpu_hours_why"] == c.gpu_hours_why


def test_a_benchmark_costs_its_servers_gpus_over_its_run():
    fleet = _Fleet({"big": SimpleNamespace(host="127.0.0.1", port=30001, gpus=[0, 1])})
    r = BenchResult(source="run", server="big", started_at=100.0, ended_at=1900.0)
    c = cost.bench_cost(r, fleet, power=_power({0: 400.0, 1: 400.0}))
    assert c.gpu_hours == pytest.approx(1.0) and c.energy_kwh == pytest.approx(0.4, rel=0.01)
    # an imported result of another machine: its tensor parallelism, no energy
    r = BenchResult(source="import:csv", server="elsewhere", started_at=0.0, ended_at=3600.0,
                    config=BenchConfig(tp=8))
    c = cost.bench_cost(r, fleet, power=_power({0: 1.0}))
    assert c.gpu_hours == pytest.approx(8.0) and c.energy_kwh is None and c.energy_why
    c = cost.bench_cost(BenchResult(source="import:csv"), fleet)
    assert c.gpu_hours is None and "start and end" in c.gpu_hours_why and c.short == "no start or end time"
    c = cost.bench_cost(BenchResult(source="import:csv", server="elsewhere", started_at=0.0, ended_at=60.0), fleet)
    assert c.gpu_hours is None and c.short == "GPUs not known"
    assert c.gpu_hours_why == ("no GPU known: server elsewhere is not in this workspace, and the result records no "
                               "tensor parallelism")


def test_totals_skip_what_is_unknown():
    a = cost.Cost(1.5, 0.2, (0,), 10.0, False)
    b = cost.unknown("why")
    c = cost.Cost(0.5, None, (1,), 10.0, False)
    assert b.short_why == "not known" and a.short_why == ""  # an N/A always says why in a few words
    assert cost.total(iter([a, b, c])) == (2.0, 0.2, 2)
    assert cost.total([b]) == (None, None, 0)
    assert a.to_dict()["gpu_hours"] == 1.5 and b.to_dict()["energy_kwh"] is None
