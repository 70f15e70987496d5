"""The NVML adapter against the fake library, one failure kind at a time.

Every test runs twice: through the bindings' functions (the plain fake) and
through the C functions the pass calls directly (the fake with a C level,
``tests/telemetry/clevel.py``), so each failure kind is handled the same way
on both paths."""

from __future__ import annotations

import pytest

from backend.telemetry import nvml as nvml_mod
from backend.telemetry.fake import H200_TOTAL, FakeNvml
from backend.telemetry.model import NvmlStatus
from backend.telemetry.nvml import (
    ERR_NO_PERMISSION,
    ERR_UNKNOWN,
    NvmlAdapter,
    decode_throttle,
    open_adapter,
)

GIB = 1024**3
_PLAIN = FakeNvml


@pytest.fixture(autouse=True, params=["wrappers", "c-level"])
def _library(request, monkeypatch):
    from tests.telemetry.clevel import CLevelFake

    monkeypatch.setitem(globals(), "FakeNvml", CLevelFake if request.param == "c-level" else _PLAIN)
    return request.param


def adapter(**kw) -> tuple[FakeNvml, NvmlAdapter]:
    fake = FakeNvml(**kw)
    return fake, NvmlAdapter(fake, source="fake")


def test_eight_h200s_with_all_core_fields():
    fake, a = adapter(processes={0: [(4242, 61 * GIB)]})
    frame = a.sample()
    assert a.state().status is NvmlStatus.OK
    assert a.state().driver_version == "570.133.20"
    assert len(frame.gpus) == 8
    g0 = frame.gpus[0]
    assert g0.name == "NVIDIA H200" and g0.uuid.startswith("GPU-") and g0.bus_id.endswith(":00.0")
    assert g0.mem_total == H200_TOTAL and 140 * 10**9 < g0.mem_total < 152 * 10**9
    for name in ("util_gpu", "util_mem", "mem_used", "temp_c", "power_w", "power_limit_w", "sm_clock_mhz", "mem_clock_mhz"):
        assert getattr(g0, name) is not None, name
    assert g0.na == {}
    assert g0.power_limit_w == 700.0
    assert g0.util_gpu > 50  # a process holds it
    assert [(p.pid, p.used_memory) for p in g0.processes] == [(4242, 61 * GIB)]
    assert frame.gpus[1].processes == ()
    assert frame.gpus[1].throttle == ("idle",)


def test_lazy_init_and_cached_handles_and_static_info():
    fake, a = adapter()
    assert fake.calls["nvmlInit"] == 0  # nothing until asked
    a.sample()
    assert fake.calls["nvmlInit"] == 1
    handles, names = fake.calls["nvmlDeviceGetHandleByIndex"], fake.calls["nvmlDeviceGetName"]
    for _ in range(5):
        a.sample()
    assert fake.calls["nvmlInit"] == 1
    assert fake.calls["nvmlDeviceGetHandleByIndex"] == handles
    assert fake.calls["nvmlDeviceGetName"] == names
    assert fake.calls["nvmlDeviceGetUtilizationRates"] == 6 * 8


def test_slow_fields_never_in_the_core_pass():
    fake, a = adapter()
    for _ in range(3):
        a.sample()
    for fn in ("nvmlDeviceGetPcieThroughput", "nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetNvLinkState"):
        assert fake.calls[fn] == 0, fn
    slow = a.read_slow(pcie=False)
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 0
    assert slow[0].nvlink_active == 18 and slow[0].ecc_uncorrected_volatile == 0
    assert slow[0].pcie_tx_bps is None and "not read yet" in slow[0].na["pcie_tx_bps"]
    slow = a.read_slow(pcie=True)
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 16
    assert slow[1].pcie_tx_bps == 1500 * 1024.0
    assert a.sample().gpus[1].slow is slow[1]  # the last slow read rides along


@pytest.mark.parametrize(
    "init_error,status,words",
    [
        ("no_library", NvmlStatus.NO_LIBRARY, "No NVIDIA driver"),
        ("driver_not_loaded", NvmlStatus.NO_DRIVER, "not loaded"),
        ("rm_mismatch", NvmlStatus.ERROR, "reload"),
        ("no_permission", NvmlStatus.ERROR, "permission"),
    ],
)
def test_init_failures_are_one_clear_state(init_error, status, words):
    fake, a = adapter(init_error=init_error)
    frame = a.sample()
    assert frame.gpus == ()
    st = a.state()
    assert st.status is status and not st.ok
    assert words.lower() in st.message.lower()
    assert a.read_slow(pcie=True) == {}


