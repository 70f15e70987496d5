"""``python -m backend.flows.tiny train`` flags: SpecForge Gen-2 ``scripts/train_eagle3.py``'s names and defaults
(reference §1.1) for what this trainer does, plus ``--device`` and ``--size``.

Three kinds of Gen-2 flags:

* honoured: they mean here what they mean there;
* accepted without effect, because the thing they tune does not exist in one process with its own target
  network (data-loading workers, the SGLang engine's memory fraction, the attention kernel, timeouts);
* refused with a message saying why, when a value asks for something this trainer cannot do (offline
  hidden states, tensor or sequence parallelism, a VLM, W&B/SwanLab/MLflow, LK losses, profiling).

A flag SpecForge does not have is argparse's ``unrecognized arguments`` error.
"""

from __future__ import annotations

import argparse
import os

_REFUSED_IF_GIVEN = {
    "train_hidden_states_path": "offline training from prepared hidden states is not supported: the tiny "
                                "target runs in this process (online mode); give --train-data-path only",
    "eval_hidden_states_path": "offline evaluation is not supported; give --eval-data-path",
    "lk_loss_type": "only SpecForge's default soft cross-entropy loss is implemented",
    "compact_teacher": "the teacher distribution is computed over the draft vocabulary here already",
    "profile": "profiling is not supported",
    "is_vlm": "the tiny target is a text model",
    "is_preformatted": "the data must be conversations (role/content); preformatted text is not supported",
}
_MUST_BE_ONE = {
    "tp_size": "the target runs on one device in this process",
    "sp_ulysses_size": "sequence parallelism is not supported",
    "sp_ring_size": "sequence parallelism is not supported",
}


def _positive(kind):
    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {kind.__name__}") from None
        if not v > 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be greater than 0")
        return v
    return parse


