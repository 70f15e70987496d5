"""Training runs through the runtime's supervisor, with real processes: start → the trainer runs and writes
its log (which the training log reader follows) → stop (SIGTERM) → resume, refused until confirmed on
SpecForge 0.2.0, then started with ``--resume``.

The training environment is made here: a SpecForge checkout whose ``scripts/train_eagle3.py`` is a stand-in
trainer printing Gen-2's log lines, and a ``python`` that runs ``-m torch.distributed.run ... SCRIPT`` as one
rank of that script (what torchrun does with one process), so no rendezvous port is opened.
"""

from __future__ import annotations

import io
import json
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

from backend.cli import main as cli_main
from backend.runtime import Runtime
from backend.train.generation import clear_cache
from backend.train.reader import TrainLogReader
from backend.train.runs import ResumeNeedsConfirmation
from backend.flows.workspace import load_workspace
from specdeck_types.process import Kind, ProcState as S
from state import audit
from tests.supervisor.conftest import _end_group, wait_for
from tests.train.ckpt_files import write_checkpoint

STANDIN = textwrap.dedent("""\
    import argparse, json, os, re, signal, sys, time
    ap = argparse.ArgumentParser()
    for flag in ("--target-model-path", "--train-data-path", "--output-dir", "--num-epochs", "--batch-size",
                 "--learning-rate", "--max-length", "--ttt-length", "--save-interval"):
        ap.add_argument(flag)
    ap.add_argument("--resume", action="store_true")
    a = ap.parse_args()
    def term(*_):
        print("got SIGTERM, leaving", flush=True)
        sys.exit(143)
    signal.signal(signal.SIGTERM, term)
    out = a.output_dir
    # a checkpoint folder by SpecForge's own test of its name: a torn one renamed NAME.torn is none
    done = sorted(int(m.group(1)) for d in os.listdir(out) if (m := re.fullmatch(r"epoch_0_step_(\\d+)", d)))
    start = done[-1] if (a.resume and done) else 0
    print(f"rank {os.environ.get('RANK')}: resume={a.resume} lr={a.learning_rate}", flush=True)
    print(f"Starting training from epoch:0          step:{start}", flush=True)
    step = start
    while True:
        step += 1
        sys.stderr.write(f"\\rTraining Epoch 0:  {step}%|#| {step}/100 [00:0{step % 10}<00:10,  1.00it/s, "
                         f"loss={5 / step:.2f}, acc={1 - 1 / (step + 1):.2f}, time=0.05s]")
        sys.stderr.flush()
        if step % 2 == 0:
            d = os.path.join(out, f"epoch_0_step_{step}")
            os.makedirs(d, exist_ok=True)
            # a whole (if empty) checkpoint: config.json and a safetensors file of no tensors
            open(os.path.join(d, "config.json"), "w").write("{}")
            open(os.path.join(d, "model.safetensors"), "wb").write(b"\\x02" + b"\\x00" * 7 + b"{}")
            print(f"\\nEval - Step {step} [{step + 1}/1], position 0,  Acc: {1 - 1 / (step + 1):.2f}", flush=True)
            print(f"Saved model configuration to {d}", flush=True)
        time.sleep(0.05)
""")

FAKE_PYTHON = """#!/bin/sh
# the training environment's python: torchrun with one process runs the script as rank 0
if [ "$1" = "-m" ] && [ "$2" = "torch.distributed.run" ]; then
  shift 5
  export RANK=0 LOCAL_RANK=0 WORLD_SIZE=1
fi
exec {real} "$@"
"""


def _config(tmp_path: Path, version: str) -> Path:
    sf = tmp_path / "SpecForge"
    (sf / "scripts").mkdir(parents=True)
    (sf / "scripts" / "train_eagle3.py").write_text(STANDIN)
    (sf / "version.txt").write_text(version + "\n")
    py = tmp_path / "env" / "bin" / "python"
    py.parent.mkdir(parents=True)
    py.write_text(FAKE_PYTHON.format(real=sys.executable))
    py.chmod(0o755)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "data.jsonl").write_text('{"id": "1", "conversations": []}\n')
    (ws / "specdeck.toml").write_text(textwrap.dedent(f"""\
        [workspace]
        name = "train-test"

        [telemetry]
        source = "fake"

        # a Gen-2 run on the stand-in trainer
        [[train]]
        name = "sf"
        python = "{py}"
        specforge_dir = "{sf}"
        target_model = "/models/target"
        train_data = "data.jsonl"
        learning_rate = 2e-4
        stop_grace_s = 5
        """))
    return ws


