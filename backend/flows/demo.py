"""The demo workspace.

``write_demo_workspace(root)`` writes a config that works on any machine:
a long-running worker, a short batch job that exits, the fake 8-GPU source,
a simulated 70B server at tensor parallelism 8 that holds those 8 GPUs, a
training run of the project's CPU trainer, ready to start, and a small simulated
server on that trainer's target network, to deploy the run's checkpoints to.

Its worker and batch job are the small programs of :mod:`backend.demo`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from backend.bench.demo_history import install_demo_history
from backend.filemodes import make_private_dirs, write_private
from backend.regen.demo_data import demo_catalog_text

REPO_ROOT = Path(__file__).resolve().parents[2]
# the demo server: Llama-3.1-70B's shape, over all eight GPUs of the fake telemetry source
DEMO_TP = 8
DEMO_TARGET = {"hidden_size": 8192, "num_hidden_layers": 80}


def _toml_str(s: str) -> str:
    return json.dumps(s)  # a JSON string is a valid TOML basic string


def demo_config_text(python: str = sys.executable, root: Path | None = None) -> str:
    py, repo = _toml_str(python), _toml_str(str(REPO_ROOT))
    text = f"""# Specdeck demo workspace: written because no workspace was chosen.
# Point Specdeck at your own with --workspace DIR or SPECDECK_WORKSPACE=DIR.

[workspace]
name = "demo"
demo = true

[telemetry]
source = "fake"          # auto | nvml | fake
interval_s = 1.0

[[process]]
name = "demo-ticker"
kind = "other"
argv = [{py}, "-m", "backend.demo", "ticker", "--interval", "1"]
cwd = {repo}
autostart = true
stop_grace_s = 5

[process.readiness]
kind = "log"
pattern = "ticker ready"

[process.restart]
mode = "on-failure"
max_tries = 3
backoff_s = 2

[[process]]
name = "demo-batch"
kind = "benchmark"
argv = [{py}, "-m", "backend.demo", "batch", "--seconds", "6"]
cwd = {repo}
autostart = true
stop_grace_s = 5
"""
    if root is None:
        return text
    port = _demo_port()
    return (text + _demo_server_text(root, port) + _demo_tiny_server_text(root, _demo_port(skip={port}))
            + demo_catalog_text(root) + _demo_train_text(python, root))


def _demo_server_text(root: Path, port: int) -> str:
    """A simulated Llama-3.1-70B server at tensor parallelism 8 with its EAGLE-3 draft.

    It holds all eight (fake) GPUs, as the telemetry's demo attribution shows it:
    the config, the launch command and the GPU page tell one story.
    """
    from backend.sim.models import make_draft_dir, make_target_dir

    target = make_target_dir(root / "models" / "Llama-3.1-70B-Instruct", hidden_size=DEMO_TARGET["hidden_size"],
                             num_hidden_layers=DEMO_TARGET["num_hidden_layers"], vocab_size=128256)
    draft = make_draft_dir(root / "models" / "Llama-3.1-70B-Instruct-EAGLE3", kind="eagle3",
                           target_hidden_size=DEMO_TARGET["hidden_size"], vocab_size=128256)
    gpus = ", ".join(str(g) for g in range(DEMO_TP))
    return f"""
# A simulated SGLang server: the same flags, endpoints and log lines as
# `python -m sglang.launch_server`, served by backend.sim on any machine.
# A 70B target split over all eight GPUs (tensor parallelism 8).
[[server]]
name = "demo-llama70b-eagle3"
model_path = {_toml_str(str(target))}
served_model_name = "llama-3.1-70b"
host = "127.0.0.1"
port = {port}
tp_size = {DEMO_TP}
gpus = [{gpus}]
simulate = true
autostart = true
sglang_version = "0.5.23"
baseline_tok_s = 90.0
decode_log_interval = 40
env = {{ SPECDECK_SIM_TRAFFIC = "1", SPECDECK_SIM_ACCEPT_P = "0.62" }}