def test_init_is_retried_after_the_retry_interval():
    fake = FakeNvml(init_error="driver_not_loaded")
    a = NvmlAdapter(fake, retry_init_s=0.0)
    assert a.state().status is NvmlStatus.NO_DRIVER
    fake._init_error = None  # the driver got loaded
    assert a.state().status is NvmlStatus.OK
    assert len(a.sample().gpus) == 8


def test_missing_bindings_package(monkeypatch):
    def no_pynvml():
        raise ImportError("No module named 'pynvml'")

    monkeypatch.setattr(nvml_mod, "_import_pynvml", no_pynvml)
    a = NvmlAdapter()
    assert a.state().status is NvmlStatus.NO_LIBRARY
    assert "nvidia-ml-py" in a.state().message
    assert a.sample().gpus == ()


def test_not_supported_fields_are_none_with_reason_never_zero():
    fake, a = adapter(not_supported={3: ["power", "temperature"], None: ["throttle"]})
    fake.fail("clocks", gpu=5, code=ERR_NO_PERMISSION)
    frame = a.sample()
    g3 = frame.gpus[3]
    assert g3.power_w is None and g3.temp_c is None
    assert g3.na["power_w"] == "not supported on this GPU"
    assert "temp_c" in g3.na
    assert g3.util_gpu is not None and g3.mem_used is not None  # the rest is read
    assert frame.gpus[4].power_w is not None
    assert all(g.throttle is None and "throttle" in g.na for g in frame.gpus)
    g5 = frame.gpus[5]
    assert g5.sm_clock_mhz is None and g5.mem_clock_mhz is None
    assert "permission" in g5.na["sm_clock_mhz"]


def test_memory_failure_keeps_total_from_static_info():
    fake, a = adapter()
    a.sample()
    fake.fail("memory", gpu=2)
    g2 = a.sample().gpus[2]
    assert g2.mem_used is None and g2.mem_total == H200_TOTAL and "mem_used" in g2.na


@pytest.mark.parametrize("code", [nvml_mod.ERR_GPU_IS_LOST, ERR_UNKNOWN])
def test_lost_gpu_is_shown_as_lost_and_others_carry_on(code):
    fake, a = adapter()
    a.sample()
    fake.lose(6, code=code)
    frame = a.sample()
    g6 = frame.gpus[6]
    assert g6.lost
    assert g6.util_gpu is None and g6.power_w is None and g6.processes is None
    assert g6.uuid is not None and g6.mem_total == H200_TOTAL  # static info survives
    assert ("lost" in g6.na["util_gpu"]) or ("unknown" in g6.na["util_gpu"].lower())
    assert not frame.gpus[5].lost and frame.gpus[5].util_gpu is not None
    fake.recover(6)
    assert not a.sample().gpus[6].lost


def test_gpu_lost_before_start_up_then_found():
    fake = FakeNvml()
    fake.lose(1)
    a = NvmlAdapter(fake)
    frame = a.sample()
    assert frame.gpus[1].lost and frame.gpus[1].uuid is None
    fake.recover(1)
    g1 = a.sample().gpus[1]
    assert not g1.lost and g1.uuid is not None and g1.mem_total == H200_TOTAL


def test_struct_version_fallbacks_are_taken_and_remembered():
    fake = FakeNvml(
        missing={"memory_v2", "procs_v3", "event_reasons", "temperature"},
        version_mismatch={"procs_v2"},
        processes={1: [(77, 2 * GIB)]},
    )
    a = NvmlAdapter(fake, source="fake", memory_v2=True)
    fake.set_throttle(1, 0x4 | 0x40)
    g1 = a.sample().gpus[1]
    assert g1.mem_used is not None and g1.na == {}
    assert [p.pid for p in g1.processes] == [77]
    assert g1.throttle == ("sw_power_cap", "hw_thermal")
    assert g1.temp_c is not None
    assert a.chosen() == {
        "memory": "memory v1",
        "procs": "processes",
        "throttle": "clock throttle reasons",
        "temp": "temperatureV",
    }
    before = fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"]
    a.want_processes()
    a.sample()
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == before  # not retried
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses"] == 2 * 8


MIB = 1024**2


def test_memory_v1_by_default_includes_reserved_and_v2_on_request_excludes_it():
    # the fake: 596 MiB in use by the driver's context on an empty GPU, 530 MiB reserved
    fake, a = adapter()
    g0 = a.sample().gpus[0]
    assert g0.mem_used == (596 + 530) * MIB
    assert fake.calls["nvmlDeviceGetMemoryInfo"] == 8 + 8  # static total at start-up, then one v1 read per GPU
    fake2 = FakeNvml()
    a2 = NvmlAdapter(fake2, source="fake", memory_v2=True)
    assert a2.sample().gpus[0].mem_used == 596 * MIB


