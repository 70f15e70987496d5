"""The deploy flow end to end: a checkpoint written by hand (tests/train/ckpt_files.py), a simulated
server under the supervisor, the built-in benchmark client, the state store.

Every server process a test starts is stopped at its end (tests/bench/sweep_kit.session)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from backend.flows.relaunch import relaunch_and_wait
from backend.sim.models import make_draft_dir, make_target_dir
from backend.flows.deploy import DeployRequest, read_state
from backend.flows.deploy_job import run_deploy
from specdeck_types.bench import BenchConfig, BenchFigures, BenchLoad, BenchResult
from specdeck_types.process import ProcState
from state.bench import BenchStore
from tests.bench.sweep_kit import SERVER, flag, session, wait_until, write_workspace
from tests.train.ckpt_files import draft_config, eagle3_tensors, write_checkpoint, write_rank_state

ROOT = Path(__file__).resolve().parents[2]
HIDDEN, LAYERS, VOCAB, DRAFT_VOCAB = 64, 8, 6000, 512
LOAD = dict(concurrency=2, num_prompts=6, input_len=32, output_len=24)
BASELINE_TOK_S = 90.0  # the hand-entered baseline at LOAD
PREVIOUS_TOK_S, PREVIOUS_ACCEPT = 82.3, 2.1  # the previous draft at LOAD


def make_ckpt(run_dir: Path, name: str = "epoch_1_step_40", *, fc_in: int = 3 * HIDDEN, epoch: int = 1,
              step: int = 40) -> Path:
    """A Gen-2 checkpoint of a draft for the 64-wide target (fc_in 192 = 3 aux layers × 64)."""
    return write_checkpoint(run_dir / name, cfg=draft_config(hidden=HIDDEN, vocab=VOCAB, draft_vocab=DRAFT_VOCAB),
                            tensors=eagle3_tensors(hidden=HIDDEN, fc_in=fc_in, draft_vocab=DRAFT_VOCAB, vocab=VOCAB),
                            state=(epoch, step))


def make_ws(base: Path, *, env: dict[str, str] | None = None) -> dict[str, Path]:
    target = make_target_dir(base / "models" / "tiny-target", hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                             vocab_size=VOCAB)
    previous = make_draft_dir(base / "models" / "previous-draft", target_hidden_size=HIDDEN, vocab_size=VOCAB,
                              draft_vocab_size=DRAFT_VOCAB)
    root = write_workspace(base / "ws", target, previous, env=env)
    return {"root": root, "target": target, "previous": previous, "runs": base / "runs"}


def _store_path(root: Path) -> Path:
    from backend.flows.workspace import load_workspace

    return load_workspace(str(root)).store_path


def add_result(root: Path, r: BenchResult) -> int:
    from state import Store

    with Store(_store_path(root)) as st:
        return BenchStore(st).insert(r).result.id


def hand_rows(ws: dict[str, Path]) -> tuple[int, int]:
    """The baseline and the previous draft at LOAD, as if imported from a CSV an hour ago."""
    base = add_result(ws["root"], BenchResult(
        source="import:csv", server=SERVER, config=BenchConfig(target_model=str(ws["target"]), algorithm="NONE"),
        load=BenchLoad(**LOAD), results=BenchFigures(output_tok_s=BASELINE_TOK_S), started_at=time.time() - 3600,
        label="baseline"))
    prev = add_result(ws["root"], BenchResult(
        source="import:csv", server=SERVER,
        config=BenchConfig(target_model=str(ws["target"]), algorithm="EAGLE3", draft_model=str(ws["previous"])),
        load=BenchLoad(**LOAD), results=BenchFigures(output_tok_s=PREVIOUS_TOK_S, accept_len=PREVIOUS_ACCEPT),
        started_at=time.time() - 1800, label="previous draft"))
    return base, prev


def start_server(s) -> str:
    res = relaunch_and_wait(s, SERVER, s.fleet.config(SERVER), actor="t", source="test", timeout_s=120)
    return res.run_id


# --------------------------------------------------------------------------------------------------

@pytest.mark.timeout(300)
def test_cli_deploys_a_checkpoint_and_reports_the_speedup_at_the_baselines_load(tmp_path):
    ws = make_ws(tmp_path)
    ckpt = make_ckpt(ws["runs"] / "tiny-run")
    base_id, prev_id = hand_rows(ws)
    state_file = tmp_path / "deploy-state.json"
    with session(ws["root"]) as s:
        start_server(s)
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPECDECK_SIM_")}
        proc = subprocess.run(
            [sys.executable, "-m", "backend.cli", "--workspace", str(ws["root"]), "train", "deploy", str(ckpt),
             "--server", SERVER, "--steps", "2", "--topk", "1", "--draft-tokens", "3", "--builtin",
             "--state-file", str(state_file), "--ready-timeout", "120"],
            cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        # one line per step, in order; the load came from the stored baseline
        lines = [ln.split()[0] for ln in proc.stdout.splitlines()[1:]]
        assert lines == ["DONE", "DONE", "DONE", "SKIPPED", "DONE", "DONE", "DONE", "SKIPPED"], proc.stdout
        assert f"the baseline's load (result #{base_id}): concurrency 2, 6 prompts of 32/24 tokens" in proc.stdout

        st = read_state(state_file)
        assert st.state == "done" and st.label == "checkpoint tiny-run/epoch_1_step_40 (epoch 1, step 40)"
        [row] = st.row_objects()
        # the new row is stored, labelled with the checkpoint, at the baseline's load
        new = BenchStore(s.store).get(row.result_id)
        assert new.label.startswith("checkpoint tiny-run/epoch_1_step_40 (epoch 1, step 40); built-in client")
        assert new.config.draft_model == str(ckpt) and new.config.algorithm == "EAGLE3"
        assert (new.config.num_steps, new.config.topk, new.config.num_draft_tokens) == (2, 1, 3)
        assert (new.load.concurrency, new.load.num_prompts, new.load.input_len, new.load.output_len) == (2, 6, 32, 24)
        assert new.results.completed == 6 and new.results.output_tok_s > 0 and new.accept_len > 1.0
        # compared with the baseline at the same load and beside the previous draft
        assert row.baseline_id == base_id and row.baseline_tok_s == BASELINE_TOK_S
        assert row.speedup == pytest.approx(new.results.output_tok_s / BASELINE_TOK_S)
        assert row.previous_id == prev_id and row.previous_tok_s == PREVIOUS_TOK_S
        assert row.previous_draft == str(ws["previous"]) and row.previous_speedup == pytest.approx(82.3 / 90.0)
        # break-even accept_len = a round's cost in plain steps = (2 × accept / tok/s) / (2 / 90)
        assert row.break_even_accept_len == pytest.approx(new.accept_len * 90.0 / new.results.output_tok_s)
        assert "Break-even is accept_len" in row.explanation
        # --keep: the server serves the checkpoint, and its workspace entry says so
        s.sup.poll(sync_probes=True)
        v = s.sup.view(SERVER)
        assert v.state == ProcState.RUNNING
        assert flag(v.spec.argv, "--speculative-draft-model-path") == str(ckpt)
        assert f'draft_model_path = "{ckpt}"' in (ws["root"] / "specdeck.toml").read_text()
        assert st.server_left == "checkpoint" and st.restore.startswith("kept")


@pytest.mark.timeout(240)
def test_a_checkpoint_with_the_wrong_fc_width_fails_at_preflight_and_leaves_the_server_alone(tmp_path):
    ws = make_ws(tmp_path)
    ckpt = make_ckpt(ws["runs"] / "other-target", fc_in=3 * 32)  # trained for a 32-wide target
    hand_rows(ws)
    with session(ws["root"]) as s:
        run_id = start_server(s)
        text = (ws["root"] / "specdeck.toml").read_text()
        st = run_deploy(s, DeployRequest(checkpoint=str(ckpt), server=SERVER), tmp_path / "state.json",
                        actor="t", source="test")
        assert (st.state, st.failed_step) == ("failed", "preflight")
        assert "fc-width" in st.error and "takes 96 inputs" in st.error and "= 192" in st.error
        assert "was not touched" in st.error
        assert [x.status for x in st.steps] == ["done", "failed", "pending", "pending", "pending", "pending",
                                                "pending", "skipped"]
        assert st.step("restore").message.startswith("not needed")
        v = s.sup.view(SERVER)
        assert v.state == ProcState.RUNNING and v.run_id == run_id  # never restarted
        assert (ws["root"] / "specdeck.toml").read_text() == text
        assert read_state(tmp_path / "state.json").failed_step == "preflight"  # the file says the same


def release_when(hold: Path, cond) -> threading.Thread:
    """A thread that removes the simulator's hold file (SPECDECK_SIM_HOLD) once ``cond()`` holds
    (or after 120 s), so that the servers started after that load as usual."""
    def run() -> None:
        end = time.monotonic() + 120
        while time.monotonic() < end and not cond():
            time.sleep(0.05)
        hold.unlink(missing_ok=True)

    t = threading.Thread(target=run, name="sim-hold-release", daemon=True)
    t.start()
    return t


@pytest.mark.timeout(300)
def test_a_server_that_does_not_come_up_is_restored_to_its_previous_config_and_running(tmp_path):
    # the relaunched server's loading is held (SPECDECK_SIM_HOLD) until the deploy has given up on it
    # after its 1 s; the restored server then loads as usual
    hold = tmp_path / "hold-loading"
    ws = make_ws(tmp_path, env={"SPECDECK_SIM_HOLD": str(hold)})
    ckpt = make_ckpt(ws["runs"] / "tiny-run")
    hand_rows(ws)
    state_file = tmp_path / "state.json"
    with session(ws["root"]) as s:
        run_id = start_server(s)
        original_argv = tuple(s.sup.view(SERVER).spec.argv)
        text = (ws["root"] / "specdeck.toml").read_text()
        hold.touch()
        release = release_when(hold, lambda: (x := read_state(state_file)) is not None
                               and x.step("relaunch").status not in ("pending", "running"))
        st = run_deploy(s, DeployRequest(checkpoint=str(ckpt), server=SERVER, ready_timeout_s=1.0,
                                         restore_timeout_s=120.0, mode="builtin"),
                        state_file, actor="t", source="test")
        release.join(5)
        assert (st.state, st.failed_step) == ("failed", "relaunch")
        assert "was not ready after 1 s" in st.error
        assert st.step("restore").status == "done" and st.restore.startswith("restored")
        assert st.server_left == "previous" and st.step("benchmark").status == "pending"
        v = s.sup.view(SERVER)
        assert v.state == ProcState.RUNNING and v.run_id != run_id and tuple(v.spec.argv) == original_argv
        assert (ws["root"] / "specdeck.toml").read_text() == text
        assert BenchStore(s.store).count() == 2  # nothing stored for the failed deploy


@pytest.mark.timeout(400)
def test_measure_the_missing_baseline_first_then_restore_after(tmp_path):
    ws = make_ws(tmp_path)
    ckpt = make_ckpt(ws["runs"] / "tiny-run", name="epoch_2_step_80", epoch=2, step=80)
    with session(ws["root"]) as s:
        start_server(s)
        original_argv = tuple(s.sup.view(SERVER).spec.argv)
        st = run_deploy(s, DeployRequest(checkpoint=str(ckpt), server=SERVER, concurrency=(2,), num_prompts=6,
                                         input_len=32, output_len=24, measure_baseline=True, after="restore",
                                         mode="builtin", ready_timeout_s=120),
                        tmp_path / "state.json", actor="t", source="test")
        assert st.state == "done", (st.failed_step, st.error)
        assert [x.status for x in st.steps] == ["done"] * 8
        [row] = st.row_objects()
        bench = BenchStore(s.store)
        base, new = bench.get(row.baseline_id), bench.get(row.result_id)
        assert base.is_baseline and base.label.startswith("baseline measured before deploying checkpoint "
                                                          "tiny-run/epoch_2_step_80 (epoch 2, step 80)")
        assert base.load.key() == new.load.key() == (2, 32, 24)
        assert row.speedup == pytest.approx(new.results.output_tok_s / base.results.output_tok_s)
        assert row.previous_id is None  # no other draft was measured at this load
        v = s.sup.view(SERVER)
        assert v.state == ProcState.RUNNING and tuple(v.spec.argv) == original_argv
        assert st.restore.startswith("restored") and st.server_left == "previous"


def test_no_baseline_and_no_load_is_a_clear_message_and_touches_nothing(tmp_path):
    ws = make_ws(tmp_path)
    ckpt = make_ckpt(ws["runs"] / "tiny-run")
    with session(ws["root"]) as s:
        st = run_deploy(s, DeployRequest(checkpoint=str(ckpt), server=SERVER), tmp_path / "state.json",
                        actor="t", source="test")
        assert (st.state, st.failed_step) == ("failed", "load")
        assert f"No baseline of server {SERVER} is stored" in st.error and "--measure-baseline" in st.error
        assert not s.sup.view(SERVER).live


def test_a_gen3_runtime_checkpoint_stops_at_inspection_with_the_export_command(tmp_path):
    ws = make_ws(tmp_path)
    run = ws["runs"] / "gen3"
    ckpt = run / "myrun-step100"
    ckpt.mkdir(parents=True)
    write_rank_state(ckpt / "training_state_rank0.pt")
    with session(ws["root"]) as s:
        st = run_deploy(s, DeployRequest(checkpoint=str(ckpt), server=SERVER), tmp_path / "state.json",
                        actor="t", source="test")
        assert (st.state, st.failed_step) == ("failed", "inspect")
        assert "specforge export --to sglang" in st.error


@pytest.mark.timeout(300)
def test_sigterm_while_waiting_for_the_server_puts_the_previous_config_back(tmp_path):
    # the relaunched server's loading is held (SPECDECK_SIM_HOLD) until the deploy has been sent SIGTERM
    # while waiting for it; the restored server then loads as usual
    hold = tmp_path / "hold-loading"
    ws = make_ws(tmp_path, env={"SPECDECK_SIM_HOLD": str(hold)})
    ckpt = make_ckpt(ws["runs"] / "tiny-run")
    hand_rows(ws)
    state_file = tmp_path / "state.json"
    with session(ws["root"]) as s:
        start_server(s)
        original_argv = tuple(s.sup.view(SERVER).spec.argv)
        text = (ws["root"] / "specdeck.toml").read_text()
        hold.touch()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPECDECK_SIM_")}
        proc = subprocess.Popen(
            [sys.executable, "-m", "backend.cli", "--workspace", str(ws["root"]), "train", "deploy", str(ckpt),
             "--server", SERVER, "--builtin", "--state-file", str(state_file)],
            cwd=str(ROOT), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            wait_until(lambda: (x := read_state(state_file)) is not None and x.step("relaunch").status == "running"
                       and "is starting" in x.detail, 120, "the deploy waiting for the relaunched server")
            proc.send_signal(signal.SIGTERM)
            hold.unlink()
            out, err = proc.communicate(timeout=180)
        finally:
            hold.unlink(missing_ok=True)
            if proc.poll() is None:
                proc.terminate()
                proc.wait(30)
        assert proc.returncode == 1, out + err
        st = read_state(state_file)
        assert (st.state, st.failed_step) == ("stopped", "relaunch")
        assert st.restore.startswith("restored") and st.step("restore").status == "done"
        s.sup.poll(sync_probes=True)
        v = s.sup.view(SERVER)
        assert v.live and tuple(v.spec.argv) == original_argv
        assert (ws["root"] / "specdeck.toml").read_text() == text


@pytest.mark.timeout(300)
def test_a_benchmark_that_cannot_run_fails_at_its_step_and_the_server_gets_its_config_back(tmp_path):
    ws = make_ws(tmp_path)
    ckpt = make_ckpt(ws["runs"] / "tiny-run")
    hand_rows(ws)
    with session(ws["root"]) as s:
        start_server(s)
        original_argv = tuple(s.sup.view(SERVER).spec.argv)
        text = (ws["root"] / "specdeck.toml").read_text()
        # SGLang's own benchmark asked for, in a serving environment without sglang (the simulator's)
        st = run_deploy(s, DeployRequest(checkpoint=str(ckpt), server=SERVER, mode="sglang", ready_timeout_s=120),
                        tmp_path / "state.json", actor="t", source="test")
        assert (st.state, st.failed_step) == ("failed", "benchmark")
        assert "has no sglang" in st.error
        assert st.step("relaunch").status == "done" and st.step("compare").status == "pending"
        assert st.step("restore").status == "done" and st.restore.startswith("restored")
        v = s.sup.view(SERVER)
        assert v.state == ProcState.RUNNING and tuple(v.spec.argv) == original_argv
        assert (ws["root"] / "specdeck.toml").read_text() == text
        assert BenchStore(s.store).count() == 2
