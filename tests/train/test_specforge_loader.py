"""Every Gen-3 YAML Specdeck writes loads in SpecForge's own loader, and preflight asks SpecForge itself.

The loader is the release on the package index (``specforge==0.2.0``, pinned in
requirements-specforge.txt), installed without its dependencies into ``.venv-specforge`` by scripts/test,
which names its python in SPECDECK_SPECFORGE_PYTHON: there (and under CI) a missing or broken environment
fails these tests; run elsewhere without it, they are skipped with the reason.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from backend.train import specforge_check as sc
from backend.train.command import CommandError, build_command
from backend.train.config import TrainRunConfig
from backend.train.generation import EnvProbe, GenerationInfo

REPO = Path(__file__).resolve().parents[2]
ROOT = Path("/ws")
OUT = Path("/ws/outputs")

TRACKERS = {
    "none": {},
    "tensorboard": {},
    "wandb": {"project": "specforge-qwen", "run_name": "qwen-eagle3", "offline": True, "wandb_dir": "wandb"},
    "swanlab": {"project": "specforge-qwen", "run_name": "qwen-eagle3"},
    "mlflow": {"mlflow_tracking_uri": "http://127.0.0.1:5000", "mlflow_experiment_name": "eagle3",
               "run_name": "qwen-eagle3"},
}


@pytest.fixture(scope="module")
def specforge_python() -> str:
    """The python of .venv-specforge, whose specforge.config must import."""
    named = os.environ.get("SPECDECK_SPECFORGE_PYTHON")
    path = Path(named or REPO / ".venv-specforge" / "bin" / "python")
    if not path.exists():
        msg = (f"SpecForge's loader environment is missing: {path} (scripts/test builds .venv-specforge from "
               "requirements-specforge.txt)")
        if named or os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    r = subprocess.run([str(path), "-c", "import specforge.config, importlib.metadata as m; "
                                         "print(m.version('specforge'))"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"{path} cannot import specforge.config: {r.stderr.strip()[-500:]}"
    assert r.stdout.strip() == "0.2.0"
    return str(path)


def _config(mode: str, tracker: str, **kw) -> TrainRunConfig:
    d = dict(name=f"qwen-{mode}-{tracker}", python="/venv/bin/python", generation="gen3",
             target_model="Qwen/Qwen3-8B", draft_config="/opt/SpecForge/configs/qwen3-8b-eagle3.json",
             train_data="/d/regen.jsonl", chat_template="qwen", num_epochs=2, max_steps=1000, batch_size=2,
             learning_rate=5e-5, max_length=4096, save_interval=100, log_interval=10, seed=0, gpus=[0, 1],
             tracker={"report_to": tracker, **TRACKERS[tracker]})
    if mode == "online":
        d["capture_servers"] = ["http://127.0.0.1:30000"]
    else:
        d["train_hidden_states"] = "/d/hidden-states"
    d.update(kw)
    return TrainRunConfig.model_validate(d)


def _emitted():
    """(label, yaml_text, overrides) of every Gen-3 command: online and offline, with and without resume,
    each tracker."""
    out = []
    for mode, resume, tracker in itertools.product(("online", "offline"), (False, True), TRACKERS):
        cmd = build_command(_config(mode, tracker), "gen3", root=ROOT, outputs_dir=OUT,
                            console_script="/venv/bin/specforge", resume=resume)
        overrides, unknown = sc.gen3_overrides(cmd.argv)
        assert not unknown
        assert bool(overrides) == resume
        out.append((f"{mode}/{'resume' if resume else 'start'}/{tracker}", cmd.yaml_text, overrides))
    return out


# Loads each document with SpecForge's load_config in one process: one line per document.
_LOAD_ALL = textwrap.dedent("""\
    import json, sys, tempfile, os
    from specforge.config import load_config
    for label, text, overrides in json.load(sys.stdin):
        fd, path = tempfile.mkstemp(suffix=".yaml")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        try:
            cfg = load_config(path, overrides)
            print(json.dumps([label, "ok", cfg.deployment.mode, cfg.tracking.model_dump(exclude_defaults=True),
                              cfg.training.resume_from]))
        except Exception as exc:
            print(json.dumps([label, "rejected", str(exc), None, None]))
        finally:
            os.unlink(path)
    """)


def _load_all(python: str, docs) -> list[list]:
    r = subprocess.run([python, "-c", _LOAD_ALL], input=json.dumps(docs), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return [json.loads(line) for line in r.stdout.splitlines()]


def test_every_gen3_yaml_specdeck_writes_loads_in_specforges_loader(specforge_python):
    docs = _emitted()
    assert len(docs) == 20
    got = _load_all(specforge_python, docs)
    rejected = [(label, why) for label, status, why, *_ in got if status != "ok"]
    assert rejected == []
    assert len(got) == 20
    by_label = {g[0]: g for g in got}
    # what the loader read back: the mode, the tracker's options under SpecForge's names, the resume target
    assert by_label["online/start/none"][2] == "disaggregated"
    assert by_label["offline/start/none"][2] == "local_colocated"
    assert by_label["online/start/wandb"][3] == {"report_to": "wandb", "wandb_project": "specforge-qwen",
                                                 "wandb_name": "qwen-eagle3", "wandb_offline": True,
                                                 "wandb_dir": "/ws/wandb"}
    assert by_label["offline/start/swanlab"][3] == {"report_to": "swanlab", "swanlab_project": "specforge-qwen",
                                                    "swanlab_name": "qwen-eagle3"}
    assert by_label["online/resume/mlflow"][3] == {"report_to": "mlflow",
                                                   "mlflow_tracking_uri": "http://127.0.0.1:5000",
                                                   "mlflow_experiment_name": "eagle3",
                                                   "mlflow_run_name": "qwen-eagle3"}
    assert by_label["offline/resume/tensorboard"][4] == "/ws/outputs/train/qwen-offline-tensorboard/" \
                                                        "qwen-offline-tensorboard-latest"
    assert by_label["online/start/none"][4] is None


def test_the_loader_refuses_an_online_yaml_without_the_mooncake_backend(specforge_python):
    # what the generator wrote before July 2026's schema: no deployment.disaggregated.backend
    cmd = build_command(_config("online", "none"), "gen3", root=ROOT, outputs_dir=OUT)
    doc = yaml.safe_load(cmd.yaml_text)
    assert doc["deployment"]["disaggregated"]["backend"] == "mooncake"
    del doc["deployment"]["disaggregated"]["backend"]
    shared = yaml.safe_load(cmd.yaml_text)
    shared["deployment"]["disaggregated"].update(backend="shared_dir", store_root="/ws/store")
    got = _load_all(specforge_python, [["no-backend", yaml.safe_dump(doc), []],
                                       ["shared-dir", yaml.safe_dump(shared), []]])
    assert got[0][1] == "rejected" and "deployment.disaggregated.backend" in got[0][2]
    assert "Field required" in got[0][2]
    assert got[1][1] == "rejected"
    assert "online disaggregated training requires deployment.disaggregated.backend=mooncake" in got[1][2]


def _probe(python: str) -> EnvProbe:
    return EnvProbe(python, True, version="0.2.0", package_dir="/site-packages/specforge", cli=True)


def _info() -> GenerationInfo:
    return GenerationInfo(generation="gen3", version="0.2.0", chosen=True)


def test_preflight_asks_specforges_loader_with_the_overrides(specforge_python, tmp_path, monkeypatch):
    sc.clear_cache()
    scratch = tmp_path / "tmp"  # the check's temporary YAMLs go here, and must not stay
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    cfg = _config("online", "wandb", python=specforge_python)
    cmd = build_command(cfg, "gen3", root=ROOT, outputs_dir=OUT, resume=True)
    notes = sc.review(cfg, cmd, _info(), _probe(specforge_python))
    assert notes == (f"SpecForge 0.2.0 load_config ({specforge_python}) accepts the command",)

    # a gen3_yaml that SpecForge refuses: the error is SpecForge's, naming its field
    bad = _config("online", "none", python=specforge_python,
                  gen3_yaml={"deployment": {"disaggregated": {"backend": "shared_dir", "store_root": "/s"}}})
    with pytest.raises(CommandError) as ei:
        sc.review(bad, build_command(bad, "gen3", root=ROOT, outputs_dir=OUT), _info(), _probe(specforge_python))
    (field, why), = ei.value.problems
    assert field == "gen3_yaml"
    assert why.startswith(f"SpecForge 0.2.0 load_config ({specforge_python}) refuses the command: 1 validation "
                          "error for Config")
    assert "online disaggregated training requires deployment.disaggregated.backend=mooncake" in why

    # an override on the command line is loaded with the YAML: a field SpecForge does not have is refused
    typo = _config("offline", "none", python=specforge_python, extra_args=["training.learning_rte=1e-5"])
    with pytest.raises(CommandError, match=r"override path 'training.learning_rte' does not exist"):
        sc.review(typo, build_command(typo, "gen3", root=ROOT, outputs_dir=OUT), _info(),
                  _probe(specforge_python))
    assert list(scratch.iterdir()) == []  # a refusal left its YAML behind, once per check


def test_a_run_whose_python_has_no_specforge_config_is_not_checked_and_says_so(tmp_path):
    sc.clear_cache()
    cfg = _config("offline", "none", python=sys.executable)  # Specdeck's own python: no specforge
    cmd = build_command(cfg, "gen3", root=ROOT, outputs_dir=OUT)
    notes = sc.review(cfg, cmd, _info(), _probe(sys.executable))
    assert len(notes) == 1
    assert notes[0].startswith("the Gen-3 YAML was not checked by SpecForge's loader: cannot import "
                               "specforge.config: ModuleNotFoundError")
    none = sc.review(cfg, cmd, _info(), EnvProbe(sys.executable, True))
    assert none == (f"the Gen-3 YAML was not checked by SpecForge's loader: {sys.executable} has no specforge "
                    "package",)


def test_unknown_specforge_train_options_are_refused():
    cfg = _config("offline", "none", extra_args=["--nproc", "8"])
    cmd = build_command(cfg, "gen3", root=ROOT, outputs_dir=OUT)
    with pytest.raises(CommandError) as ei:
        sc.review(cfg, cmd, _info(), None)
    assert ei.value.problems == [("extra_args", "specforge train's options refuses the command: specforge train "
                                                "takes -c/--config, --role, --node-rank, --plan and "
                                                "section.field=value overrides, not --nproc 8")]
    assert sc.gen3_overrides(("specforge", "train", "--config", "a.yaml", "--role", "producer", "--plan",
                              "training.seed=3")) == (["training.seed=3"], [])


def test_the_mooncake_endpoints_are_named_when_nothing_sets_them():
    cmd = build_command(_config("online", "none"), "gen3", root=ROOT, outputs_dir=OUT)
    assert any(n.startswith("Mooncake endpoints not set here: mooncake_metadata_server (or "
                            "MOONCAKE_METADATA_SERVER), mooncake_master_server_addr (or MOONCAKE_MASTER_SERVER_ADDR)")
               for n in cmd.notes)
    set_ = _config("online", "none", env={"MOONCAKE_METADATA_SERVER": "http://h:8080/metadata"},
                   gen3_yaml={"deployment": {"disaggregated": {"mooncake_master_server_addr": "h:50051"}}})
    assert not any("Mooncake" in n for n in build_command(set_, "gen3", root=ROOT, outputs_dir=OUT).notes)
    assert not any("Mooncake" in n for n in build_command(_config("offline", "none"), "gen3", root=ROOT,
                                                            outputs_dir=OUT).notes)


def test_gen3_eval_interval_needs_eval_hidden_states():
    from backend.train.command import config_problems

    assert config_problems(_config("offline", "none", eval_interval=100)) == [
        ("eval_interval", "Gen-3 evaluates only offline, from prepared hidden states: set "
                          "data.eval_hidden_states_path in gen3_yaml with it, or leave eval_interval out "
                          "(SpecForge's loader refuses one without the other)")]
    assert config_problems(_config("offline", "none", eval_interval=100,
                                   gen3_yaml={"data": {"eval_hidden_states_path": "/d/eval-hs"}})) == []


def test_gen3_eval_yaml_loads(specforge_python):
    cfg = _config("offline", "tensorboard", eval_interval=100, gen3_yaml={"data": {"eval_hidden_states_path": "/e"}})
    cmd = build_command(cfg, "gen3", root=ROOT, outputs_dir=OUT)
    assert _load_all(specforge_python, [["eval", cmd.yaml_text, []]])[0][1] == "ok"
    without = yaml.safe_load(cmd.yaml_text)
    del without["data"]["eval_hidden_states_path"]
    got = _load_all(specforge_python, [["eval", yaml.safe_dump(without), []]])[0]
    assert got[1] == "rejected" and "an eval data source and training.eval_interval must be configured together" \
        in got[2]


# -- through the workspace's runs: review and start ask SpecForge ------------------------------------


def test_a_runs_command_is_refused_in_specforges_words(specforge_python, tmp_path):
    from backend.train.generation import clear_cache, probe_env
    from backend.train.runs import TrainRuns

    clear_cache()
    sc.clear_cache()
    entry = dict(name="g3", python=specforge_python, target_model="/m/t", train_data="/d/t.jsonl",
                 capture_servers=["http://127.0.0.1:30000"])
    ws = SimpleNamespace(root=tmp_path, outputs_dir=tmp_path / "outputs", config=SimpleNamespace(train=[entry]),
                         log_path=lambda name: str(tmp_path / "logs" / f"{name}.log"))
    runs = TrainRuns(ws, supervisor=None, store=None)
    cmd = runs.command("g3")
    assert cmd.generation.generation == "gen3"  # the release on the index has specforge/cli.py
    assert f"SpecForge 0.2.0 load_config ({specforge_python}) accepts the command" in cmd.notes
    entry["gen3_yaml"] = {"training": {"tp_size": 2}}
    with pytest.raises(CommandError, match="the disaggregated online consumer uses every trainer rank for data "
                                           "parallelism"):
        runs.command("g3")
    assert [s.name for s in runs.specs()] == ["g3"]  # building the supervisor's specs does not ask
    assert probe_env(specforge_python).version == "0.2.0"
    clear_cache()