@pytest.fixture
def rt(tmp_path):
    clear_cache()
    ws = _config(tmp_path, "0.2.0")
    runtime = Runtime(load_workspace(ws), background=False)
    yield runtime
    sup = runtime.supervisor
    try:
        sup.poll()
        v = sup.view("sf")
        if v is not None and v.live:
            sup.stop("sf", actor="test", source="teardown", wait=True)
    finally:
        runtime.close()
        for d in (ws / "run").iterdir():
            ident = d / "identity.json"
            if ident.exists():
                rec = json.loads(ident.read_text())
                _end_group(int(rec["pid"]), rec.get("create_time"))
        clear_cache()


def _log(rt) -> str:
    p = rt.train.log_path("sf")
    return p.read_text(errors="replace") if p.exists() else ""


def _audits(rt, target: str) -> list[tuple[str, str, str]]:
    return [(r.action, r.outcome, r.actor) for r in audit.recent(rt.store, limit=100) if r.target == target][::-1]


@pytest.mark.timeout(120)
def test_start_stop_resume_with_the_020_warning(rt):
    sup = rt.supervisor
    assert rt.train.names() == ["sf"]
    spec = next(s for s in rt.all_specs() if s.name == "sf")
    assert spec.kind == Kind.TRAINING and spec.argv[2:4] == ("torch.distributed.run", "--standalone")
    assert rt.train.generation("sf").label == "Gen-2 (detected, SpecForge 0.2.0)"

    rt.start("sf", actor="alice", source="test")  # the runtime routes a run to TrainRuns
    wait_for(lambda: "Saved model configuration" in _log(rt) and "step_4" in _log(rt), timeout_s=60, poll=sup.poll)
    assert sup.view("sf").state == S.RUNNING
    assert "rank 0: resume=False lr=0.0002" in _log(rt)

    reader = TrainLogReader(rt.train.log_path("sf"))
    recs = reader.poll().records
    steps = [r.step for r in recs if r.kind == "metrics" and r.metrics.get("acc_0") is not None]
    assert steps[:2] == [2, 4]
    assert any(r.kind == "start" for r in recs)

    rt.train.stop("sf", actor="alice", source="test")
    wait_for(lambda: sup.view("sf").state == S.EXITED, timeout_s=30, poll=sup.poll)
    assert "got SIGTERM, leaving" in _log(rt)
    # its handler's exit, or SIGTERM itself when a second SIGTERM (to the group and to the process) lands
    # while the interpreter is ending; never SIGKILL (-9)
    assert sup.view("sf").exit_code in (143, -15)

    warning = rt.train.resume_warning("sf")
    assert warning.startswith("SpecForge 0.2.0's --resume silently starts over")
    with pytest.raises(ResumeNeedsConfirmation) as ei:
        rt.train.resume("sf", actor="alice", source="test")
    assert ei.value.warning == warning
    sup.poll()
    assert sup.view("sf").state == S.EXITED  # nothing was started

    rt.train.resume("sf", actor="alice", source="test", confirmed=True)
    wait_for(lambda: "resume=True" in _log(rt), timeout_s=60, poll=sup.poll)
    assert sup.view("sf").spec.argv[-1] == "--resume"
    rt.train.stop("sf", actor="alice", source="test")
    wait_for(lambda: sup.view("sf").state == S.EXITED, timeout_s=30, poll=sup.poll)
    assert _audits(rt, "sf") == [
        ("start", "ok", "alice"), ("stop", "ok", "alice"), ("resume", "refused", "alice"),
        ("resume-confirmed", "ok", "alice"), ("start", "ok", "alice"), ("stop", "ok", "alice")]


@pytest.mark.timeout(60)
def test_resume_of_a_fixed_version_with_checkpoints_needs_no_confirmation(tmp_path):
    clear_cache()
    ws = _config(tmp_path, "0.3.0")
    out = write_checkpoint(ws / "outputs" / "train" / "sf" / "epoch_0_step_2")
    runtime = Runtime(load_workspace(ws), background=False)
    try:
        assert runtime.train.resume_warning("sf") == ""
        (ws.parent / "SpecForge" / "version.txt").write_text("0.2.0\n")
        assert "0.2.0" in runtime.train.resume_warning("sf")
        shutil.rmtree(out)
        (ws.parent / "SpecForge" / "version.txt").write_text("0.3.0\n")
        assert runtime.train.resume_warning("sf") == (f"There is no checkpoint in {ws / 'outputs/train/sf'} yet: a "
                                                      "resume starts from step 0.")
    finally:
        runtime.close()
        clear_cache()