def test_memory_v1_reads_never_ask_for_the_v2_struct():
    fake = FakeNvml(missing={"memory_v2"})  # a driver without v2: v1 must not even try it
    a = NvmlAdapter(fake, source="fake")
    for _ in range(3):
        g = a.sample().gpus[0]
    assert g.mem_used == (596 + 530) * MIB and "mem_used" not in g.na
    assert a.chosen() == {}  # nothing fell back: v1 was the first choice


def test_mig_devices_listed_under_their_parent():
    fake, a = adapter(mig={2: 3}, processes={2: [(500, 5 * GIB), (501, 6 * GIB)]})
    frame = a.sample()
    g2 = frame.gpus[2]
    assert g2.mig_enabled is True
    assert [m.mig_index for m in g2.mig_devices] == [0, 1, 2]
    assert all(m.parent_index == 2 and m.uuid.startswith("MIG-") for m in g2.mig_devices)
    assert [m.gpu_instance_id for m in g2.mig_devices] == [1, 2, 3]
    assert g2.mig_devices[0].memory_used == 512 * 1024**2 + 5 * GIB
    assert g2.mig_devices[0].memory_total == 35 * GIB
    assert g2.util_gpu is None and "util_gpu" in g2.na  # utilisation not supported in MIG mode
    assert {(p.pid, p.gpu_instance_id) for p in g2.processes} == {(500, 1), (501, 2)}
    assert frame.gpus[0].mig_enabled is False and frame.gpus[0].mig_devices == ()


def test_decode_throttle_names_and_unknown_bits():
    assert decode_throttle(0) == ()
    assert decode_throttle(0x4 | 0x20) == ("sw_power_cap", "sw_thermal")
    assert decode_throttle(0x1 | 0x1000) == ("idle", "bit_0x1000")


def test_open_adapter_modes(monkeypatch):
    assert open_adapter("fake").source == "fake"
    with pytest.raises(ValueError):
        open_adapter("cuda")

    def no_pynvml():
        raise ImportError("none")

    monkeypatch.setattr(nvml_mod, "_import_pynvml", no_pynvml)
    real = open_adapter("auto", demo=False)
    assert real.source == "nvml" and real.state().status is NvmlStatus.NO_LIBRARY
    demo = open_adapter("auto", demo=True)
    assert demo.source == "fake" and demo.state().ok


def test_real_bindings_without_a_driver_say_so():
    a = NvmlAdapter()  # the real pynvml module
    st = a.state()
    if st.ok:
        pytest.skip("this machine has a working NVIDIA driver")
    assert st.status in (NvmlStatus.NO_LIBRARY, NvmlStatus.NO_DRIVER)
    assert "No NVIDIA driver" in st.message or "nvidia-ml-py" in st.message
    assert a.sample().gpus == ()


def test_unsupported_fields_are_not_asked_every_pass_but_probed_again_later():
    fake, a = adapter(not_supported={2: ["power"]})
    fake.fail("clocks", gpu=1, code=ERR_NO_PERMISSION)
    a.sample()
    power_calls = fake.calls["nvmlDeviceGetPowerUsage"]
    clock_calls = fake.calls["nvmlDeviceGetClockInfo"]
    for _ in range(4):
        frame = a.sample()
    # 7 GPUs read power every pass; GPU 2 is not asked again
    assert fake.calls["nvmlDeviceGetPowerUsage"] - power_calls == 4 * 7
    assert fake.calls["nvmlDeviceGetClockInfo"] - clock_calls == 4 * 7 * 2
    g2 = frame.gpus[2]
    assert g2.power_w is None and g2.na["power_w"] == "not supported on this GPU"  # still N/A with its reason
    assert "permission" in frame.gpus[1].na["sm_clock_mhz"] and frame.gpus[1].sm_clock_mhz is None
    assert frame.gpus[3].power_w is not None
    fake.clear_failures()
    a.refresh_static()  # re-probes remembered failures (as does the reprobe interval)
    frame = a.sample()
    assert frame.gpus[2].power_w is not None and frame.gpus[1].sm_clock_mhz is not None


def test_reprobe_interval_asks_a_remembered_failure_again():
    fake = FakeNvml(gpus=1)
    a = NvmlAdapter(fake, source="fake", reprobe_s=0.0)
    fake.fail("power", gpu=0)
    assert a.sample().gpus[0].power_w is None
    fake.clear_failures()
    assert a.sample().gpus[0].power_w is not None


