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


@pytest.mark.timeout(60)
def test_a_reload_that_read_the_file_before_a_launch_wrote_it_does_not_undo_the_launch(ws: Path, monkeypatch):
    """The config watcher reads the file, then sets servers and specs from it; a relaunch with an edit writes
    the file and sets the server's new spec.  Interleaved, the reload's older read used to land after the
    launch: the relaunch started without the edit (seen once as a relaunch without --mem-fraction-static)."""
    import threading

    from backend.sglang.config import ServerConfig

    server = '\n[[server]]\nname = "s1"\nmodel_path = "/models/x"\nport = 30999\nsimulate = true\n'
    _touch(ws / "specdeck.toml", BASE + server)
    rt = runtime_mod.get_runtime(background=False)
    assert rt.fleet.names() == ["s1"]
    started: list[tuple] = []
    monkeypatch.setattr(rt.supervisor, "start", lambda name, **k: started.append(rt.supervisor.view(name).spec.argv))
    # an edit by hand (another process added) that the watcher is about to take up
    _touch(ws / "specdeck.toml", BASE + server + f'\n[[process]]\nname = "two"\nargv = ["{sys.executable}"]\n')
    read, go = threading.Event(), threading.Event()
    real_parse = runtime_mod.parse_config

    def slow_parse(*a, **k):
        cfg = real_parse(*a, **k)  # the file as it was before the launch writes it
        read.set()
        go.wait(10)
        return cfg

    monkeypatch.setattr(runtime_mod, "parse_config", slow_parse)
    reload = threading.Thread(target=rt.maybe_reload)
    reload.start()
    assert read.wait(10)
    edited = ServerConfig.model_validate({**rt.fleet.config("s1").model_dump(exclude_unset=True),
                                          "mem_fraction_static": 0.85})
    launch = threading.Thread(target=lambda: rt.launch("s1", edited, actor="tester", source="test", findings=[]))
    launch.start()
    launch.join(0.5)  # the reload holds what it read meanwhile
    go.set()
    reload.join(10), launch.join(10)
    assert not reload.is_alive() and not launch.is_alive()
    argv = list(rt.supervisor.view("s1").spec.argv)
    assert argv[argv.index("--mem-fraction-static") + 1] == "0.85"
    assert started and "--mem-fraction-static" in started[-1]
    assert rt.fleet.config("s1").mem_fraction_static == 0.85
    assert "mem_fraction_static = 0.85" in (ws / "specdeck.toml").read_text()
    assert "two" in rt.supervisor.names()  # the hand edit is taken up too