def test_cli_command_and_unconfirmed_resume(tmp_path):
    clear_cache()
    ws = _config(tmp_path, "0.2.0")
    out, err = io.StringIO(), io.StringIO()
    assert cli_main(["--workspace", str(ws), "train", "command", "sf"], out, err) == 0
    py, sf = tmp_path / "env/bin/python", tmp_path / "SpecForge"
    assert out.getvalue().splitlines()[:4] == [
        "# sf: Gen-2 (detected, SpecForge 0.2.0)",
        f"cd {sf}",
        "export PYTHONUNBUFFERED=1",
        f"{py} -m torch.distributed.run --standalone --nproc_per_node 1 {sf}/scripts/train_eagle3.py "
        f"--target-model-path /models/target --train-data-path {ws}/data.jsonl --output-dir {ws}/outputs/train/sf "
        "--num-epochs 10 --batch-size 1 --learning-rate 0.0002 --max-length 2048 --ttt-length 7"]
    out, err = io.StringIO(), io.StringIO()
    assert cli_main(["--workspace", str(ws), "train", "resume", "sf"], out, err) == 1
    assert out.getvalue().startswith("warning: SpecForge 0.2.0's --resume silently starts over")
    assert err.getvalue() == ("error: sf was not resumed: read the warning above, then run again with --yes to "
                              "resume anyway\n")
    out = io.StringIO()
    assert cli_main(["--workspace", str(ws), "train", "runs", "--json"], out, io.StringIO()) == 0
    row = json.loads(out.getvalue())[0]
    assert (row["name"], row["generation"], row["version"], row["state"]) == ("sf", "gen2", "0.2.0", "NEVER")
    clear_cache()


GEN3_CLI = textwrap.dedent("""\
    import sys, yaml
    args = sys.argv[1:]
    assert args[:2] == ["train", "--config"], args
    doc = yaml.safe_load(open(args[2]))
    print(f"run_id={doc['run_id']} nproc={doc['deployment']['trainer']['nproc_per_node']} overrides={args[3:]}",
          flush=True)
    print("step 10: {'loss': 2.5, 'acc_0': 0.41, 'acceptance_rate_0': 0.38, 'lr': 0.0001}", flush=True)
""")


@pytest.mark.timeout(120)
def test_gen3_start_writes_the_yaml_and_runs_the_environments_specforge(tmp_path):
    from tests.train.test_generation import make_venv

    clear_cache()
    py = make_venv(tmp_path / "venv", version="0.2.0", cli=True, console_script=True)
    # the console script: the stand-in CLI, run by the dashboard's own python (which has PyYAML)
    (tmp_path / "venv" / "bin" / "specforge").write_text(f"#!{sys.executable}\n" + GEN3_CLI)
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "specdeck.toml").write_text(textwrap.dedent(f"""\
        [workspace]
        name = "g3"
        [telemetry]
        source = "fake"
        [[train]]
        name = "g3"
        python = "{py}"
        target_model = "/models/t"
        train_data = "/data/t.jsonl"
        gpus = [0, 1]
        capture_servers = ["http://127.0.0.1:30000"]
        """))
    runtime = Runtime(load_workspace(ws), background=False)
    sup = runtime.supervisor
    try:
        cmd = runtime.train.command("g3")
        assert cmd.generation.label == "Gen-3 (detected, SpecForge 0.2.0)"
        assert cmd.argv == (str(tmp_path / "venv/bin/specforge"), "train", "--config",
                            str(ws / "outputs/train/g3.yaml"))
        assert not Path(cmd.yaml_path).exists()
        runtime.train.start("g3", actor="bob", source="test")
        assert Path(cmd.yaml_path).read_text() == cmd.yaml_text  # written before the start
        wait_for(lambda: sup.view("g3").state == S.EXITED, timeout_s=60, poll=sup.poll)
        log = runtime.train.log_path("g3").read_text()
        assert "run_id=g3 nproc=2 overrides=[]" in log
        assert sup.view("g3").exit_code == 0
        recs = TrainLogReader(runtime.train.log_path("g3")).poll().records
        m = next(r for r in recs if r.kind == "metrics")
        assert (m.generation, m.step, m.metrics["acc_0"]) == (3, 10, 0.41)

        # no checkpoint yet: a resume is confirmed first (there is no 0.2.0 warning for Gen-3)
        warning = runtime.train.resume_warning("g3")
        assert warning == f"There is no checkpoint in {ws / 'outputs/train/g3'} yet: a resume starts from step 0."
        runtime.train.resume("g3", actor="bob", source="test", confirmed=True)
        wait_for(lambda: sup.view("g3").state == S.EXITED and "overrides=['training.resume_from=" in
                 runtime.train.log_path("g3").read_text(), timeout_s=60, poll=sup.poll)
        assert f"overrides=['training.resume_from={ws}/outputs/train/g3/g3-latest']" in \
            runtime.train.log_path("g3").read_text()
    finally:
        runtime.close()
        clear_cache()