[server.speculative]
algorithm = "EAGLE3"
draft_model_path = {_toml_str(str(draft))}
num_steps = 3
eagle_topk = 1
num_draft_tokens = 4
"""


# the demo training run: the project's CPU trainer (backend.flows.tiny) on generated conversations
DEMO_TRAIN = "demo-tiny-draft"
DEMO_TRAIN_TARGET = "models/tiny-target"
DEMO_TRAIN_DATA = "outputs/regen/demo-train.jsonl"

# the server the demo run's checkpoints are deployed to: the trainer's own target network, simulated on one
# fake GPU.  The fake H200s (143,771 MiB) each show 61.5 GiB held by the 70B server and 1.1 GiB of driver
# and reserve, so about 77.8 GiB free; the demo training run is placed on GPU 3 (38 GiB more there).  GPU 7
# with a static pool of 0.2 (28.1 GiB) passes preflight with both running.
DEMO_TINY_SERVER = "demo-tiny-eagle3"
DEMO_TINY_GPU = 7
DEMO_TINY_MEM_FRACTION = 0.2
# its single-stream decode speed without speculation: the simulator's (SPECDECK_SIM_BASELINE_TOK_S, default 90)
DEMO_TINY_BASELINE_TOK_S = 90.0


def _demo_tiny_server_text(root: Path, port: int) -> str:
    """A simulated server on the tiny trainer's target folder (written here, as the trainer writes it on its
    first start, so the server has its config.json and tokenizer before any run): not started with the
    workspace and without a draft, until the Training page's Deploy tab (or ``train deploy``) gives it a
    checkpoint of the demo run."""
    from backend.flows.tiny.target import make_target

    target = make_target(root / DEMO_TRAIN_TARGET, "tiny", seed=0)
    return f"""
# The demo training run's target network ({DEMO_TRAIN_TARGET}, hidden 64, 6 layers), simulated on one GPU.
# Deploy a checkpoint of {DEMO_TRAIN} to it from the Training page's Deploy tab, or with
# `python -m backend.cli train deploy CHECKPOINT --server {DEMO_TINY_SERVER} --measure-baseline --concurrency 2`.
[[server]]
name = "{DEMO_TINY_SERVER}"
model_path = {_toml_str(str(target))}
served_model_name = "specdeck-tiny"
host = "127.0.0.1"
port = {port}
tp_size = 1
gpus = [{DEMO_TINY_GPU}]
mem_fraction_static = {DEMO_TINY_MEM_FRACTION}
simulate = true
autostart = false
sglang_version = "0.5.23"
baseline_tok_s = {DEMO_TINY_BASELINE_TOK_S}   # the simulator's single-stream speed without a draft: a deploy's first estimate
decode_log_interval = 40
env = {{ SPECDECK_SIM_SPEED = "4" }}   # a 60 KB model: a few seconds to load, not twenty
"""


def _demo_train_text(python: str, root: Path) -> str:
    """A training run ready to start: the tiny trainer, SpecForge Gen-2's flags and log lines, on CPU.

    Its target folder is written with the workspace (the deploy server's, ``_demo_tiny_server_text``) and
    would be by the trainer on its first start (``--size tiny``); its data is a regeneration-shaped file of
    conversations (``DEMO_TRAIN_DATA``).
    """
    from backend.flows.tiny.demo_data import write_demo_data

    write_demo_data(root / DEMO_TRAIN_DATA)
    s = _toml_str
    return f"""
# A training run ready to start (Training page, or `python -m backend.cli train start {DEMO_TRAIN}`):
# Specdeck's own EAGLE-3 trainer takes SpecForge Gen-2's flags and prints its log lines, and
# really trains a small draft for a small target network on the CPU: 200 steps, about 35 s
# of CPU time, acc_0 rising from about 0.1 to about 0.65.
[[train]]
name = "{DEMO_TRAIN}"
python = {s(python)}
generation = "gen2"
entry = "module:backend.flows.tiny train"   # python -m backend.flows.tiny train <Gen-2 flags>
target_model = {s(str(root / DEMO_TRAIN_TARGET))}
train_data = {s(str(root / DEMO_TRAIN_DATA))}
num_epochs = 4
batch_size = 4
learning_rate = 1e-2
max_length = 256
ttt_length = 4
save_interval = 50
log_interval = 5
seed = 0
extra_args = ["--device", "cpu", "--size", "tiny"]
stop_grace_s = 10
"""


def _demo_port(skip: tuple[int, ...] | set[int] = ()) -> int:
    """30000 + a few: a free port, so the demo never collides with a real server (nor with ``skip``:
    the ports already given to the demo's other servers, which are not listening yet).  The hundred
    ports tried start at SPECDECK_DEMO_PORT_BASE (default 30100), so that demos written at the same
    moment by separate processes (parallel test workers) never pick the same one."""
    import os
    import socket

    try:
        base = int(os.environ.get("SPECDECK_DEMO_PORT_BASE") or 30100)
    except ValueError:
        base = 30100
    for port in range(base, base + 100):
        if port in skip:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    return base + len(skip)  # nothing free: preflight will say the port is busy


def write_demo_workspace(root: Path) -> Path:
    """Write the demo's ``specdeck.toml`` (and its benchmark history) into ``root``, made 0700 when it
    is new; the config is 0600 like every workspace file Specdeck writes."""
    make_private_dirs(root)
    cfg = root / "specdeck.toml"
    if not cfg.exists():
        write_private(cfg, demo_config_text(root=root))
        install_demo_history(root)
    return cfg
