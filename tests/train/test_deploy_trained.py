"""The demo's whole loop: the demo workspace as written, its training run of the real tiny trainer (shortened
as the Training page's form would), then ``train deploy`` of the run's checkpoints through the command line to
the demo's simulated server on the trainer's own target, benchmarked with the built-in client.

One seeded training run serves the module; every process the tests start is stopped at the end
(tests/bench/sweep_kit.session)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from backend.flows.demo import DEMO_TINY_SERVER, DEMO_TRAIN, write_demo_workspace
from backend.sglang.config import ServerConfig
from backend.sglang.launch import to_process_spec
from backend.sglang.preflight import run_preflight
from backend.telemetry.attribution import free_memory_by_gpu
from backend.telemetry.sampler import make_workspace_sampler
from backend.flows.deploy import deploy_config, read_state
from specdeck_types.process import ProcState
from state.bench import BenchStore
from tests.bench.sweep_kit import flag, session, wait_until

ROOT = Path(__file__).resolve().parents[2]
DEMO_70B = "demo-llama70b-eagle3"
# the tiny target (backend/flows/tiny/target.py SIZES["tiny"]): hidden 64, 6 layers; EAGLE-3's fc reads three
# aux layers, so the trainer's fc.weight is 64 × 192
TINY_HIDDEN, TINY_LAYERS = 64, 6
# the run shortened to 6 steps, a checkpoint every 3 (the demo data has 200 conversations: 50 steps an epoch)
MAX_STEPS, SAVE_INTERVAL = 6, 3
LOAD = ["--concurrency", "2", "--num-prompts", "6", "--input-len", "32", "--output-len", "24"]
MiB = 1024 ** 2
H200_TOTAL = 143771 * MiB  # what NVML reports for an H200, as the fake GPUs do
HELD_BY_70B = 61 * 1024 * MiB + 512 * MiB  # the fake GPUs' figure for a demo server on each of its GPUs


def _deploy(root: Path, ckpt: Path, state_file: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECDECK_SIM_")}
    return subprocess.run(
        [sys.executable, "-m", "backend.cli", "--workspace", str(root), "train", "deploy", str(ckpt),
         "--server", DEMO_TINY_SERVER, "--builtin", "--state-file", str(state_file), "--ready-timeout", "120",
         "--restore-timeout", "120", *extra],
        cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """The demo workspace as written, with its training run done: 6 steps, checkpoints at 3 and 6."""
    root = tmp_path_factory.mktemp("demo") / "ws"
    write_demo_workspace(root)
    with session(root) as s:
        runs = s.train
        runs.save(runs.config(DEMO_TRAIN).model_copy(update={"max_steps": MAX_STEPS, "save_interval": SAVE_INTERVAL,
                                                             "log_interval": 3, "num_epochs": 1}),
                  actor="t", source="test")
        runs.start(DEMO_TRAIN, actor="t", source="test")

        def ended() -> bool:
            s.sup.poll(sync_probes=True)
            return s.sup.view(DEMO_TRAIN).state == ProcState.EXITED

        wait_until(ended, 180, "the demo training run to end")
        assert s.sup.view(DEMO_TRAIN).exit_code == 0, runs.log_path(DEMO_TRAIN).read_text()[-2000:]
        ckpts = {c.name: Path(c.path) for c in runs.checkpoints(DEMO_TRAIN).checkpoints}
        assert sorted(ckpts) == ["epoch_0_step_3", "epoch_0_step_6"]
        yield SimpleNamespace(root=root, s=s, ckpts=ckpts, target=root / "models" / "tiny-target")


def _servers(root: Path) -> dict[str, ServerConfig]:
    from backend.flows.workspace import load_workspace

    ws = load_workspace(root)
    return {c.name: c for c in (ServerConfig.model_validate(e) for e in ws.config.server)}


def test_the_demo_has_a_server_on_the_trainers_target_and_a_checkpoint_passes_its_preflight(demo):
    cfgs = _servers(demo.root)
    assert list(cfgs) == [DEMO_70B, DEMO_TINY_SERVER]  # the 70B server as it was, and the new one
    tiny = cfgs[DEMO_TINY_SERVER]
    assert Path(tiny.model_path) == demo.target
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        assert (demo.target / name).is_file(), name
    assert (tiny.simulate, tiny.autostart, tiny.tp_size, tiny.gpus) == (True, False, 1, [7])
    assert tiny.speculative.algorithm is None  # no draft until a checkpoint is deployed
    assert tiny.port != cfgs[DEMO_70B].port

    # the fake GPUs as the workspace's own telemetry reads them, with the 70B server and the training run on them
    from backend.flows.workspace import load_workspace

    ws = load_workspace(demo.root)
    big = cfgs[DEMO_70B]
    held = [SimpleNamespace(name=DEMO_70B, kind="server", pid=os.getpid(),
                            spec=to_process_spec(big, ws.logs_dir, big.sglang_version)),
            SimpleNamespace(name=DEMO_TRAIN, kind="training", pid=os.getpid(), spec=demo.s.train.spec(DEMO_TRAIN))]
    sampler = make_workspace_sampler(ws, None, managed=lambda: held)
    gpus = {i: (total, free) for i, total, free in free_memory_by_gpu(sampler.sample_once())}
    total, free = gpus[7]
    assert total == H200_TOTAL and free < H200_TOTAL - HELD_BY_70B  # the 70B server's share is counted

    ckpt = demo.ckpts["epoch_0_step_6"]
    probe = lambda: [(i, t, f) for i, (t, f) in gpus.items()]  # noqa: E731

    def errors(cfg: ServerConfig) -> list[str]:
        found = run_preflight(deploy_config(cfg, ckpt, 3, 1, 4).model_copy(update={"python": sys.executable}),
                              gpu_probe=probe, port_probe=lambda host, port: True, version=cfg.sglang_version)
        return [f"{f.code}: {f.found}" for f in found if f.severity == "error"]

    assert errors(tiny) == []
    # what the new server is for: the 70B server's target refuses the trainer's draft (fc 192 wide, not 3 × 8192)
    assert any(e.startswith("fc-width") for e in errors(big)), errors(big)
    # and the small static pool is what lets it sit beside the 70B server: a large one does not fit
    assert any(e.startswith("gpu-memory: GPU 7") for e in errors(tiny.model_copy(update={"mem_fraction_static": 0.6})))


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_deploy_the_trained_checkpoints_through_the_cli_beside_a_measured_baseline(demo, tmp_path):
    s, root = demo.s, demo.root
    step6, step3 = demo.ckpts["epoch_0_step_6"], demo.ckpts["epoch_0_step_3"]

    # 1. the newest checkpoint, with the baseline measured first at the load given; the server keeps it
    proc = _deploy(root, step6, tmp_path / "first.json", "--measure-baseline", *LOAD)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()[1:]
    assert [ln.split()[0] for ln in lines] == ["DONE"] * 7 + ["SKIPPED"], proc.stdout
    assert f"fc.weight {TINY_HIDDEN}×{3 * TINY_HIDDEN}, 1 layer(s)" in lines[0]  # the trainer's real fc width
    assert lines[1].startswith(f"DONE     Preflight against the server's target: no errors against {demo.target}")
    first = read_state(tmp_path / "first.json")
    assert first.state == "done" and first.label == f"checkpoint {DEMO_TRAIN}/epoch_0_step_6 (epoch 0, step 6)"
    [row] = first.row_objects()
    bench = BenchStore(s.store)
    new, base = bench.get(row.result_id), bench.get(row.baseline_id)
    assert new.label.startswith(f"checkpoint {DEMO_TRAIN}/epoch_0_step_6 (epoch 0, step 6)")
    assert new.server == base.server == DEMO_TINY_SERVER
    assert new.config.draft_model == str(step6) and new.config.algorithm == "EAGLE3"
    assert base.is_baseline and base.config.algorithm in (None, "NONE")
    assert base.label.startswith("baseline measured before deploying checkpoint "
                                 f"{DEMO_TRAIN}/epoch_0_step_6")
    assert new.load.key() == base.load.key() == (2, 32, 24)  # the same load
    assert new.results.completed == 6 and new.accept_len > 1.0
    assert row.speedup == pytest.approx(new.results.output_tok_s / base.results.output_tok_s)
    assert row.previous_id is None  # no other draft measured at this load yet
    s.sup.poll(sync_probes=True)
    v = s.sup.view(DEMO_TINY_SERVER)
    assert v.state == ProcState.RUNNING and flag(v.spec.argv, "--speculative-draft-model-path") == str(step6)
    kept = (root / "specdeck.toml").read_text()
    assert f'draft_model_path = "{step6}"' in kept
    run_before = v.run_id

    # 2. the earlier checkpoint against the stored baseline (its load), then the server put back as it was
    proc = _deploy(root, step3, tmp_path / "second.json", "--restore-after")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"the baseline's load (result #{base.id}): concurrency 2, 6 prompts of 32/24 tokens" in proc.stdout
    second = read_state(tmp_path / "second.json")
    assert second.state == "done" and second.step("baseline").status == "skipped"
    [row2] = second.row_objects()
    new2 = bench.get(row2.result_id)
    assert new2.config.draft_model == str(step3) and new2.load.key() == (2, 32, 24)
    assert row2.baseline_id == base.id
    assert row2.speedup == pytest.approx(new2.results.output_tok_s / base.results.output_tok_s)
    # beside the previous draft: the step-6 checkpoint's row at the same load
    assert row2.previous_id == new.id and row2.previous_draft == str(step6)
    s.sup.poll(sync_probes=True)
    v = s.sup.view(DEMO_TINY_SERVER)
    assert second.restore.startswith("restored") and second.server_left == "previous"
    assert v.state == ProcState.RUNNING and v.run_id != run_before
    assert flag(v.spec.argv, "--speculative-draft-model-path") == str(step6)
    assert (root / "specdeck.toml").read_text() == kept
