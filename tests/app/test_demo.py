"""The demo workspace tells one story: the server's config, its launch command and the fake
GPUs it is seen holding agree."""

from __future__ import annotations

import sys
from types import SimpleNamespace

from backend.sglang.config import ServerConfig
from backend.sglang.launch import build_argv, to_process_spec
from backend.sglang.preflight import run_preflight
from backend.telemetry.fake import FakeNvml
from backend.flows.workspace import load_workspace

GiB = 1024 ** 3


def _demo_server(tmp_path):
    ws = load_workspace(tmp_path / "demo", create_demo=True)
    servers = {c.name: c for c in (ServerConfig.model_validate(e) for e in ws.config.server)}
    # the 70B server, and the small one the demo run's checkpoints deploy to (tests/train/test_deploy_trained.py)
    assert list(servers) == ["demo-llama70b-eagle3", "demo-tiny-eagle3"]
    return ws, servers["demo-llama70b-eagle3"]


def test_the_demo_server_is_a_tp8_target_on_all_eight_gpus(tmp_path):
    _ws, cfg = _demo_server(tmp_path)
    assert cfg.tp_size == 8
    assert cfg.gpus == [0, 1, 2, 3, 4, 5, 6, 7]
    argv = build_argv(cfg, cfg.sglang_version)
    assert argv[argv.index("--tp-size") + 1] == "8"
    # eight H200-sized GPUs with room to spare: preflight finds nothing wrong with the demo
    probe = lambda: [(i, int(141 * GiB), int(139 * GiB)) for i in range(8)]  # noqa: E731
    findings = run_preflight(cfg.model_copy(update={"python": sys.executable}), gpu_probe=probe,
                             port_probe=lambda host, port: True, version=cfg.sglang_version)
    assert [f for f in findings if f.severity == "error"] == []


def test_the_fake_gpus_show_the_demo_server_on_exactly_the_gpus_its_config_names(tmp_path):
    ws, cfg = _demo_server(tmp_path)
    # what the sampler's follow hands the fake: the managed process with its launch spec
    spec = to_process_spec(cfg, ws.logs_dir, cfg.sglang_version)
    managed = SimpleNamespace(name=cfg.name, kind="server", pid=4242, spec=spec)
    nvml = FakeNvml(gpus=8, follow=lambda: [managed])
    nvml.nvmlInit()
    holding = set()
    for i in range(nvml.nvmlDeviceGetCount()):
        procs = nvml.nvmlDeviceGetComputeRunningProcesses(nvml.nvmlDeviceGetHandleByIndex(i))
        if any(p.pid == 4242 for p in procs):
            holding.add(i)
    assert holding == set(cfg.gpus)


def test_every_demo_program_runs_from_the_folder_it_is_started_in(tmp_path):
    """Each demo process is `python -m MODULE …` in its configured folder: that module must be found there
    (a demo module moved, or the folder computed from the wrong place, leaves every demo process FATAL)."""
    import subprocess

    ws = load_workspace(tmp_path / "demo", create_demo=True)
    specs = [s for s in ws.process_specs() if len(s.argv) > 2 and s.argv[1] == "-m"]
    assert {s.name for s in specs} >= {"demo-ticker", "demo-batch"}
    for s in specs:
        r = subprocess.run([s.argv[0], "-c", f"import importlib.util as u, sys; sys.exit(u.find_spec({s.argv[2]!r}) is None)"],
                           cwd=s.cwd, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, f"{s.name}: {s.argv[2]} is not found from {s.cwd}: {r.stderr[-500:]}"
    batch = next(s for s in specs if s.name == "demo-batch")
    r = subprocess.run([*batch.argv[:4], "--seconds", "0.1"], cwd=batch.cwd, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "batch done, exiting with 0" in r.stdout
