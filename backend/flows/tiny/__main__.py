"""``python -m backend.flows.tiny``: make a target folder, print a draft config, or train (see the package doc)."""

from __future__ import annotations

import argparse
import errno
import json
import sys
from pathlib import Path


def _make_target(ns: argparse.Namespace) -> int:
    from backend.flows.tiny.target import TargetError, make_target

    try:
        folder = make_target(ns.dir, ns.size, seed=ns.seed)
    except (TargetError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {folder / 'config.json'} ({ns.size} target, seed {ns.seed})")
    return 0


def _make_data(ns: argparse.Namespace) -> int:
    from backend.flows.tiny.demo_data import write_demo_data

    path = write_demo_data(ns.file, ns.rows, ns.seed)
    print(f"wrote {path} ({ns.rows} conversations)")
    return 0


def _draft_config(ns: argparse.Namespace) -> int:
    from backend.flows.tiny.config import auto_draft_config, draft_config_json
    from backend.flows.tiny.target import TargetError, read_target_config

    try:
        cfg = auto_draft_config(read_target_config(ns.target), ns.draft_vocab_size)
    except (TargetError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    text = json.dumps(draft_config_json(cfg), indent=2) + "\n"
    if ns.out:
        Path(ns.out).write_text(text, encoding="utf-8")
        print(f"wrote {ns.out}")
    else:
        sys.stdout.write(text)
    return 0


def _train(ns: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from backend.flows.tiny.args import check

    why = check(ns)
    if why:
        parser.error(why)
    import torch

    from backend.flows.tiny.checkpoint import DiskFull, is_disk_full
    from backend.flows.tiny.logio import print_args, setup_logger
    from backend.flows.tiny.loop import train
    from backend.flows.tiny.prepare import SetupError, prepare

    log = setup_logger(sys.stderr)
    print_args({k: v for k, v in vars(ns).items() if k != "cmd"}, sys.stdout)
    torch.manual_seed(ns.seed)
    try:
        run = prepare(ns, log)
        return train(run, ns, log, sys.stderr)
    except SetupError as exc:
        log.error(str(exc))
    except torch.OutOfMemoryError as exc:
        first = str(exc).splitlines()[0] if str(exc) else "out of memory"
        log.error(f"Out of device memory ({first}); lower --batch-size or --max-length, then --resume from "
                  f"the last checkpoint in {ns.output_dir}")
    except OSError as exc:  # a folder that cannot be made, a full disk: one line; saved checkpoints stay
        if isinstance(exc, DiskFull):
            log.error(f"{exc}; the checkpoints saved before stay, resume once space is freed")
        elif exc.errno == errno.ENOSPC:
            where = Path(exc.filename).parent if exc.filename else ns.output_dir
            log.error(f"{DiskFull(where)}; the checkpoints saved before stay, resume once space is freed")
        else:
            where = f"{exc.filename}: " if exc.filename else ""
            log.error(f"{where}{exc.strerror or exc}")
    except RuntimeError as exc:  # torch's own writer says only "unexpected pos" after a short write
        if not is_disk_full(exc, ns.output_dir):
            raise
        log.error(f"{DiskFull(ns.output_dir)} (torch: {str(exc).splitlines()[0][:200]}); the checkpoints saved "
                  "before stay, resume once space is freed")
    return 1


def main(argv: list[str] | None = None) -> int:
    from backend.flows.tiny.args import add_train_args
    from backend.flows.tiny.target import SIZES

    ap = argparse.ArgumentParser(prog="python -m backend.flows.tiny",
                                 description="Train an EAGLE-3 draft for Specdeck's own small target network.")
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    m = sub.add_parser("make-target", help="write a target network's folder (config.json)")
    m.add_argument("dir")
    m.add_argument("--size", choices=list(SIZES), default="tiny")
    m.add_argument("--seed", type=int, default=0)
    d = sub.add_parser("draft-config", help="print the EAGLE-3 draft config made for a target folder")
    d.add_argument("target")
    d.add_argument("--draft-vocab-size", type=int, default=None)
    d.add_argument("--out", help="write it to this file instead of printing it")
    g = sub.add_parser("make-data", help="write a small SpecForge-format training file from fixed tables")
    g.add_argument("file")
    g.add_argument("--rows", type=int, default=200)
    g.add_argument("--seed", type=int, default=0)
    t = sub.add_parser("train", help="train a draft (SpecForge Gen-2 scripts/train_eagle3.py flags)")
    add_train_args(t)
    ns = ap.parse_args(argv)
    if ns.cmd == "make-target":
        return _make_target(ns)
    if ns.cmd == "make-data":
        return _make_data(ns)
    if ns.cmd == "draft-config":
        return _draft_config(ns)
    return _train(ns, t)


if __name__ == "__main__":
    sys.exit(main())
