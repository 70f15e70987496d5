"""The pass's direct C calls (backend/telemetry/nvml_direct.py) against a fake
with a C level under it: the same samples as through nvidia-ml-py's
wrappers, the wrappers not called in the pass, and every failure handled as
the wrappers' exceptions are."""

from __future__ import annotations

import pytest

from backend.telemetry.fake import FakeNvml
from backend.telemetry.nvml import ERR_NOT_SUPPORTED, NvmlAdapter
from tests.telemetry.clevel import CLevelFake

GIB = 1024**3
MIB = 1024**2
CORE = (
    "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetTemperature",
    "nvmlDeviceGetPowerUsage", "nvmlDeviceGetEnforcedPowerLimit", "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetComputeRunningProcesses_v3",
)


def pair(**kw):
    """The same fake state read directly and through the wrappers, on a frozen clock."""
    clock = lambda: 5000.0  # noqa: E731
    direct = CLevelFake(clock=clock, **kw)
    wrapped = FakeNvml(clock=clock, **kw)
    return (direct, NvmlAdapter(direct, source="fake", clock=clock),
            wrapped, NvmlAdapter(wrapped, source="fake", clock=clock))


def fields(frame):
    return [dict(vars(g)) for g in frame.gpus]


def test_direct_pass_gives_the_wrappers_samples_field_for_field_and_skips_the_wrappers():
    procs = {0: [(4242, 61 * GIB)], 3: [(5151, 20 * GIB), (5252, None)]}
    d, ad, w, aw = pair(processes=procs, mig={5: 2})
    for fake in (d, w):
        fake.set_throttle(2, 0x4 | 0x40)
    assert fields(ad.sample()) == fields(aw.sample())
    assert fields(ad.sample()) == fields(aw.sample())
    for name in CORE:
        assert d.c_calls[name] > 0, name
    assert sum(w.calls[n] for n in CORE) > 0 and not hasattr(w, "c_calls")


def test_second_pass_calls_no_wrapper():
    d, ad, _w, _aw = pair(processes={0: [(4242, 61 * GIB)]})
    ad.sample()
    wrapped_before = {n: d.wrapper_calls(n) for n in CORE}
    c_before = d.c_calls.copy()
    ad.want_processes()
    ad.sample()
    for n in CORE:
        assert d.wrapper_calls(n) == wrapped_before[n], n
    # 8 GPUs: one C call per GPU for each core field, two for the clocks
    assert d.c_calls["nvmlDeviceGetUtilizationRates"] - c_before["nvmlDeviceGetUtilizationRates"] == 8
    assert d.c_calls["nvmlDeviceGetClockInfo"] - c_before["nvmlDeviceGetClockInfo"] == 16
    assert d.c_calls["nvmlDeviceGetComputeRunningProcesses_v3"] - c_before["nvmlDeviceGetComputeRunningProcesses_v3"] == 8


def test_direct_values_match_the_fakes_table():
    d, ad, _w, _aw = pair(processes={0: [(4242, 61 * GIB)]})
    d.set_throttle(1, 0x4)
    d.set_util(0, 80)
    d.set_util(1, 3)
    g0, g1 = ad.sample().gpus[:2]
    assert (g0.util_gpu, g1.util_gpu) == (80.0, 3.0)  # each GPU its own, not the last one read
    assert g0.power_limit_w == 700.0 and g0.mem_clock_mhz == 2619.0
    assert g0.mem_used == 596 * MIB + 61 * GIB + 530 * MIB  # v1: used includes the driver's reserved memory
    assert [(p.pid, p.used_memory) for p in g0.processes] == [(4242, 61 * GIB)]
    assert g1.processes == () and g1.throttle == ("sw_power_cap",)


def test_process_memory_the_driver_cannot_read_is_none_and_slots_past_the_count_are_ignored():
    d, ad, _w, _aw = pair(processes={0: [(4242, None), (4343, 2 * GIB)]})
    g0 = ad.sample().gpus[0]
    assert [(p.pid, p.used_memory) for p in g0.processes] == [(4242, None), (4343, 2 * GIB)]
    assert g0.processes[0].gpu_instance_id is None  # 0xFFFFFFFF: no MIG instance


def test_more_processes_than_slots_fall_back_to_the_wrapper_and_lose_none():
    many = [(10_000 + k, (k + 1) * MIB) for k in range(70)]
    d, ad, _w, _aw = pair(processes={0: many})
    before = d.wrapper_calls("nvmlDeviceGetComputeRunningProcesses_v3")
    g0 = ad.sample().gpus[0]
    assert [(p.pid, p.used_memory) for p in g0.processes] == many
    assert d.wrapper_calls("nvmlDeviceGetComputeRunningProcesses_v3") == before + 1  # GPU 0 only