@pytest.mark.timeout(120)
def test_cli_start_and_stop(tmp_path):
    clear_cache()
    ws = _config(tmp_path, "0.3.0")
    log = ws / "logs" / "sf.log"
    out = io.StringIO()
    try:
        assert cli_main(["--workspace", str(ws), "train", "start", "sf"], out, io.StringIO()) == 0
        assert out.getvalue() == f"sf: STARTING\nlog: {log}\n"  # the pid is known once the wrapper reports it
        wait_for(lambda: log.exists() and "Saved model configuration" in log.read_text(), timeout_s=60)
        out = io.StringIO()
        assert cli_main(["--workspace", str(ws), "train", "stop", "sf"], out, io.StringIO()) == 0
        assert out.getvalue().startswith("sf: EXITED")
        assert "got SIGTERM, leaving" in log.read_text()
        from state import Store

        store = Store(ws / "state.db")
        try:
            rows = [(r.action, r.source, r.outcome) for r in audit.recent(store, target="sf")][::-1]
        finally:
            store.close()
        assert rows == [("start", "cli", "ok"), ("stop", "cli", "ok")]
    finally:
        for d in (ws / "run").iterdir() if (ws / "run").exists() else ():
            ident = d / "identity.json"
            if ident.exists():
                rec = json.loads(ident.read_text())
                _end_group(int(rec["pid"]), rec.get("create_time"))
        clear_cache()


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_demo_run_trains_with_the_cpu_trainer_and_resumes(tmp_path):
    """The demo workspace's run, shortened through save() (as the Training page's form edits it), really
    trains: checkpoints in SpecForge's layout, Gen-2 lines the reader parses, and a resume that continues."""
    from backend.flows.demo import DEMO_TRAIN, write_demo_workspace

    root = tmp_path / "demo"
    write_demo_workspace(root)
    text = (root / "specdeck.toml").read_text()
    # this test needs none of the demo's other processes and servers
    (root / "specdeck.toml").write_text(text.replace("autostart = true", "autostart = false"))
    runtime = Runtime(load_workspace(root), background=False)
    sup = runtime.supervisor
    try:
        runs = runtime.train
        assert DEMO_TRAIN in runs.names()
        cfg = runs.config(DEMO_TRAIN)
        runs.save(cfg.model_copy(update={"max_steps": 4, "save_interval": 2, "log_interval": 2, "num_epochs": 1}),
                  actor="carol", source="test")
        assert "max_steps = 4\n" in (root / "specdeck.toml").read_text()
        argv = runs.command(DEMO_TRAIN).argv
        assert argv[1:4] == ("-m", "backend.flows.tiny", "train")
        assert argv[argv.index("--max-num-steps") + 1] == "4"

        runs.start(DEMO_TRAIN, actor="carol", source="test")
        wait_for(lambda: sup.view(DEMO_TRAIN).state == S.EXITED, timeout_s=300, interval_s=0.5, poll=sup.poll)
        log = runs.log_path(DEMO_TRAIN).read_text()
        assert sup.view(DEMO_TRAIN).exit_code == 0, log[-2000:]
        names = [c.name for c in runs.checkpoints(DEMO_TRAIN).checkpoints]
        assert names == ["epoch_0_step_2", "epoch_0_step_4"]
        reader = TrainLogReader(runs.log_path(DEMO_TRAIN))
        recs = reader.poll().records + reader.flush()
        assert reader.stats.unparsed == 0
        assert {r.step for r in recs if r.kind == "metrics" and "acc_0" in r.metrics} == {2, 4}

        assert runs.resume_warning(DEMO_TRAIN) == ""  # its own resume continues; checkpoints are there
        runs.save(runs.config(DEMO_TRAIN).model_copy(update={"max_steps": 6}), actor="carol", source="test")
        runs.resume(DEMO_TRAIN, actor="carol", source="test")
        wait_for(lambda: sup.view(DEMO_TRAIN).state == S.EXITED, timeout_s=300, interval_s=0.5, poll=sup.poll)
        log = runs.log_path(DEMO_TRAIN).read_text()
        assert sup.view(DEMO_TRAIN).exit_code == 0, log[-2000:]
        assert "Starting training from epoch:0          step:4" in log
        assert [c.name for c in runs.checkpoints(DEMO_TRAIN).checkpoints][-1] == "epoch_0_step_6"
    finally:
        v = sup.view(DEMO_TRAIN)
        if v is not None and v.live:
            sup.stop(DEMO_TRAIN, actor="test", source="teardown", wait=True)
        runtime.close()