def test_transient_failures_are_retried_every_pass():
    fake, a = adapter(gpus=1)
    fake.fail("power", gpu=0, code=nvml_mod.ERR_TIMEOUT)
    a.sample()
    a.sample()
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 2
    fake.clear_failures()
    assert a.sample().gpus[0].power_w is not None


def test_call_timings_per_field_and_for_the_whole_pass():
    fake = FakeNvml(gpus=2)
    a = NvmlAdapter(fake, source="fake", time_calls=True)
    passes = [a.sample().nvml_s for _ in range(5)]
    t = a.call_times(reset=True)
    assert set(t) >= {"util", "memory", "temp", "power", "plimit", "sm_clock", "mem_clock", "throttle", "procs", "pass", "rest"}
    assert t["util"]["n"] == 5 * 2 and t["pass"]["n"] == 5
    # each field's time is a measured, finite duration (how they compare with the pass is measured by
    # perf/bench_telemetry.py, not asserted here: on a loaded machine one call's median can exceed it)
    assert all(0 <= v["median"] < 1e9 for v in t.values()) and t["pass"]["median"] > 0
    # per GPU in microseconds: never more than the slowest whole pass the frames timed (not the last one's: on a
    # loaded machine the last pass can be the quickest)
    assert t["pass"]["median"] <= max(passes) * 1e6
    assert a.call_times() == {}  # reset
    a.set_call_timing(False)
    a.sample()
    assert a.call_times() == {}
    assert NvmlAdapter(FakeNvml(gpus=1), source="fake").call_times() == {}