def _fraction(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= v < 1.0:
        raise argparse.ArgumentTypeError(f"{text!r} must be in [0, 1)")
    return v


def add_train_args(p: argparse.ArgumentParser) -> None:
    pos_i, pos_f = _positive(int), _positive(float)
    m = p.add_argument_group("model")
    m.add_argument("--target-model-path", required=True,
                   help="the target's folder (config.json written by `make-target`)")
    m.add_argument("--draft-model-config", help="draft config.json; made from the target when not given")
    m.add_argument("--embedding-key", default="model.embed_tokens.weight",
                   help="accepted; the draft reads the target's embedding directly")
    m.add_argument("--lm-head-key", default="lm_head.weight", help="accepted (offline mode only in SpecForge)")
    m.add_argument("--trust-remote-code", action="store_true", help="accepted; no remote code is involved")
    m.add_argument("--target-model-backend", default="sglang", choices=["sglang", "hf", "custom"],
                   help="accepted; the tiny target runs in this process whatever the backend")
    m.add_argument("--shard-target-output", dest="shard_target_output", action="store_true", default=True)
    m.add_argument("--no-shard-target-output", dest="shard_target_output", action="store_false")
    m.add_argument("--is-vlm", action="store_true")
    d = p.add_argument_group("dataset")
    d.add_argument("--train-data-path", required=True, help="SpecForge-format conversations (JSONL or Parquet)")
    d.add_argument("--eval-data-path", help="conversations to evaluate on every --eval-interval steps")
    d.add_argument("--train-hidden-states-path")
    d.add_argument("--eval-hidden-states-path")
    d.add_argument("--chat-template", default="llama3",
                   help="accepted; the tiny target's tokenizer has its one template")
    d.add_argument("--is-preformatted", action="store_true")
    d.add_argument("--train-only-last-turn", action="store_true", help="learn only the last assistant reply")
    d.add_argument("--build-dataset-num-proc", type=pos_i, default=8, help="accepted; tokenizing is in process")
    d.add_argument("--dataloader-num-workers", type=int, default=4, help="accepted; batches are built in process")
    t = p.add_argument_group("training")
    t.add_argument("--num-epochs", type=pos_i, default=10)
    t.add_argument("--max-num-steps", type=pos_i, default=None, help="stop after this many steps")
    t.add_argument("--batch-size", type=pos_i, default=1)
    t.add_argument("--learning-rate", type=pos_f, default=1e-4)
    t.add_argument("--max-length", type=pos_i, default=2048)
    t.add_argument("--warmup-ratio", type=_fraction, default=0.015)
    t.add_argument("--total-steps", type=pos_i, default=None, help="the schedule's length (default: epochs × "
                   "steps per epoch)")
    t.add_argument("--max-grad-norm", type=pos_f, default=0.5)
    t.add_argument("--ttt-length", type=pos_i, default=7, help="The length for Test-Time Training (TTT).")
    t.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --output-dir")
    t.add_argument("--ckpt-dir", help="start from the draft weights of this checkpoint folder")
    t.add_argument("--eval-interval", type=pos_i, default=5000)
    t.add_argument("--save-interval", type=pos_i, default=5000)
    t.add_argument("--log-interval", type=pos_i, default=50, help="Log training metrics every N steps")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--draft-accumulation-steps", type=pos_i, default=1)
    t.add_argument("--lk-loss-type", choices=["lambda", "alpha"], default=None)
    t.add_argument("--kl-scale", type=float, default=1.0)
    t.add_argument("--kl-decay", type=float, default=3.0)
    o = p.add_argument_group("optimization")
    o.add_argument("--tp-size", type=pos_i, default=1)
    o.add_argument("--sp-ulysses-size", type=pos_i, default=1)
    o.add_argument("--sp-ring-size", type=pos_i, default=1)
    o.add_argument("--compact-teacher", action="store_true")
    o.add_argument("--compact-teacher-chunk-size", type=pos_i, default=None)
    o.add_argument("--attention-backend", default="flex_attention",
                   help="accepted; the draft's TTT attention is computed directly")
    x = p.add_argument_group("others")
    x.add_argument("--cache-key")
    x.add_argument("--cache-dir", help="where the vocab mapping is saved (default: <output-dir>/cache)")
    x.add_argument("--output-dir", required=True)
    x.add_argument("--verbose", action="store_true")
    x.add_argument("--dist-timeout", type=pos_i, default=20, help="accepted; one process")
    x.add_argument("--model-download-dir", help="accepted; nothing is downloaded")
    x.add_argument("--profile", action="store_true")
    x.add_argument("--profile-start-step", type=int, default=30)
    x.add_argument("--profile-num-steps", type=int, default=4)
    x.add_argument("--profile-record-shapes", action="store_true")
    x.add_argument("--min-pixels", type=int, default=50176)
    x.add_argument("--max-pixels", type=int, default=802816)
    s = p.add_argument_group("SGLang target backend (accepted; the tiny target does not run in SGLang)")
    s.add_argument("--sglang-attention-backend", default="flashinfer")
    s.add_argument("--sglang-mem-fraction-static", type=float, default=0.4)
    s.add_argument("--sglang-context-length", type=int, default=None)
    for flag in ("enable-nccl-nvls", "enable-symm-mem", "enable-torch-compile", "enable-dp-attention",
                 "enable-dp-lm-head"):
        s.add_argument(f"--sglang-{flag}", action="store_true")
    s.add_argument("--sglang-ep-size", type=pos_i, default=1)
    r = p.add_argument_group("tracker")
    r.add_argument("--report-to", default="none", choices=["wandb", "tensorboard", "swanlab", "mlflow", "none"])
    for flag in ("wandb-project", "wandb-name", "wandb-key", "wandb-dir", "swanlab-project", "swanlab-name",
                 "swanlab-key", "mlflow-tracking-uri", "mlflow-experiment-name", "mlflow-run-name"):
        r.add_argument(f"--{flag}")
    r.add_argument("--wandb-offline", action="store_true")
    e = p.add_argument_group("this trainer")
    e.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"],
                   help="auto: cuda when a GPU is visible, else cpu")
    e.add_argument("--size", choices=["tiny", "large"], default=None,
                   help="write the target of this size to --target-model-path when it has none; refuse a "
                        "target of another size")


def check(args: argparse.Namespace) -> str | None:
    """Why these flags ask for something this trainer cannot do, or None."""
    for name, why in _REFUSED_IF_GIVEN.items():
        if getattr(args, name):
            return f"--{name.replace('_', '-')}: {why}"
    for name, why in _MUST_BE_ONE.items():
        if getattr(args, name) != 1:
            return f"--{name.replace('_', '-')} {getattr(args, name)}: only 1 is supported ({why})"
    if args.report_to not in ("none", "tensorboard"):
        return (f"--report-to {args.report_to}: only 'tensorboard' (files under <output-dir>/runs) and 'none' "
                "are supported")
    world = os.environ.get("WORLD_SIZE", "1")
    if world.strip() not in ("", "1"):
        return f"WORLD_SIZE={world}: this trainer runs as one process; start it without torchrun --nproc_per_node"
    if args.resume and args.ckpt_dir:
        return "--resume and --ckpt-dir: give one (resume continues a run, --ckpt-dir starts from a draft)"
    return None