def test_a_run_added_to_the_file_is_registered_at_the_next_reload(tmp_path):
    clear_cache()
    ws = _config(tmp_path, "0.3.0")
    runtime = Runtime(load_workspace(ws), background=False)
    try:
        assert runtime.supervisor.view("sf").state == S.NEVER
        assert runtime.supervisor.view("second") is None
        cfg = ws / "specdeck.toml"
        cfg.write_text(cfg.read_text() + textwrap.dedent("""
            [[train]]
            name = "second"
            generation = "gen2"
            entry = "module:backend.flows.tiny train"
            target_model = "/models/t"
            train_data = "/data/t.jsonl"
            """))
        assert runtime.maybe_reload()
        v = runtime.supervisor.view("second")
        assert (v.state, v.kind, v.spec.argv[1:4]) == (S.NEVER, Kind.TRAINING, ("-m", "backend.flows.tiny", "train"))
        assert v.log_path == str(ws / "logs" / "second.log")
    finally:
        runtime.close()
        clear_cache()


@pytest.mark.timeout(120)
def test_restart_after_a_resume_starts_without_resume(rt):
    sup = rt.supervisor
    out = rt.train.output_dir("sf")
    write_checkpoint(out / "epoch_0_step_2")
    (rt.workspace.root.parent / "SpecForge" / "version.txt").write_text("0.3.0\n")
    rt.train.resume("sf", actor="dave", source="test")
    wait_for(lambda: "resume=True" in _log(rt), timeout_s=60, poll=sup.poll)
    assert "Starting training from epoch:0          step:2" in _log(rt)
    rt.restart("sf", actor="dave", source="test")  # the Processes page's Restart
    wait_for(lambda: "resume=False" in _log(rt), timeout_s=60, poll=sup.poll)
    assert sup.view("sf").spec.argv[-1] != "--resume"


def test_command_unpacks_as_argv_env_yaml_generation_notes(tmp_path):
    from backend.train.runs import TrainRuns

    clear_cache()
    ws = load_workspace(_config(tmp_path, "0.2.0"))
    argv, env, yaml_text, gen, notes = TrainRuns(ws, supervisor=None).command("sf")
    assert argv[-2:] == ("--ttt-length", "7") and env == {"PYTHONUNBUFFERED": "1"} and yaml_text is None
    assert (gen.generation, gen.version) == ("gen2", "0.2.0")
    assert notes[-2:] == ("1 process(es): data parallel 1 × tensor parallel 1",
                          "no draft_config: the draft's config is derived from the target")
    clear_cache()


def test_save_writes_what_the_config_sets_and_keeps_the_rest(tmp_path):
    from backend.train.config import TrainRunConfig
    from backend.train.runs import TrainRuns

    clear_cache()
    root = _config(tmp_path, "0.3.0")
    runs = TrainRuns(load_workspace(root), supervisor=None)
    before = (root / "specdeck.toml").read_text()
    # a form that knows only some fields: the others (python, specforge_dir, stop_grace_s) stay
    runs.save(TrainRunConfig(name="sf", target_model="/models/other", train_data="data.jsonl", max_steps=None,
                             learning_rate=5e-5), actor="erin", source="test")
    after = (root / "specdeck.toml").read_text()
    assert after == before.replace('target_model = "/models/target"', 'target_model = "/models/other"').replace(
        "learning_rate = 2e-4", "learning_rate = 5e-05")
    assert runs.config("sf").specforge_dir == str(tmp_path / "SpecForge")
    clear_cache()
