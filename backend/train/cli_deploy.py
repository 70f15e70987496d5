"""``train deploy``: take a checkpoint to a benchmarked server in one command.

    python -m backend.cli train deploy CHECKPOINT --server NAME [--steps N] [--topk N] [--draft-tokens N]
        [--concurrency N ...] [--num-prompts N] [--input-len N] [--output-len N] [--measure-baseline]
        [--keep | --restore-after] [--builtin | --sglang] [--run-name NAME] [--ready-timeout S]
        [--state-file PATH] [--json]

Inspects and preflights the checkpoint against the server's target, relaunches the server with it
(EAGLE3) and waits until it is ready, benchmarks it at the stored baseline's load (or the load given),
stores the result labelled with the checkpoint, and prints the speedup against the baseline at the same
load with the break-even accept_len.  One line per step as it ends (``--json``: the final state as one
JSON object).  A failure, or SIGTERM, puts the server back as it was.  Exit status 0 when every step
succeeded, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TextIO


def _request(args: argparse.Namespace):
    from backend.train.deploy import KEEP, RESTORE, DeployRequest

    return DeployRequest(
        checkpoint=str(Path(args.checkpoint).expanduser().resolve()), server=args.server,
        num_steps=args.steps, eagle_topk=args.topk, num_draft_tokens=args.draft_tokens,
        concurrency=tuple(args.concurrency or ()), num_prompts=args.num_prompts, input_len=args.input_len,
        output_len=args.output_len, measure_baseline=args.measure_baseline,
        after=RESTORE if args.restore_after else KEEP,
        mode="builtin" if args.builtin else "sglang" if args.sglang else "auto", run_name=args.run_name,
        ready_timeout_s=args.ready_timeout, restore_timeout_s=max(args.ready_timeout, args.restore_timeout))


def cmd_deploy(s, args: argparse.Namespace, out: TextIO) -> int:
    from backend.cli.session import SOURCE, actor
    from backend.train.deploy import DONE
    import threading

    from backend.bench.job import stop_on_sigterm
    from backend.train.deploy_job import run_deploy, state_path

    req = _request(args)
    path = Path(args.state_file) if args.state_file else state_path(s.ws, req.server, time.strftime("%Y%m%d-%H%M%S"))
    stop = threading.Event()
    stop_on_sigterm(stop)
    if not args.json:
        out.write(f"deploying {req.checkpoint} to {req.server}; state in {path}\n")
        out.flush()

    def tell(st, name: str) -> None:
        if args.json:
            return
        step = st.step(name)
        out.write(f"{step.status.upper():8} {step.title}: {step.message}\n")
        out.flush()

    st = run_deploy(s, req, path, actor=actor(), source=SOURCE, stop=stop, on_step=tell)
    if args.json:
        json.dump(st.to_dict(), out, sort_keys=True)
        out.write("\n")
    if st.state != DONE:
        sys.stderr.write(f"error: deploy {st.state} at step {st.failed_step}: {st.error}\n"
                         f"server: {st.restore}\n")
        return 1
    return 0


def _check(args: argparse.Namespace) -> str | None:
    for name in ("steps", "topk", "draft_tokens", "num_prompts", "input_len", "output_len"):
        v = getattr(args, name)
        if v is not None and v < 1:
            return f"--{name.replace('_', '-')} must be at least 1"
    if args.concurrency and any(c < 1 for c in args.concurrency):
        return "--concurrency values must be at least 1"
    if args.ready_timeout <= 0 or args.restore_timeout <= 0:
        return "--ready-timeout and --restore-timeout must be positive"
    if args.measure_baseline and not args.concurrency:
        return "--measure-baseline needs the load to measure at: give --concurrency (and the lengths)"
    return None


def register(train_sub: argparse._SubParsersAction) -> None:
    """Add ``deploy`` to the ``train`` command's subparsers."""
    a = train_sub.add_parser("deploy", help="preflight a checkpoint, relaunch a server with it, benchmark it at "
                                            "the baseline's load and report the speedup")
    a.add_argument("checkpoint", help="the checkpoint folder (config.json + model.safetensors)")
    a.add_argument("--server", required=True, help="the workspace server to deploy it to")
    a.add_argument("--steps", type=int, default=None, metavar="N", help="speculative steps (default: the server's)")
    a.add_argument("--topk", type=int, default=None, metavar="N", help="EAGLE top-k (default: the server's)")
    a.add_argument("--draft-tokens", type=int, default=None, metavar="N",
                   help="draft tokens (default: the server's)")
    a.add_argument("--concurrency", type=int, nargs="+", default=None, metavar="N",
                   help="the load (default: the stored baseline's concurrency and lengths)")
    a.add_argument("--num-prompts", type=int, default=None, metavar="N")
    a.add_argument("--input-len", type=int, default=None, metavar="N")
    a.add_argument("--output-len", type=int, default=None, metavar="N")
    a.add_argument("--measure-baseline", action="store_true",
                   help="where no baseline is stored at the load, measure one first (the server without speculation)")
    g = a.add_mutually_exclusive_group()
    g.add_argument("--keep", action="store_true", help="leave the server serving the checkpoint (default)")
    g.add_argument("--restore-after", action="store_true", help="put the server back as it was afterwards")
    m = a.add_mutually_exclusive_group()
    m.add_argument("--builtin", action="store_true", help="benchmark with the built-in client")
    m.add_argument("--sglang", action="store_true", help="benchmark with SGLang's bench_serving")
    a.add_argument("--run-name", default=None, help="the training run, for the label (default: the parent folder)")
    a.add_argument("--ready-timeout", type=float, default=900.0, metavar="S",
                   help="seconds for the server to come up with the checkpoint (default 900)")
    a.add_argument("--restore-timeout", type=float, default=900.0, metavar="S",
                   help="seconds for it to come back with its previous config (default 900)")
    a.add_argument("--state-file", default=None, metavar="PATH", help="where to write the state (JSON)")
    a.add_argument("--json", action="store_true", help="print the final state as one JSON object")
    a.set_defaults(func=cmd_deploy, acts=True, check=_check)
