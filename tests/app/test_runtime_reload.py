"""The runtime follows edits of the workspace file without a restart."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from backend import runtime as runtime_mod

BASE = f"""
[workspace]
name = "reload"

[telemetry]
source = "fake"

[[process]]
name = "one"
argv = ["{sys.executable}", "-c", "print(1)"]
"""


@pytest.fixture
def ws(tmp_path: Path, monkeypatch):
    (tmp_path / "specdeck.toml").write_text(BASE)
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
    yield tmp_path
    runtime_mod.close_all()


def _touch(path: Path, text: str) -> None:
    before = path.stat().st_mtime_ns
    path.write_text(text)
    os.utime(path, ns=(before + 2_000_000_000, before + 2_000_000_000))  # a visibly newer mtime


def test_valid_edit_is_picked_up_and_invalid_one_is_reported(ws: Path):
    rt = runtime_mod.get_runtime(background=False)
    assert rt.supervisor.names() == ["one"]
    _touch(ws / "specdeck.toml", BASE + f'\n[[process]]\nname = "two"\nargv = ["{sys.executable}"]\n')
    assert runtime_mod.get_runtime(background=False) is rt
    assert sorted(rt.supervisor.names()) == ["one", "two"]
    assert rt.config_error is None

    _touch(ws / "specdeck.toml", BASE + '\n[[process]]\nname = "three"\nargv = []\n')
    assert runtime_mod.get_runtime(background=False) is rt
    assert rt.config_error is not None
    assert "specdeck.toml:" in str(rt.config_error) and "process[1].argv" in str(rt.config_error)
    assert sorted(rt.supervisor.names()) == ["one", "two"]  # the last good config stays


def test_unchanged_file_is_not_parsed_again(ws: Path, monkeypatch):
    rt = runtime_mod.get_runtime(background=False)
    calls = []
    monkeypatch.setattr(runtime_mod, "parse_config", lambda *a, **k: calls.append(a))
    for _ in range(5):
        runtime_mod.get_runtime(background=False)
    assert calls == []
    assert rt.maybe_reload() is False


def test_gpu_probe_counts_a_servers_own_memory_as_free(ws: Path):
    from types import SimpleNamespace

    rt = runtime_mod.get_runtime(background=False)
    gib = 1024**3
    gpus = tuple(SimpleNamespace(index=i, lost=False, mem_total=140 * gib, mem_used=70 * gib) for i in range(2))
    jobs = (SimpleNamespace(name="srv", mem_by_gpu=((0, 61 * gib), (1, 61 * gib))),)
    snap = SimpleNamespace(gpus=gpus, attribution=SimpleNamespace(jobs=jobs))
    rt.telemetry.latest = lambda: snap
    rt.telemetry.sample_once = lambda: snap  # with exclude, the GPUs are read afresh
    assert rt.gpu_probe() == [(0, 140 * gib, 70 * gib), (1, 140 * gib, 70 * gib)]
    assert rt.gpu_probe(exclude="srv") == [(0, 140 * gib, 131 * gib), (1, 140 * gib, 131 * gib)]
    assert rt.gpu_probe(exclude="other") == rt.gpu_probe()


def test_servers_follow_the_file(ws: Path):
    rt = runtime_mod.get_runtime(background=False)
    assert rt.fleet.names() == []
    server = '\n[[server]]\nname = "s1"\nmodel_path = "/models/x"\nport = 30999\nsimulate = true\n'
    _touch(ws / "specdeck.toml", BASE + server)
    runtime_mod.get_runtime(background=False)
    assert rt.fleet.names() == ["s1"]
    assert "s1" in rt.supervisor.names()
    assert rt.fleet.config("s1").port == 30999
    _touch(ws / "specdeck.toml", BASE + server.replace("30999", "31000"))
    runtime_mod.get_runtime(background=False)
    assert rt.fleet.config("s1").port == 31000
    assert "31000" in rt.supervisor.view("s1").spec.argv
    _touch(ws / "specdeck.toml", BASE)
    runtime_mod.get_runtime(background=False)
    assert rt.fleet.names() == [] and "s1" not in rt.supervisor.names()


@pytest.mark.timeout(60)
def test_dashboard_runtime_follows_edits_in_the_background(ws: Path):
    import time

    rt = runtime_mod.get_runtime()  # background: loops and the config watcher run
    _touch(ws / "specdeck.toml", BASE + f'\n[[process]]\nname = "later"\nargv = ["{sys.executable}"]\n')
    deadline = time.time() + 20
    while "later" not in rt.supervisor.names() and time.time() < deadline:
        time.sleep(0.1)
    assert "later" in rt.supervisor.names()