def test_a_not_supported_field_is_na_with_its_reason_and_not_asked_again():
    d, ad, _w, _aw = pair()
    d.fail("nvmlDeviceGetTemperature", gpu=1, code=ERR_NOT_SUPPORTED)
    g = ad.sample().gpus
    assert g[1].temp_c is None and "not supported" in g[1].na["temp_c"]
    assert g[0].temp_c is not None and g[1].power_w is not None
    before = d.calls["nvmlDeviceGetTemperature"]
    g = ad.sample().gpus
    assert d.calls["nvmlDeviceGetTemperature"] - before == 7  # GPU 1 remembered as unsupported
    assert g[1].temp_c is None and "not supported" in g[1].na["temp_c"]


@pytest.mark.parametrize("code", [15, 999])
def test_a_lost_gpu_read_directly_is_lost_and_comes_back(code):
    d, ad, _w, _aw = pair()
    ad.sample()
    d.lose(2, code=code)
    g = ad.sample().gpus
    assert g[2].lost and all(not x.lost for k, x in enumerate(g) if k != 2)
    d.recover(2)
    g = ad.sample().gpus
    assert not g[2].lost and g[2].util_gpu is not None


def test_a_version_mismatch_moves_to_the_next_candidate_and_reads_it_directly():
    d, ad, w, aw = pair(version_mismatch={"event_reasons"})
    for fake in (d, w):
        fake.set_throttle(0, 0x8)
    assert fields(ad.sample()) == fields(aw.sample())
    assert ad.chosen()["throttle"] == "clock throttle reasons"
    c = d.c_calls["nvmlDeviceGetCurrentClocksThrottleReasons"]
    g0 = ad.sample().gpus[0]
    assert g0.throttle == ("hw_slowdown",)
    assert d.c_calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == c + 8


def test_memory_v2_is_read_directly_with_its_struct_version():
    d, ad, w, aw = pair(processes={0: [(4242, 61 * GIB)]})
    ad = NvmlAdapter(d, source="fake", clock=lambda: 5000.0, memory_v2=True)
    aw = NvmlAdapter(w, source="fake", clock=lambda: 5000.0, memory_v2=True)
    assert fields(ad.sample()) == fields(aw.sample())
    g0 = ad.sample().gpus[0]
    assert g0.mem_used == 596 * MIB + 61 * GIB  # v2: without the reserved memory
    assert d.pointer_lookups["nvmlDeviceGetMemoryInfo_v2"] >= 1
    assert d.c_calls["nvmlDeviceGetMemoryInfo"] >= 8


def test_a_function_the_driver_cannot_point_to_keeps_its_wrapper():
    d = CLevelFake(clock=lambda: 5000.0, no_pointer=("nvmlDeviceGetTemperature",))
    a = NvmlAdapter(d, source="fake", clock=lambda: 5000.0)
    a.sample()
    before_w, before_c = d.wrapper_calls("nvmlDeviceGetTemperature"), d.c_calls["nvmlDeviceGetUtilizationRates"]
    g = a.sample().gpus
    assert all(x.temp_c is not None for x in g)
    assert d.wrapper_calls("nvmlDeviceGetTemperature") == before_w + 8
    assert d.c_calls["nvmlDeviceGetUtilizationRates"] == before_c + 8


def test_direct_calls_can_be_turned_off():
    d = CLevelFake(clock=lambda: 5000.0)
    a = NvmlAdapter(d, source="fake", clock=lambda: 5000.0, direct_calls=False)
    a.sample()
    a.sample()
    assert sum(d.pointer_lookups.values()) == 0 and sum(d.c_calls.values()) == 0


def test_a_failed_process_read_after_the_direct_scalars_is_na_and_asked_once():
    d, ad, _w, _aw = pair(processes={0: [(4242, GIB)], 1: [(4343, 2 * GIB)]})
    d.fail("nvmlDeviceGetComputeRunningProcesses_v3", gpu=0, code=10)  # NVML timed out
    before = d.calls["nvmlDeviceGetComputeRunningProcesses_v3"]
    g0, g1 = ad.sample().gpus[:2]
    assert d.calls["nvmlDeviceGetComputeRunningProcesses_v3"] - before == 8  # once per GPU, the failed one too
    assert g0.processes is None and g0.na["processes"] == "NVML timed out"
    assert g0.util_gpu is not None and g0.na.keys() == {"processes"}
    assert [(p.pid, p.used_memory) for p in g1.processes] == [(4343, 2 * GIB)]


def test_a_transient_scalar_failure_is_asked_once_per_pass_and_the_rest_is_read():
    d, ad, _w, _aw = pair(gpus=2)
    d.fail("nvmlDeviceGetTemperature", gpu=0, code=10)
    for n in (1, 2, 3):
        before = d.calls["nvmlDeviceGetTemperature"]
        g0, g1 = ad.sample().gpus
        assert d.calls["nvmlDeviceGetTemperature"] - before == 2  # not asked again within the pass
        assert g0.temp_c is None and g0.na == {"temp_c": "NVML timed out"}
        assert g0.power_w is not None and g1.temp_c is not None