class Clock:
    def __init__(self, t: float = 1_700_000_000.0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_process_list_is_read_every_few_seconds_and_carries_its_time():
    clock = Clock()
    fake = FakeNvml(gpus=2, clock=clock, processes={0: [(4242, 61 * GIB)]})
    a = NvmlAdapter(fake, source="fake", clock=clock, procs_interval_s=5.0)
    t_read = clock.t
    seen = []
    for _ in range(7):  # seven passes one second apart: t0 .. t0+6
        frame = a.sample()
        seen.append((frame.procs_read, frame.gpus[0].processes_t))
        if clock.t == t_read + 1:
            fake.set_processes(0, [(4242, 61 * GIB), (4343, 2 * GIB)])  # a second process arrives
        clock.t += 1
    assert [r for r, _ in seen] == [True, False, False, False, False, True, False]
    assert [t for _, t in seen] == [t_read] * 5 + [t_read + 5] * 2
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 2 * 2  # two reads of two GPUs
    assert fake.calls["nvmlDeviceGetUtilizationRates"] == 7 * 2  # every other field every pass
    assert [p.pid for p in frame.gpus[0].processes] == [4242, 4343]
    assert frame.gpus[1].processes == () and frame.gpus[1].processes_t == t_read + 5


def test_want_processes_reads_the_list_in_the_next_pass_only():
    clock = Clock()
    fake = FakeNvml(gpus=1, clock=clock)
    a = NvmlAdapter(fake, source="fake", clock=clock)
    assert a.sample().gpus[0].processes == ()
    fake.set_processes(0, [(99, GIB)])
    clock.t += 1
    assert a.sample().gpus[0].processes == ()  # not due yet: the last list, read a second ago
    a.want_processes()
    g = a.sample().gpus[0]
    assert [p.pid for p in g.processes] == [99] and g.processes_t == clock.t
    a.sample()
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 2


def test_a_failed_process_read_stays_na_with_its_reason_until_the_next_read():
    clock = Clock()
    fake = FakeNvml(gpus=1, clock=clock)
    fake.fail("nvmlDeviceGetComputeRunningProcesses_v3", gpu=0, code=nvml_mod.ERR_TIMEOUT)
    a = NvmlAdapter(fake, source="fake", clock=clock)
    g = a.sample().gpus[0]
    assert g.processes is None and g.na["processes"] == "NVML timed out"
    clock.t += 1
    g = a.sample().gpus[0]
    assert g.processes is None and g.na["processes"] == "NVML timed out"  # carried, not turned into "none"
    assert g.power_w is not None and "power_w" not in g.na


def test_a_gpu_lost_and_back_reads_its_process_list_at_once():
    clock = Clock()
    fake = FakeNvml(gpus=2, clock=clock)
    a = NvmlAdapter(fake, source="fake", clock=clock)
    a.sample()
    fake.lose(1)
    clock.t += 1
    assert a.sample().gpus[1].processes is None
    fake.recover(1)
    fake.set_processes(1, [(31, 3 * GIB)])
    clock.t += 1
    g1 = a.sample().gpus[1]
    assert [p.pid for p in g1.processes] == [31] and g1.processes_t == clock.t


@pytest.mark.parametrize("unreadable", [None, 2**64 - 1])
def test_process_memory_nvml_cannot_read_is_none_not_zero(unreadable):
    fake = FakeNvml(gpus=1)
    a = NvmlAdapter(fake, source="fake")
    real_list = fake._proc_list

    def with_unreadable(h):
        procs = real_list(h)
        procs[0].usedGpuMemory = unreadable
        return procs

    fake._proc_list = with_unreadable
    fake.set_processes(0, [(4242, 5 * GIB), (4343, 7 * GIB)])
    (first, second) = a.sample().gpus[0].processes
    assert (first.pid, first.used_memory) == (4242, None)
    assert (second.pid, second.used_memory) == (4343, 7 * GIB)


def test_samples_are_whole_records_equal_to_ones_built_field_by_field():
    from dataclasses import fields

    from backend.telemetry.model import GpuSample
    from backend.telemetry.nvml_codes import CORE_CALLS

    # the pass unpacks its direct calls in this order
    assert list(CORE_CALLS) == ["util", "memory", "temp", "power", "plimit", "sm_clock", "mem_clock", "throttle", "procs"]
    fake, a = adapter(gpus=2, processes={0: [(4242, 61 * GIB)]})
    fake.fail("power", gpu=1)
    for g in a.sample().gpus:
        assert set(vars(g)) == {f.name for f in fields(GpuSample)}
        assert g == GpuSample(**vars(g)) and hash(g.index) == g.index
        with pytest.raises(AttributeError):
            g.power_w = 1.0  # still frozen
    g0, g1 = a.sample().gpus
    assert (g0.util_gpu, g0.temp_c, g0.power_limit_w, g0.mem_clock_mhz) == (
        float(fake.nvmlDeviceGetUtilizationRates(fake.nvmlDeviceGetHandleByIndex(0)).gpu),
        float(fake.nvmlDeviceGetTemperature(fake.nvmlDeviceGetHandleByIndex(0), 0)),
        700.0,
        2619.0,
    )
    assert g1.power_w is None and g1.na == {"power_w": "not supported on this GPU"}


def _view(name, kind, pid, argv=(), env=None):
    from types import SimpleNamespace

    return SimpleNamespace(name=name, kind=kind, pid=pid, spec=SimpleNamespace(argv=tuple(argv), env=env or {}))


def _holders_by_gpu(fake):
    a = NvmlAdapter(fake, source="fake")
    return {g.index: [p.pid for p in g.processes] for g in a.sample().gpus if g.processes}


def test_the_fake_places_demo_servers_by_tensor_parallelism_and_visible_devices():
    launch = ["python", "-m", "sglang.launch_server", "--model-path", "m"]
    managed = [
        _view("small", "server", 101, launch),  # TP 1: one GPU
        _view("big", "server", 102, launch + ["--tp-size", "4"]),  # the next four
        _view("pinned", "server", 103, launch + ["--tp=2"], {"CUDA_VISIBLE_DEVICES": "6,7"}),
        _view("run-a", "training", 104),  # training runs: one GPU each from GPU 3
        ("bench", "benchmark", 105),  # holds no GPU
    ]
    fake = FakeNvml(follow=lambda: managed)
    assert _holders_by_gpu(fake) == {0: [101], 1: [102], 2: [102], 3: [102, 104], 4: [102], 6: [103], 7: [103]}


def test_the_fake_places_a_plain_server_tuple_on_one_gpu():
    fake = FakeNvml(gpus=2, follow=lambda: [("main", "server", 7, "RUNNING")])
    assert _holders_by_gpu(fake) == {0: [7]}


def test_the_fake_drops_a_relaunched_servers_ended_pid_while_it_is_still_unreaped():
    """A relaunch: the old server has ended but its parent has not reaped it yet (the wrapper
    keeps it so while it ends leftovers) and the supervisor already lists the new pid.  A GPU
    lists the new pid only; the placement cached a moment ago must not keep the old one."""
    import os
    import subprocess
    import sys

    old = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        current = [("main", "server", old.pid, "RUNNING")]
        fake = FakeNvml(gpus=2, follow=lambda: current)
        assert _holders_by_gpu(fake) == {0: [old.pid]}
        old.terminate()
        os.waitid(os.P_PID, old.pid, os.WEXITED | os.WNOWAIT)  # ended, pid still taken
        current = [("main", "server", os.getpid(), "RUNNING")]
        assert _holders_by_gpu(fake) == {0: [os.getpid()]}
    finally:
        old.kill()
        old.wait()
