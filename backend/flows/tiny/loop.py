"""The training loop: SpecForge Gen-2's steps, bars, metric lines and checkpoints (reference §2.1).

Per step: the target network's aux hidden states and logits for the batch (no gradient), the draft's TTT
unroll, backward, and every ``--draft-accumulation-steps`` steps gradient clipping to ``--max-grad-norm``,
an AdamW step and a schedule step.  Every ``--log-interval`` steps the per-position ``Eval - Step …`` lines
(and the tracker); every ``--eval-interval`` steps an evaluation over ``--eval-data-path``; every
``--save-interval`` steps a checkpoint, and one at the end when the last step was not saved.

SIGTERM or SIGINT ends the run at the end of the current step with a checkpoint of that step, so a stopped
run resumes exactly where it stopped.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time
from pathlib import Path
from typing import TextIO

import torch

from backend.flows.tiny import checkpoint, data
from backend.flows.tiny.draft import StepStats, ttt_forward
from backend.flows.tiny.logio import Bar, TensorboardWriter
from backend.flows.tiny.prepare import Run


class _Stop:
    def __init__(self) -> None:
        self.signal: int | None = None

    def __call__(self, signum, frame) -> None:  # noqa: ARG002
        self.signal = signum


def _autocast(run: Run):
    return torch.autocast(device_type=run.device.type, dtype=torch.bfloat16, enabled=run.device.type == "cuda")


def _forward(run: Run, samples: list, ttt_length: int) -> tuple[torch.Tensor, list[StepStats]]:
    ids, mask = data.collate(samples, run.device)
    with _autocast(run):
        aux, logits = run.target(ids, run.cfg.aux_layer_ids)
        return ttt_forward(run.draft, run.target.embed_tokens, aux, logits, ids, mask, ttt_length)


def _metric_lines(log: logging.Logger, step: int, num_epochs: int, stats: list[StepStats]) -> None:
    head = f"Eval - Step {step} [{step + 1}/{num_epochs}], position"
    for i, s in enumerate(stats):
        log.info(f"{head} {i},  Acc: {s.acc:.2f}")
    for i, s in enumerate(stats):
        log.info(f"{head} {i},  Acceptance Rate: {s.acceptance_rate:.4f}")
    for i, s in enumerate(stats):
        log.info(f"{head} {i}, pLoss: {s.ploss}")


def _scalars(mode: str, stats: list[StepStats]) -> dict[str, float]:
    out: dict[str, float] = {}
    for i, s in enumerate(stats):
        out[f"{mode}/acc_{i}"] = s.acc
        out[f"{mode}/acceptance_rate_{i}"] = s.acceptance_rate
        out[f"{mode}/ploss_{i}"] = s.ploss
    return out


def _evaluate(run: Run, args: argparse.Namespace, epoch: int, step: int, stream: TextIO,
              log: logging.Logger, tb: TensorboardWriter | None, stop: _Stop) -> None:
    """One pass over the eval data; a stop signal cuts it short (no metrics printed for a partial pass),
    so the step's checkpoint is written within the supervisor's grace time."""
    ds = run.eval
    assert ds is not None
    batches = data.epoch_batches(len(ds.samples), args.batch_size, args.seed, 0)
    totals = [StepStats() for _ in range(args.ttt_length)]
    run.draft.eval()
    bar = Bar(f"Evaluating Epoch {epoch}", len(batches), stream)
    with torch.no_grad():
        for b in batches:
            if stop.signal is not None:
                break
            _, stats = _forward(run, [ds.samples[i] for i in b], args.ttt_length)
            for t, s in zip(totals, stats):
                t.add(s)
            bar.update()
    bar.close()
    run.draft.train()
    if stop.signal is not None:
        log.info(f"Evaluation at step {step} cut short by {signal.Signals(stop.signal).name}; no eval metrics")
        return
    _metric_lines(log, step, args.num_epochs, totals)
    if tb is not None:
        tb.log(_scalars("eval", totals), step)


def _save(run: Run, args: argparse.Namespace, epoch: int, step: int, log: logging.Logger) -> None:
    saved = checkpoint.save(Path(args.output_dir), epoch, step, run.draft, run.config_json, run.optimizer,
                            run.scheduler, args)
    log.info(f"Saved full training state to {saved.path}/training_state.pt")
    log.info(f"Saved model configuration to {saved.path}")
    run.saved_step = step


def train(run: Run, args: argparse.Namespace, log: logging.Logger, stream: TextIO = sys.stderr) -> int:
    """Train until the last epoch, ``--max-num-steps`` or a stop signal; 0 when it ended well."""
    stop = _Stop()
    old = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    tb = TensorboardWriter(Path(args.output_dir) / "runs") if args.report_to == "tensorboard" else None
    step = run.global_step
    epoch = run.start_epoch
    log.info(f"Starting training from epoch:{run.start_epoch}          step:{step}")
    params = [p for p in run.draft.parameters() if p.requires_grad]
    grad_norm: float | None = None
    run.draft.train()
    limit = args.max_num_steps
    try:
        for epoch in range(run.start_epoch, args.num_epochs if not limit or step < limit else run.start_epoch):
            batches = data.epoch_batches(len(run.train.samples), args.batch_size, args.seed, epoch)
            skip = run.skip if epoch == run.start_epoch else 0
            bar = Bar(f"Training Epoch {epoch}", len(batches), stream, initial=skip)
            for bi in range(skip, len(batches)):
                t0 = time.perf_counter()
                step += 1
                loss, stats = _forward(run, [run.train.samples[i] for i in batches[bi]], args.ttt_length)
                (loss / args.draft_accumulation_steps).backward()
                if step % args.draft_accumulation_steps == 0:
                    grad_norm = float(torch.nn.utils.clip_grad_norm_(params, args.max_grad_norm))
                    run.optimizer.step()
                    run.scheduler.step()
                    run.optimizer.zero_grad(set_to_none=True)
                loss_v = float(loss.detach())
                took = time.perf_counter() - t0
                if step % args.log_interval == 0:
                    _metric_lines(log, step, args.num_epochs, stats)
                    if tb is not None:
                        sc = _scalars("train", stats)
                        sc["train/lr"] = run.optimizer.param_groups[0]["lr"]
                        if grad_norm is not None:
                            sc["train/grad_norm"] = grad_norm
                        tb.log(sc, step)
                postfix = {"loss": f"{loss_v:.2f}", "acc": f"{sum(s.acc for s in stats) / len(stats):.2f}",
                           "acceptance_rate": f"{sum(s.acceptance_rate for s in stats) / len(stats):.2f}",
                           "time": f"{took:.2f}s"}
                if grad_norm is not None:
                    postfix["grad_norm"] = f"{grad_norm:.2f}"
                bar.set_postfix(postfix)
                if run.eval is not None and step % args.eval_interval == 0:
                    _evaluate(run, args, epoch, step, stream, log, tb, stop)
                if step % args.save_interval == 0:
                    _save(run, args, epoch, step, log)
                if stop.signal is not None or (limit and step >= limit):
                    break
                bar.update()
            bar.close()
            if stop.signal is not None or (limit and step >= limit):
                break
        if stop.signal is not None:
            log.info(f"Stopping at step {step} on {signal.Signals(stop.signal).name}")
        if run.saved_step != step and step > 0:
            if stop.signal is None:
                log.info(f"Training completed at step {step}, saving final checkpoint...")
            _save(run, args, epoch, step, log)
        elif step == run.global_step:
            log.info(f"Nothing left to train: step {step} of {run.total_steps}")
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if tb is not None:
            tb.close()
    return 0
