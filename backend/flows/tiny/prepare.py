"""Everything a run needs before its first step: device, target, draft config, data, vocab mapping, optimizer,
schedule, and the state to continue from (``--resume`` / ``--ckpt-dir``).  Problems raise :class:`SetupError`
with one line naming the file and field (or flag) at fault."""

from __future__ import annotations

import argparse
import hashlib
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from backend.flows.tiny import checkpoint, data
from backend.flows.tiny.config import DraftConfigError, auto_draft_config, draft_config_json, read_draft_config
from backend.flows.tiny.draft import DraftConfig, Eagle3Draft
from backend.flows.tiny.target import TargetError, TinyTarget, make_target, read_target_config
from backend.flows.tiny.tokenizer import vocab_mapping


class SetupError(ValueError):
    pass


@dataclass
class Run:
    device: torch.device
    target: TinyTarget
    cfg: DraftConfig
    config_json: dict
    draft: Eagle3Draft
    train: data.Dataset
    eval: data.Dataset | None
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    steps_per_epoch: int
    total_steps: int
    start_epoch: int
    skip: int  # batches of start_epoch already done
    global_step: int
    saved_step: int | None  # step of the checkpoint the run continues from


def device_of(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise SetupError(f"--device cuda: no CUDA device is visible to torch {torch.__version__}")
    return torch.device(name)


def _target(args: argparse.Namespace, log: logging.Logger):
    folder = Path(args.target_model_path)
    if args.size and not (folder / "config.json").exists():
        make_target(folder, args.size, seed=0)
        log.info(f"Wrote the {args.size} target network's config to {folder / 'config.json'}")
    try:
        tcfg = read_target_config(folder)
    except TargetError as exc:
        raise SetupError(str(exc)) from None
    if args.size and tcfg.size != args.size:
        raise SetupError(f"--size {args.size}: {folder / 'config.json'} is the {tcfg.size or 'unnamed'} target "
                         f"(hidden_size {tcfg.hidden_size}); drop --size or give another --target-model-path")
    return folder, tcfg


def _schedule(optimizer: torch.optim.Optimizer, total: int, warmup: int) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warmup, then cosine to zero at ``total`` (SpecForge's CosineAnnealingWarmupLR)."""
    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        span = max(1, total - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, (step - warmup) / span)))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def _load_data(args: argparse.Namespace, path: str, log: logging.Logger) -> data.Dataset:
    try:
        ds = data.load(path, args.max_length, only_last_turn=args.train_only_last_turn)
    except data.DataError as exc:
        raise SetupError(str(exc)) from None
    for reason in ds.skipped[:10]:
        log.warning(f"Row left out: {reason}")
    if len(ds.skipped) > 10:
        log.warning(f"{len(ds.skipped) - 10} more rows of {ds.path} left out")
    if ds.no_loss:
        log.warning(f"Rows left out of {ds.path}: {ds.no_loss} without an assistant token within --max-length "
                    f"{args.max_length}")
    log.info(f"Read {len(ds.samples)} conversations ({ds.tokens:,} tokens) from {ds.path}")
    return ds


