"""AppTest of the GPUs page with the fake 8-GPU source, and with no driver."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from backend import runtime as runtime_mod
from backend.telemetry import nvml as nvml_mod

REPO = Path(__file__).resolve().parents[2]
PAGE = str(REPO / "app_pages" / "gpus.py")
GIB = 1024**3


def _workspace(tmp_path, monkeypatch, source: str) -> Path:
    (tmp_path / "specdeck.toml").write_text(f'[workspace]\nname = "gputest"\n\n[telemetry]\nsource = "{source}"\n')
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
    return tmp_path


@pytest.fixture
def close_runtimes():
    yield
    runtime_mod.close_all()


def _metrics(at, label):
    return [m for m in at.metric if m.label == label]


def _tile_heads(at):
    return [m for m in at.markdown if m.value.startswith("**GPU ") and "ECC" not in m.value]


def _slow_lines(at):
    return [m for m in at.markdown if m.value.startswith("**GPU ") and "ECC" in m.value]


def test_eight_fake_gpus_with_a_missing_field_shown_as_na_with_reason(tmp_path, monkeypatch, close_runtimes):
    _workspace(tmp_path, monkeypatch, "fake")
    rt = runtime_mod.get_runtime()
    fake = rt.telemetry.adapter._lib
    fake.fail("power", gpu=3)
    fake.set_processes(0, [(os.getpid(), 61 * GIB)])
    rt.telemetry.adapter.want_processes()  # the process list is otherwise read every 5 s
    rt.telemetry.sample_once()

    at = AppTest.from_file(PAGE, default_timeout=60).run()
    assert not at.exception, at.exception
    heads = [m.value for m in _tile_heads(at)]
    assert len(heads) == 8 and heads[0].startswith("**GPU 0** · H200")
    power = [m for m in at.markdown if m.value.startswith("Power ")]
    assert len(power) == 8
    na = [m for m in power if "N/A" in m.value]
    assert len(na) == 1 and na[0].value.startswith("Power **N/A**")
    assert "not supported" in na[0].proto.help
    assert all(m.value.startswith("Power **") and " W**" in m.value and not m.proto.help for m in power if m is not na[0])
    utils = [p for p in at.get("progress") if p.proto.text.startswith("Utilisation")]
    assert len(utils) == 8
    assert any("Simulated GPUs" in i.value for i in at.info)
    # the process table names the unmanaged holder of GPU 0 with its user
    df = at.dataframe[0].value
    assert list(df["GPU"]) == [0] and list(df["pid"]) == [os.getpid()]
    assert list(df["job"]) == ["— not managed —"]
    assert "N/A" not in str(df["user"][0])


def test_no_driver_state_still_shows_host_telemetry(tmp_path, monkeypatch, close_runtimes):
    def no_pynvml():
        raise ImportError("No module named 'pynvml'")

    monkeypatch.setattr(nvml_mod, "_import_pynvml", no_pynvml)
    _workspace(tmp_path, monkeypatch, "nvml")
    rt = runtime_mod.get_runtime()
    rt.telemetry.sample_once()
    rt.telemetry.sample_once()

    at = AppTest.from_file(PAGE, default_timeout=60).run()
    assert not at.exception, at.exception
    assert any("No NVIDIA driver" in w.value for w in at.warning)
    assert not _tile_heads(at) and not _slow_lines(at)
    gpus = _metrics(at, "GPUs")[0]
    assert gpus.value == "N/A" and "nvidia-ml-py" in gpus.proto.help
    cpu = _metrics(at, "CPU")[0]
    assert cpu.value.endswith("%")
    mem = _metrics(at, "Memory")[0]
    assert mem.value.endswith("GiB")


# -- slow readings, the on-demand PCIe read, empty and failure states ----------
#
# These build the runtime without its background threads, so the test decides
# when a core pass (sample_once) and a slow pass (read_slow_once, what the
# sampler's slow thread runs) happen.


def _quiet_runtime(tmp_path, monkeypatch, source: str = "fake"):
    _workspace(tmp_path, monkeypatch, source)
    rt = runtime_mod.get_runtime(background=False)
    assert not rt.telemetry.running
    return rt


def _line_for(lines, gpu: int):
    found = [m for m in lines if m.value.startswith(f"**GPU {gpu}** ·")]
    assert len(found) == 1, [m.value for m in lines]
    return found[0]


def _captions(at) -> list[str]:
    return [c.value for c in at.caption]


def test_slow_readings_per_gpu_and_the_pcie_button_asks_the_slow_thread(tmp_path, monkeypatch, close_runtimes):
    rt = _quiet_runtime(tmp_path, monkeypatch)
    sampler = rt.telemetry
    sampler.pcie_interval_s = None  # PCIe only on demand, so the button is what brings it
    fake = sampler.adapter._lib
    fake.fail("nvlink", gpu=1)
    fake.fail("pcie", gpu=2)
    fake.fail("ecc", gpu=4)
    fake.fail("energy", gpu=5)
    fake.set_ecc(6, corrected=12, uncorrected=2)
    fake.set_nvlink_down(7, [0, 1])
    sampler.sample_once()
    sampler.read_slow_once()
    sampler.sample_once()
    asked = []
    real_request = sampler.request_slow

    def spy(**kw):
        asked.append(kw)
        real_request(**kw)

    monkeypatch.setattr(sampler, "request_slow", spy)

    at = AppTest.from_file(PAGE, default_timeout=60).run()
    assert not at.exception, at.exception
    total = 8 * fake._total / GIB
    (mem,) = _metrics(at, "GPU memory")
    assert mem.proto.delta == f"of {total:,.1f} GiB"  # one decimal, as every GiB figure
    lines = _slow_lines(at)
    assert len(lines) == 8
    g0 = _line_for(lines, 0).value
    assert "ECC corrected **0**" in g0 and "uncorrected **0**" in g0
    assert "energy **18.00 kWh**" in g0  # three days at 250 W since the driver was loaded
    assert "NVLink **18/18 active**" in g0
    assert "PCIe **N/A**" in g0 and "PCIe TX" not in g0
    assert "not read yet" in _line_for(lines, 0).proto.help
    nv = _line_for(lines, 1)
    assert "NVLink **N/A**" in nv.value and "NVLink: not supported" in nv.proto.help
    ecc = _line_for(lines, 4)
    assert "ECC corrected **N/A**" in ecc.value and "ECC corrected: not supported" in ecc.proto.help
    en = _line_for(lines, 5)
    assert "energy **N/A**" in en.value and "energy: not supported" in en.proto.help
    assert "uncorrected **:red[2]**" in _line_for(lines, 6).value
    assert "NVLink **16/18 active**" in _line_for(lines, 7).value
    fresh = [c for c in _captions(at) if c.startswith("slow readings updated ")]
    assert len(fresh) == 1 and "stale" not in fresh[0], _captions(at)  # "just now" or a few s on a busy machine
    assert not any("PCIe read requested" in c for c in _captions(at))

    button = at.button(key="gpu-pcie-read")
    assert not button.disabled
    at = button.click().run()
    assert not at.exception, at.exception
    assert asked == [{"pcie": True}]
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 0  # the page itself never reads NVML
    assert sampler.pcie_requested_at is not None
    assert any("PCIe read requested" in c for c in _captions(at))

    sampler.read_slow_once()  # the slow thread's pass
    sampler.sample_once()
    assert fake.calls["nvmlDeviceGetPcieThroughput"] == 16
    at = at.run()
    assert not at.exception, at.exception
    assert not any("PCIe read requested" in c for c in _captions(at))
    lines = _slow_lines(at)
    g0 = _line_for(lines, 0).value
    assert "PCIe TX **1.2 MB/s**" in g0 and "RX **1.3 MB/s**" in g0  # 1,200 / 1,250 KB/s
    assert "PCIe read just now" in g0
    assert "PCIe TX **3.1 MB/s**" in _line_for(lines, 6).value  # 3,000 KB/s
    unsupported = _line_for(lines, 2)
    assert "PCIe TX **N/A**" in unsupported.value and "PCIe TX: not supported" in unsupported.proto.help


def test_before_the_first_sample_every_block_waits_and_says_so(tmp_path, monkeypatch, close_runtimes):
    rt = _quiet_runtime(tmp_path, monkeypatch)
    assert rt.telemetry.latest() is None

    at = AppTest.from_file(PAGE, default_timeout=60).run()
    assert not at.exception, at.exception
    assert any("Waiting for the first telemetry sample" in i.value for i in at.info)
    caps = _captions(at)
    assert any("No history yet" in c for c in caps)
    for what in ("updated", "slow readings updated", "history updated"):
        assert f":orange[{what}: no data yet]" in caps, caps
    assert at.button(key="gpu-pcie-read").disabled
    assert not _tile_heads(at) and not _slow_lines(at) and not at.metric


def test_no_gpus_reported(tmp_path, monkeypatch, close_runtimes):
    from backend.telemetry.fake import FakeNvml
    from backend.telemetry.nvml import NvmlAdapter

    rt = _quiet_runtime(tmp_path, monkeypatch)
    rt.telemetry.adapter = NvmlAdapter(FakeNvml(gpus=0), source="fake")
    rt.telemetry.sample_once()
    rt.telemetry.read_slow_once()
    rt.telemetry.sample_once()

    at = AppTest.from_file(PAGE, default_timeout=60).run()
    assert not at.exception, at.exception
    assert _metrics(at, "GPUs")[0].value == "0"  # NVML works and counts none: a real 0, not N/A
    for label in ("Mean utilisation", "GPU memory", "Total power", "Hottest GPU"):
        assert _metrics(at, label)[0].value == "N/A", label
    caps = _captions(at)
    assert "No GPUs to report on." in caps
    assert "No GPU history: no GPUs are reported." in caps
    assert at.button(key="gpu-pcie-read").disabled
    assert not _tile_heads(at) and not _slow_lines(at)
    assert _metrics(at, "CPU")[0].value.endswith("%")  # the host still reports


def test_a_lost_gpu_and_a_failed_host_reading(tmp_path, monkeypatch, close_runtimes):
    rt = _quiet_runtime(tmp_path, monkeypatch)
    sampler = rt.telemetry
    fake = sampler.adapter._lib

    def host_fails():
        raise OSError("psutil could not read /proc")

    monkeypatch.setattr(sampler.host, "sample", host_fails)
    sampler.sample_once()
    fake.lose(3)
    sampler.read_slow_once()
    snap = sampler.sample_once()
    assert snap.host is None and snap.gpus[3].lost

    at = AppTest.from_file(PAGE, default_timeout=60).run()
    assert not at.exception, at.exception
    gpus = _metrics(at, "GPUs")[0]
    assert gpus.value == "8" and gpus.proto.delta == "-1 GPU lost"  # the delta carries its unit
    lost_tile = [m for m in _tile_heads(at) if m.value.startswith("**GPU 3**")]
    assert len(lost_tile) == 1 and "LOST" in lost_tile[0].value
    lost_slow = _line_for(_slow_lines(at), 3)
    assert "LOST" in lost_slow.value and "lost" in lost_slow.proto.help
    assert "ECC corrected **0**" in _line_for(_slow_lines(at), 0).value
    caps = _captions(at)
    assert any(c.startswith("Host telemetry: N/A") for c in caps)
    assert any(c.startswith("No host history in this range yet") for c in caps)
    assert any("host sample failed" in c for c in caps)  # the sampler's own note


def test_old_data_turns_every_live_block_amber(tmp_path, monkeypatch, close_runtimes):
    import time

    from backend.telemetry.fake import FakeNvml
    from backend.telemetry.host import HostReader
    from backend.telemetry.nvml import NvmlAdapter

    def old():
        return time.time() - 120  # the last readings are two minutes old

    rt = _quiet_runtime(tmp_path, monkeypatch)
    sampler = rt.telemetry
    sampler.adapter = NvmlAdapter(FakeNvml(clock=old), source="fake", clock=old)
    sampler.host = HostReader(clock=old)
    sampler.sample_once()
    sampler.read_slow_once()
    sampler.sample_once()

    at = AppTest.from_file(PAGE, default_timeout=60).run()
    assert not at.exception, at.exception
    caps = _captions(at)
    for what in ("telemetry updated", "slow readings updated", "history updated"):
        stale = [c for c in caps if what in c]
        assert len(stale) == 1 and stale[0].startswith(":orange[⚠") and "stale" in stale[0], (what, caps)
        assert "2 m 0" in stale[0]  # the age comes from the readings' own time


# -- issue findings: memory NVML cannot read, sums per job, named figures, colours --


def test_process_memory_nvml_cannot_read_is_na_and_one_jobs_processes_on_a_gpu_are_summed(
        tmp_path, monkeypatch, close_runtimes):
    rt = _quiet_runtime(tmp_path, monkeypatch)
    sampler = rt.telemetry
    fake = sampler.adapter._lib
    me, parent = os.getpid(), os.getppid()  # a real tree: this process is a child of the "server"
    sampler._managed = lambda: [("main", "server", parent, "RUNNING")]
    fake.set_processes(0, [(parent, 2 * GIB), (me, 59 * GIB)])  # two processes of one job on GPU 0
    fake.set_processes(1, [(me, None)])  # NVML cannot read this one's memory
    sampler.sample_once()

    at = AppTest.from_file(PAGE, default_timeout=60).run()
    assert not at.exception, at.exception
    summaries = [m.value for m in at.markdown if "server main holds" in m.value]
    assert len(summaries) == 1 and summaries[0].endswith("server main holds GPUs 0-1, memory N/A")
    df = at.dataframe[0].value
    rows = {(r["GPU"], r["pid"]): r["GPU memory"] for _, r in df.iterrows()}
    assert rows == {(0, parent): "2.0 GiB", (0, me): "59.0 GiB", (1, me): "N/A"}
    assert any(c.startswith("GPU process list read just now (read every 5 s") for c in _captions(at)), _captions(at)

    fake.set_processes(1, [(me, 61 * GIB)])
    sampler.adapter.want_processes()
    sampler.sample_once()
    at = at.run()
    summaries = [m.value for m in at.markdown if "server main holds" in m.value]
    assert summaries[0].endswith("server main holds GPUs 0-1, 61.0 GiB each")  # 2 + 59 on GPU 0


def test_hottest_gpu_is_named_and_host_memory_shows_its_total(tmp_path, monkeypatch, close_runtimes):
    import time

    from backend.telemetry.model import HostSample

    rt = _quiet_runtime(tmp_path, monkeypatch)
    sampler = rt.telemetry
    fake = sampler.adapter._lib
    for g in range(8):
        fake.set_util(g, 0.0)
    fake.set_util(5, 100.0)  # the fake's temperature: 31 + 0.38 x util + index mod 3 -> GPU 5 at 71 °C
    monkeypatch.setattr(sampler.host, "sample", lambda: HostSample(
        t=time.time(), cpu_percent=7.0, cpu_count=16, load_1m=0.5, mem_used=12 * GIB, mem_total=64 * GIB,
        mem_percent=18.75))
    sampler.sample_once()

    at = AppTest.from_file(PAGE, default_timeout=60).run()
    assert not at.exception, at.exception
    (hot,) = _metrics(at, "Hottest GPU")
    assert hot.value == "71 °C" and hot.proto.delta == "GPU 5"
    (mem,) = _metrics(at, "Memory")
    assert mem.value == "12.0 GiB" and mem.proto.delta == "of 64.0 GiB"
    (cost,) = _metrics(at, "Sampler cost")
    assert cost.value.endswith(" µs") and cost.proto.delta == "per GPU per sample"
    assert "mean " in cost.proto.help and "process list" in cost.proto.help


def test_each_gpu_history_line_has_its_own_colour(tmp_path, monkeypatch, close_runtimes):
    from tests.helpers import line_charts

    rt = _quiet_runtime(tmp_path, monkeypatch)
    for _ in range(3):
        rt.telemetry.sample_once()

    at = AppTest.from_file(PAGE, default_timeout=60).run()
    assert not at.exception, at.exception
    charts = [f for f in line_charts(at) if "Utilisation" in f["layout"]["title"]["text"]]
    assert len(charts) == 1
    traces = charts[0]["data"]
    colours = {t["name"]: t["line"]["color"] for t in traces}
    assert list(colours) == [f"GPU {i}" for i in range(8)]
    assert len(set(colours.values())) == 8, colours
    assert colours["GPU 0"] == "#1f77b4" and colours["GPU 7"] == "#7f7f7f"  # the page's fixed palette, per index


def test_gpu_colours_stay_distinct_on_large_hosts():
    src = Path(PAGE).read_text(encoding="utf-8")
    ns: dict = {}
    exec(src[src.index("GPU_PALETTE = ("):src.index("THROTTLE_LABELS = {")], ns)  # the palette alone, not the page
    for count in (1, 2, 8, 16, 24, 64):
        colours = [ns["gpu_colour"](i, count) for i in range(count)]
        assert len(set(colours)) == count, count
