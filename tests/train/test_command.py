"""The command of a training run for each SpecForge generation, against argv written by hand from the
reference's examples (specforge.md §1)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from backend.train.command import CommandError, build_command, config_problems
from backend.train.config import TrainRunConfig

ROOT = Path("/ws")
OUT = Path("/ws/outputs")
PY = "/venv/bin/python"
SF = "/opt/SpecForge"


def _cmd(generation, resume=False, console_script=None, **kw):
    cfg = TrainRunConfig(**kw)
    return build_command(cfg, generation, root=ROOT, outputs_dir=OUT, resume=resume, console_script=console_script)


def test_target_is_a_hub_id_unless_it_is_a_path(tmp_path):
    from backend.train.command import target_path

    (tmp_path / "models" / "t").mkdir(parents=True)
    assert target_path("meta-llama/Llama-3.1-8B-Instruct", tmp_path) == "meta-llama/Llama-3.1-8B-Instruct"
    assert target_path("models/t", tmp_path) == str(tmp_path / "models" / "t")
    assert target_path("./models/u", tmp_path) == str(tmp_path / "models" / "u")
    assert target_path("/abs/m", tmp_path) == "/abs/m"


def test_gen2_reproduces_the_llama_online_example():
    # examples/run_llama3.1_8b_eagle3_online.sh, NUM_GPUS=1, TP_SIZE=1, ROOT_DIR=/opt/SpecForge
    c = _cmd("gen2", name="llama", python=PY, specforge_dir=SF, target_model="meta-llama/Llama-3.1-8B-Instruct",
             draft_config="/opt/SpecForge/configs/llama3-8B-eagle3.json",
             train_data="/opt/SpecForge/cache/dataset/sharegpt_train.jsonl",
             output_dir="/opt/SpecForge/outputs/llama3-8b-eagle3-sharegpt", num_epochs=10, batch_size=1,
             learning_rate=1e-4, max_length=4096, chat_template="llama3", log_interval=10,
             extra_args=["--build-dataset-num-proc", "64", "--cache-dir", "/opt/SpecForge/cache",
                         "--attention-backend", "sdpa", "--target-model-backend", "sglang",
                         "--sglang-mem-fraction-static", "0.25"])
    assert c.argv == (
        "/venv/bin/python", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1",
        "/opt/SpecForge/scripts/train_eagle3.py",
        "--target-model-path", "meta-llama/Llama-3.1-8B-Instruct",
        "--draft-model-config", "/opt/SpecForge/configs/llama3-8B-eagle3.json",
        "--train-data-path", "/opt/SpecForge/cache/dataset/sharegpt_train.jsonl",
        "--output-dir", "/opt/SpecForge/outputs/llama3-8b-eagle3-sharegpt",
        "--chat-template", "llama3",
        "--num-epochs", "10", "--batch-size", "1", "--learning-rate", "0.0001", "--max-length", "4096",
        "--ttt-length", "7", "--log-interval", "10",
        "--build-dataset-num-proc", "64", "--cache-dir", "/opt/SpecForge/cache", "--attention-backend", "sdpa",
        "--target-model-backend", "sglang", "--sglang-mem-fraction-static", "0.25")
    assert c.env == {"PYTHONUNBUFFERED": "1"}
    assert c.cwd == "/opt/SpecForge" and c.yaml_text is None and c.generation == "gen2"


def test_gen2_eight_gpus_tp8_with_wandb_like_the_qwen_coder_example():
    c = _cmd("gen2", name="coder", python=PY, specforge_dir=SF,
             target_model="Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8", train_data="data/opc_regenerated.jsonl",
             output_dir="outputs/coder", tp_size=8, gpus=[0, 1, 2, 3, 4, 5, 6, 7], num_epochs=10, batch_size=1,
             learning_rate=1e-5, ttt_length=13, max_length=2048, chat_template="qwen", save_interval=20000,
             eval_interval=20000,
             tracker={"report_to": "wandb", "project": "specforge-qwen3-480-coder-fp8",
                      "run_name": "qwen3-coder-480b-a35b-eagle3-tp8-ep2-opc-regen"},
             extra_args=["--sglang-ep-size", "2"])
    assert c.argv == (
        "/venv/bin/python", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "8",
        "/opt/SpecForge/scripts/train_eagle3.py",
        "--target-model-path", "Qwen/Qwen3-Coder-480B-A35B-Instruct-FP8",
        "--train-data-path", "/ws/data/opc_regenerated.jsonl",
        "--output-dir", "/ws/outputs/coder", "--chat-template", "qwen",
        "--num-epochs", "10", "--batch-size", "1", "--learning-rate", "1e-05", "--max-length", "2048",
        "--ttt-length", "13", "--tp-size", "8", "--save-interval", "20000", "--eval-interval", "20000",
        "--report-to", "wandb", "--wandb-project", "specforge-qwen3-480-coder-fp8",
        "--wandb-name", "qwen3-coder-480b-a35b-eagle3-tp8-ep2-opc-regen", "--sglang-ep-size", "2")
    assert c.env == {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7", "PYTHONUNBUFFERED": "1"}
    assert "8 process(es): data parallel 1 × tensor parallel 8" in c.notes


def test_gen2_offline_mlflow_and_resume():
    c = _cmd("gen2", resume=True, name="off", python=PY, specforge_dir=SF, target_model="/m/t",
             train_data="/d/train.jsonl", train_hidden_states="/d/hs", eval_data="/d/eval.jsonl", gpus=[2, 3],
             max_steps=500, seed=0, env={"HF_HOME": "/cache/hf"},
             tracker={"report_to": "mlflow", "mlflow_tracking_uri": "http://127.0.0.1:5000",
                      "mlflow_experiment_name": "e", "run_name": "r"})
    assert c.argv == (
        "/venv/bin/python", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
        "/opt/SpecForge/scripts/train_eagle3.py",
        "--target-model-path", "/m/t", "--train-data-path", "/d/train.jsonl", "--train-hidden-states-path", "/d/hs",
        "--eval-data-path", "/d/eval.jsonl", "--output-dir", "/ws/outputs/train/off",
        "--num-epochs", "10", "--max-num-steps", "500", "--batch-size", "1", "--learning-rate", "0.0001",
        "--max-length", "2048", "--ttt-length", "7", "--seed", "0",
        "--report-to", "mlflow", "--mlflow-tracking-uri", "http://127.0.0.1:5000", "--mlflow-experiment-name", "e",
        "--mlflow-run-name", "r", "--resume")
    assert c.env == {"CUDA_VISIBLE_DEVICES": "2,3", "PYTHONUNBUFFERED": "1", "HF_HOME": "/cache/hf"}


def test_gen1_online_and_offline_scripts():
    base = dict(name="old", python=PY, specforge_dir=SF, target_model="/m/kimi", train_data="/d/t.jsonl",
                output_dir="/o", num_epochs=6, chat_template="kimi_k2", tp_size=8,
                extra_args=["--embedding-key", "model.embed_tokens.weight"])
    c = _cmd("gen1", **base)
    assert c.argv == (
        "/venv/bin/python", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "8",
        "/opt/SpecForge/scripts/train_eagle3_online.py",
        "--target-model-path", "/m/kimi", "--train-data-path", "/d/t.jsonl", "--output-dir", "/o",
        "--chat-template", "kimi_k2", "--num-epochs", "6", "--batch-size", "1", "--learning-rate", "0.0001",
        "--max-length", "2048", "--ttt-length", "7", "--tp-size", "8",
        "--embedding-key", "model.embed_tokens.weight")
    off = _cmd("gen1", train_hidden_states="/d/hs", **base)
    assert off.argv[6] == "/opt/SpecForge/scripts/train_eagle3_offline.py"
    assert off.argv[9:13] == ("--train-data-path", "/d/t.jsonl", "--train-hidden-states-path", "/d/hs")


def test_module_entry_runs_the_cpu_trainer_with_gen2_flags():
    c = _cmd("gen2", name="demo", python="/usr/bin/python3", entry="module:backend.flows.tiny train",
             target_model="./models/tiny-target", train_data="outputs/regen/demo.jsonl", num_epochs=2, batch_size=4,
             learning_rate=3e-3, max_length=256, ttt_length=3, save_interval=20, log_interval=5, seed=7,
             extra_args=["--device", "cpu", "--size", "tiny"])
    assert c.argv == (
        "/usr/bin/python3", "-m", "backend.flows.tiny", "train",
        "--target-model-path", "/ws/models/tiny-target", "--train-data-path", "/ws/outputs/regen/demo.jsonl",
        "--output-dir", "/ws/outputs/train/demo", "--num-epochs", "2", "--batch-size", "4",
        "--learning-rate", "0.003", "--max-length", "256", "--ttt-length", "3", "--save-interval", "20",
        "--log-interval", "5", "--seed", "7", "--device", "cpu", "--size", "tiny")
    assert c.cwd == str(Path(__file__).resolve().parents[2])  # the repository, where backend/ is importable
    two = _cmd("gen2", name="demo", python="/usr/bin/python3", entry="module:backend.flows.tiny train",
               target_model="/t", train_data="/d", gpus=[0, 1], resume=True)
    assert two.argv[:9] == ("/usr/bin/python3", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                            "2", "-m", "backend.flows.tiny", "train")
    assert two.argv[-1] == "--resume"


def test_gen3_yaml_parses_back_to_the_config():
    c = _cmd("gen3", console_script="/venv/bin/specforge", name="qwen-online", python=PY,
             target_model="Qwen/Qwen3-8B", draft_config="/opt/SpecForge/configs/qwen3-8b-eagle3.json",
             train_data="/d/regen.jsonl", output_dir="/out/qwen", chat_template="qwen", num_epochs=2, max_steps=10000,
             batch_size=2, learning_rate=5e-5, max_length=4096, ttt_length=7, save_interval=1000, log_interval=10,
             seed=0, gpus=[0, 1, 2, 3], capture_servers=["http://127.0.0.1:30000"],
             tracker={"report_to": "tensorboard"},
             gen3_yaml={"model": {"sglang_mem_fraction_static": 0.25},
                        "deployment": {"disaggregated": {"backend": "mooncake",
                                                         "mooncake_master_server_addr": "127.0.0.1:35551"}}})
    assert c.yaml_path == "/out/qwen.yaml"
    assert c.argv == ("/venv/bin/specforge", "train", "--config", "/out/qwen.yaml")
    assert c.env == {"CUDA_VISIBLE_DEVICES": "0,1,2,3", "PYTHONUNBUFFERED": "1"}
    assert yaml.safe_load(c.yaml_text) == {
        "model": {"target_model_path": "Qwen/Qwen3-8B",
                  "draft_model_config": "/opt/SpecForge/configs/qwen3-8b-eagle3.json",
                  "sglang_mem_fraction_static": 0.25},
        "data": {"train_data_path": "/d/regen.jsonl", "max_length": 4096, "chat_template": "qwen"},
        "training": {"strategy": "eagle3", "num_epochs": 2, "max_steps": 10000, "batch_size": 2,
                     "learning_rate": 5e-5, "ttt_length": 7, "save_interval": 1000, "log_interval": 10, "seed": 0},
        "tracking": {"report_to": "tensorboard"},
        "run_id": "qwen-online",
        "output_dir": "/out/qwen",
        "deployment": {"mode": "disaggregated", "trainer": {"nnodes": 1, "nproc_per_node": 4},
                       "disaggregated": {"control_dir": "/out/qwen/control",
                                         "consumer_state_dir": "/out/qwen/consumer-state",
                                         "server_urls": ["http://127.0.0.1:30000"], "backend": "mooncake",
                                         "mooncake_master_server_addr": "127.0.0.1:35551"}},
    }


def test_gen3_offline_resume_and_no_console_script():
    c = _cmd("gen3", resume=True, name="off3", python=PY, target_model="/m/t", train_data="/d/t.jsonl",
             train_hidden_states="/d/hs", output_dir="/o/off3",
             tracker={"report_to": "mlflow", "mlflow_tracking_uri": "http://127.0.0.1:5000"})
    assert c.argv == (PY, "-c", "import sys; from specforge.cli import main; sys.argv[0] = 'specforge'; "
                                "sys.exit(main())", "train", "--config", "/o/off3.yaml",
                      "training.resume_from=/o/off3/off3-latest")
    doc = yaml.safe_load(c.yaml_text)
    assert doc["data"] == {"hidden_states_path": "/d/hs", "max_length": 2048}
    assert doc["deployment"] == {"mode": "local_colocated", "trainer": {"nnodes": 1, "nproc_per_node": 1}}
    assert c.env["MLFLOW_TRACKING_URI"] == "http://127.0.0.1:5000"


@pytest.mark.parametrize("generation, kw, expected", [
    ("gen3", dict(tp_size=2, train_hidden_states="/hs"), [("tp_size", "Gen-3 keeps training.tp_size at 1: the "
                                                           "target's tensor parallelism is set on the capture server "
                                                           "(online) or was used to prepare the hidden states "
                                                           "(offline)")]),
    ("gen3", dict(), [("capture_servers", "Gen-3 online training reads features from a patched SGLang capture "
                                          "server: list its URL (http://host:port), or train offline with "
                                          "train_hidden_states")]),
    ("gen3", dict(entry="module:backend.flows.tiny train", train_hidden_states="/hs"),
     [("entry", "Gen-3 is configured by YAML and run by `specforge train`; a module or script entry takes "
                "Gen-1/Gen-2 flags")]),
    ("gen2", dict(), [("specforge_dir", "Gen-2 runs scripts/ of a SpecForge checkout (the wheel has no scripts/): "
                                        "set specforge_dir")]),
    ("gen2", dict(specforge_dir="/sf", capture_servers=["http://h:1"]),
     [("capture_servers", "only Gen-3 online training uses capture servers")]),
    ("gen1", dict(specforge_dir="/sf", max_steps=5),
     [("max_steps", "Gen-1 scripts count epochs only (no --max-num-steps); use num_epochs")]),
])
def test_what_a_generation_cannot_do(generation, kw, expected):
    cfg = TrainRunConfig(name="x", target_model="/t", train_data="/d", **kw)
    assert config_problems(cfg, generation) == expected
    with pytest.raises(CommandError) as ei:
        build_command(cfg, generation, root=ROOT, outputs_dir=OUT)
    assert ei.value.problems == expected
    assert str(ei.value).startswith(f"train x: {expected[0][0]}: ")


def test_unknown_generation_is_a_clear_error():
    cfg = TrainRunConfig(name="x", target_model="/t", train_data="/d")
    with pytest.raises(CommandError, match=r"train x: generation: the SpecForge generation is not known: no entry "
                                           r"point; set generation or specforge_dir"):
        build_command(cfg, None, root=ROOT, outputs_dir=OUT, notes=("no entry point",))
