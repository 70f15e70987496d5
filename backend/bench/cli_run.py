"""``bench run``: benchmark a workspace server in the foreground and store the result.

    python -m backend.cli bench run SERVER [--concurrency N ...] [--num-prompts N]
        [--input-len N] [--output-len N] [--builtin | --sglang] [--backend sglang|sglang-oai-chat]
        [--progress-file PATH] [--json]

Several concurrencies run one after the other, each stored as its own result.  The job writes
its progress file (default: ``<outputs>/bench/<server>-<run id>/progress.json``) and prints one
line per stored result (a JSON object with ``--json``).  SIGTERM stops it cleanly: the
benchmark process gets SIGTERM, results already stored stay, the progress file says
``stopped``.  Exit status 0 when every load was measured, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import threading
import time
from pathlib import Path
from typing import TextIO

from backend.bench.client import BACKENDS, Load
from backend.bench.job import DONE, job_dir, run_job, stop_on_sigterm
from backend.bench.runner import Target
from specdeck_types.bench import BenchResult


def _api_key(extra_args: list[str]) -> str | None:
    for i, a in enumerate(extra_args):
        if a == "--api-key" and i + 1 < len(extra_args):
            return extra_args[i + 1]
        if a.startswith("--api-key="):
            return a.split("=", 1)[1]
    return None


def target_of(session, name: str) -> Target:
    """The workspace server ``name`` as a benchmark target."""
    from backend.cli.session import CommandError
    from backend.sglang.launch import endpoints

    if name not in session.fleet.names():
        raise CommandError(f"no server named {name!r} in {session.ws.config_path}")
    cfg = session.fleet.config(name)
    caps = session.fleet.capabilities(name)
    return Target(base_url=endpoints(cfg, caps).base_url, name=name,
                  python=sys.executable if cfg.simulate else cfg.python,
                  log_path=session.fleet.log_path(name), model_path=cfg.model_path,
                  api_key=_api_key(list(cfg.extra_args)))


def cmd_bench_run(s, args: argparse.Namespace, out: TextIO) -> int:
    from backend.cli.bench import describe
    from state.bench import BenchStore

    target = target_of(s, args.server)
    mode = "builtin" if args.builtin else "sglang" if args.sglang else "auto"
    loads = [Load(concurrency=c, num_prompts=args.num_prompts, input_len=args.input_len,
                  output_len=args.output_len, backend=args.backend, seed=args.seed,
                  warmup_requests=args.warmup_requests) for c in args.concurrency]
    run_id = time.strftime("%Y%m%d-%H%M%S")
    work = job_dir(s.ws, args.server, run_id)
    progress = Path(args.progress_file) if args.progress_file else work / "progress.json"
    if args.progress_file:
        work = progress.parent
    stop = threading.Event()
    stop_on_sigterm(stop)
    bench = BenchStore(s.store)

    def store(r: BenchResult) -> BenchResult:
        return bench.insert(r).result

    def emit(r: BenchResult) -> None:
        asked, got = r.load.num_prompts, r.results.completed
        if asked is not None and got is not None and got < asked:
            sys.stderr.write(f"warning: {asked - got} of {asked} requests failed at concurrency "
                             f"{r.load.concurrency}; the figures are of the {got} that completed "
                             f"(details in {work})\n")
        out.write((json.dumps(r.to_dict(), sort_keys=True) if args.json else describe(r)) + "\n")
        out.flush()

    if not args.json:
        out.write(f"benchmarking {args.server} at {target.base_url}: "
                  f"concurrency {' '.join(map(str, args.concurrency))}, {args.num_prompts} prompts of "
                  f"{args.input_len}/{args.output_len} tokens; progress in {progress}\n")
        out.flush()
    final, stored = run_job(target, loads, mode=mode, work_dir=work, store=store, progress_path=progress,
                            stop=stop, emit=emit)
    if final.state != DONE:
        why = final.error or final.state
        sys.stderr.write(f"error: benchmark of {args.server} {final.state} after {len(stored)} of "
                         f"{len(loads)} load(s): {why}\n")
        return 1
    return 0


def _check(args: argparse.Namespace) -> str | None:
    for name in ("num_prompts", "input_len", "output_len"):
        if getattr(args, name) < 1:
            return f"--{name.replace('_', '-')} must be at least 1"
    if any(c < 1 for c in args.concurrency):
        return "--concurrency values must be at least 1"
    if args.builtin and args.sglang:
        return "--builtin and --sglang exclude each other"
    return None


def register_run(bench_sub: argparse._SubParsersAction) -> None:
    """Add ``run`` to the ``bench`` command's subparsers."""
    a = bench_sub.add_parser("run", help="benchmark a server (SGLang's bench_serving where the serving "
                                         "environment has it, else the built-in client) and store the result")
    a.add_argument("server")
    a.add_argument("--concurrency", type=int, nargs="+", default=[1], metavar="N",
                   help="requests in flight; several values run one after the other (default 1)")
    a.add_argument("--num-prompts", type=int, default=200, metavar="N")
    a.add_argument("--input-len", type=int, default=1024, metavar="N")
    a.add_argument("--output-len", type=int, default=512, metavar="N")
    a.add_argument("--backend", choices=BACKENDS, default="sglang",
                   help="/generate (sglang, default) or /v1/chat/completions (sglang-oai-chat)")
    a.add_argument("--seed", type=int, default=1)
    a.add_argument("--warmup-requests", type=int, default=1, metavar="N")
    g = a.add_mutually_exclusive_group()
    g.add_argument("--builtin", action="store_true", help="use the built-in client")
    g.add_argument("--sglang", action="store_true", help="use SGLang's benchmark (fails without sglang)")
    a.add_argument("--progress-file", metavar="PATH", help="where to write progress (JSON, replaced as it goes)")
    a.add_argument("--json", action="store_true", help="one JSON line per stored result")
    a.set_defaults(func=cmd_bench_run, acts=False, check=_check)


def command_line(server: str, loads: list[Load], mode: str) -> list[str]:
    """The ``bench run`` arguments after SERVER for ``loads`` (one shared prompt count and lengths)."""
    first = loads[0]
    tail = ["--concurrency", *[str(x.concurrency) for x in loads], "--num-prompts", str(first.num_prompts),
            "--input-len", str(first.input_len), "--output-len", str(first.output_len),
            "--backend", first.backend, "--json"]
    if mode in ("builtin", "sglang"):
        tail.append(f"--{mode}")
    return tail


def preview(server: str, loads: list[Load], mode: str) -> str:
    """The command a page shows before starting the job."""
    return shlex.join(["python", "-m", "backend.cli", "bench", "run", server, *command_line(server, loads, mode)])