def prepare(args: argparse.Namespace, log: logging.Logger) -> Run:
    device = device_of(args.device)
    if device.type == "cpu" and not os.environ.get("OMP_NUM_THREADS"):
        # one thread unless OMP_NUM_THREADS says otherwise: the tiny matrices hardly share out, and on a
        # busy two-core machine (the dashboard's, with its servers) a second thread mostly spins.
        # bench_tiny_train --threads 1,2: busy 2 cores, 1 thread 104 s / 24 s of CPU, 2 threads 239 s / 129 s;
        # a quiet 16-core host, 1 thread 28 s, 2 threads 22 s.
        torch.set_num_threads(1)
    folder, tcfg = _target(args, log)
    try:
        cfg = read_draft_config(args.draft_model_config, tcfg) if args.draft_model_config else auto_draft_config(tcfg)
    except DraftConfigError as exc:
        raise SetupError(str(exc)) from None
    target = TinyTarget(tcfg).to(device)
    log.info(f"Target network {folder}: {tcfg.num_hidden_layers} layers, hidden {tcfg.hidden_size}, vocab "
             f"{tcfg.vocab_size}, seed {tcfg.seed}; aux layers {list(cfg.aux_layer_ids)} on {device}")
    train = _load_data(args, args.train_data_path, log)
    ev = _load_data(args, args.eval_data_path, log) if args.eval_data_path else None
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    checkpoint.clean_temp(out, log)

    mapping = vocab_mapping(train.samples, cfg.vocab_size, cfg.draft_vocab_size)
    log.info(f"top {cfg.draft_vocab_size} token frequency ratio: {mapping.top_ratio:.2%}")
    key = args.cache_key or hashlib.md5(
        f"{Path(args.train_data_path).resolve()}|{args.max_length}|{args.chat_template}|{folder.resolve()}".encode()
    ).hexdigest()
    vdir = Path(args.cache_dir) if args.cache_dir else out / "cache"
    vpath = vdir / "vocab_mapping" / f"{key}.pt"
    vpath.parent.mkdir(parents=True, exist_ok=True)
    with open(vpath, "wb") as fh:  # through a Python file: a full disk is an OSError (ENOSPC), not torch's pos
        torch.save({"d2t": mapping.d2t, "t2d": mapping.t2d}, fh)
    log.info(f"Saved vocab mapping to: {vpath}")

    draft = Eagle3Draft(cfg)
    draft.init_weights(args.seed)
    draft.set_vocab(mapping.d2t, mapping.t2d)
    optimizer = torch.optim.AdamW(draft.parameters(), lr=args.learning_rate, weight_decay=0.0)
    spe = data.steps_per_epoch(len(train.samples), args.batch_size)
    total = args.total_steps
    if total is None:
        total = args.num_epochs * spe
        log.info(f"Auto-calculated total_steps: {total} (num_epochs={args.num_epochs} * steps_per_epoch={spe})")
    scheduler = _schedule(optimizer, total, int(args.warmup_ratio * total))
    run = Run(device, target, cfg, draft_config_json(cfg), draft, train, ev, optimizer, scheduler, spe, total,
              0, 0, 0, None)
    try:
        if args.resume:
            _resume(run, args, out, log)
        elif args.ckpt_dir:
            checkpoint.load_weights(Path(args.ckpt_dir), draft)
            log.info(f"Loaded draft weights from {args.ckpt_dir}")
    except checkpoint.CheckpointError as exc:
        raise SetupError(str(exc)) from None
    draft.to(device)
    _optimizer_to(optimizer, device)
    return run


def _resume(run: Run, args: argparse.Namespace, out: Path, log: logging.Logger) -> None:
    found = checkpoint.candidates(out)
    if not found:
        log.info(f"No checkpoint in {out} to resume from; starting from step 0")
        return
    ckpt = state = None
    skipped: list[str] = []
    for c in found:  # the newest that loads: a torn one (cut short by a crash or a full disk) is passed over
        try:
            state = checkpoint.load_state(c, "cpu")
            checkpoint.load_weights(c, run.draft)  # checks every tensor before it changes the draft
        except checkpoint.CheckpointError as exc:
            if not exc.torn:  # a whole checkpoint of another draft: an older one would not fit either
                raise
            log.warning(f"Checkpoint {c} cannot be resumed from (torn or incomplete): {exc}")
            skipped.append(c.name)
            continue
        ckpt = c
        break
    if ckpt is None or state is None:
        log.warning(f"No checkpoint in {out} can be resumed from ({len(skipped)} torn or incomplete: "
                    f"{', '.join(skipped)}); starting from step 0")
        return
    if skipped:
        log.warning(f"Resuming from {ckpt.name}, the newest good checkpoint; skipped the torn "
                    f"{', '.join(skipped)}")
    epoch, step = int(state["epoch"]), int(state["global_step"])
    log.info(f"Loaded training state from {ckpt / 'training_state.pt'}: epoch={epoch}, step={step}")
    try:
        run.optimizer.load_state_dict(state["optimizer_state_dict"])
        run.scheduler.load_state_dict(state["scheduler_state_dict"])
    except (ValueError, KeyError, RuntimeError) as exc:
        raise SetupError(f"{ckpt / 'training_state.pt'}: optimizer state does not fit this draft: {exc}") from None
    lr = run.optimizer.param_groups[0]["lr"]
    log.info(f"Restored optimizer/scheduler state: epoch={epoch}, step={step}, lr={lr:.6g}")
    saved = state.get("args")
    for flag in ("batch_size", "train_data_path"):
        before, now = getattr(saved, flag, None), getattr(args, flag)
        if before is not None and before != now:
            log.warning(f"The checkpoint was trained with --{flag.replace('_', '-')} {before}, this run has {now}: "
                        "the place within the epoch is counted in this run's batches")
    spe = run.steps_per_epoch
    done = step - epoch * spe
    if done >= spe:
        run.start_epoch, run.skip = epoch + 1, 0
    else:
        run.start_epoch, run.skip = epoch, max(0, done)
    run.global_step = run.saved_step = step


def _optimizer_to(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    for st in optimizer.state.values():
        for k, v in st.items():
            if isinstance(v, torch.Tensor) and k != "step":
                st[k] = v.to(device)
