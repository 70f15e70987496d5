"""AppTest of the GPUs page with the fake 8-GPU source, and with no driver."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from backend import runtime as runtime_mod
from backend.telemetry import nvml as nvml_mod

REPO = Path(__file__).resolve().parents[2]
PAGE = str(REPO / "pages" / "gpus.py")
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


def test_eight_fake_gpus_with_a_missing_field_shown_as_na_with_reason(tmp_path, monkeypatch, close_runtimes):
    _workspace(tmp_path, monkeypatch, "fake")
    rt = runtime_mod.get_runtime()
    fake = rt.telemetry.adapter._lib
    fake.fail("power", gpu=3)
    fake.set_processes(0, [(os.getpid(), 61 * GIB)])
    rt.telemetry.sample_once()

    at = AppTest.from_file(PAGE, default_timeout=60).run()
    assert not at.exception, at.exception
    heads = [m.value for m in at.markdown if m.value.startswith("**GPU ")]
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
    assert not [m for m in at.markdown if m.value.startswith("**GPU ")]
    gpus = _metrics(at, "GPUs")[0]
    assert gpus.value == "N/A" and "nvidia-ml-py" in gpus.proto.help
    cpu = _metrics(at, "CPU")[0]
    assert cpu.value.endswith("%")
    mem = _metrics(at, "Memory")[0]
    assert mem.value.endswith("GiB")
