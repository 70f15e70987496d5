"""``bench sweep``: relaunch a server in each configuration, benchmark it, restore it.

    python -m backend.cli bench sweep SERVER [--steps 3,5] [--topk 1,4] [--draft-tokens 4,8]
        [--baseline | --baseline-only] [--concurrency 1,16] [--num-prompts N] [--input-len N]
        [--output-len N] [--mode auto|builtin|sglang] [--backend sglang|sglang-oai-chat]
        [--ready-timeout S] [--state-file PATH] [--json]

Lists take commas or spaces.  An axis left out keeps the server's own value.  Progress goes
to the state file (default ``<outputs>/bench/sweep-SERVER-ID/state.json``) and, line by line,
to stdout; each stored result is one line (a JSON object with ``--json``), and at the end the
break-even model's prediction for each speculative configuration is printed beside the
measured tok/s (with ``--json``: one last object with the sweep's state and that check).
Given an existing state file, the sweep resumes after the configurations already measured.
SIGTERM stops it; the server is restored either way.  Exit status 0 when every configuration
was measured and the server restored, 1 otherwise, 2 for a bad plan.
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

from backend.bench.client import BACKENDS
from backend.bench.sweep_plan import MODES, PlanError, SweepPlan, parse_int_list
from specdeck_types.bench import BenchResult


def plan_of(args: argparse.Namespace) -> SweepPlan:
    lists = {}
    for name, flag in (("steps", "--steps"), ("topk", "--topk"), ("draft_tokens", "--draft-tokens"),
                       ("concurrency", "--concurrency")):
        raw = getattr(args, name)
        if raw is not None:
            lists[name] = parse_int_list(" ".join(raw), flag)
    return SweepPlan.build(server=args.server, baseline=args.baseline, baseline_only=args.baseline_only,
                           num_prompts=args.num_prompts, input_len=args.input_len, output_len=args.output_len,
                           mode=args.mode, backend=args.backend, ready_timeout_s=args.ready_timeout, **lists)


def _flag(problem: str) -> str:
    """A plan problem ("draft_tokens: ...") in the command line's words ("--draft-tokens: ...")."""
    field, sep, rest = problem.partition(": ")
    if sep and field in SweepPlan.model_fields and field != "server":
        field = "--ready-timeout" if field == "ready_timeout_s" else "--" + field.replace("_", "-")
    return field + sep + rest


def _check(args: argparse.Namespace) -> str | None:
    try:
        plan_of(args)
    except PlanError as exc:
        return "; ".join(_flag(p) for p in exc.problems)
    return None


def cmd_bench_sweep(s, args: argparse.Namespace, out: TextIO) -> int:
    from backend.bench.cli_run import target_of
    from backend.bench.job import stop_on_sigterm
    from backend.bench.sweep import DONE, SweepStateError, run_sweep, state_path
    from backend.bench.sweep_check import describe_row
    from backend.cli.bench import describe
    from backend.cli.session import CommandError, actor

    plan = plan_of(args)
    target_of(s, plan.server)  # an unknown server is a clear error before anything else
    sweep_id = args.sweep_id or time.strftime("%Y%m%d-%H%M%S")
    path = Path(args.state_file) if args.state_file else state_path(s.ws, plan.server, sweep_id)
    stop = threading.Event()
    stop_on_sigterm(stop)

    def say(text: str) -> None:
        if not args.json:
            out.write(text + "\n")
            out.flush()

    def emit(r: BenchResult) -> None:
        d = r.to_dict()
        d.pop("raw", None)
        out.write((json.dumps(d, sort_keys=True) if args.json else "stored " + describe(r)) + "\n")
        out.flush()

    say(f"sweep of {plan.server}; state in {path}")
    try:
        st = run_sweep(s, plan, state_path=path, actor=actor(), source="cli", stop=stop, sweep_id=sweep_id,
                       emit=emit, say=say)
    except (PlanError, SweepStateError) as exc:
        raise CommandError(str(exc)) from exc
    if args.json:
        out.write(json.dumps({"sweep_id": st.sweep_id, "state": st.state, "state_file": str(path),
                              "restored": st.restored, "errors": st.errors, "check": st.check},
                             sort_keys=True) + "\n")
    else:
        if st.check:
            out.write("break-even model against the measurements:\n")
            for row in st.check:
                out.write("  " + describe_row(row) + "\n")
        for note in st.notes:
            out.write(f"note: {note}\n")
    for e in st.errors:
        sys.stderr.write(f"error: {e}\n")
    if st.state != DONE or st.errors:
        sys.stderr.write(f"error: sweep {st.sweep_id} {st.state} with {st.n_done} of {len(st.configs)} "
                         f"configuration(s) measured; state in {path}\n")
        return 1
    return 0


def register_sweep(bench_sub: argparse._SubParsersAction) -> None:
    """Add ``sweep`` to the ``bench`` command's subparsers."""
    a = bench_sub.add_parser("sweep", help="relaunch a server in each configuration (steps x top-k x draft "
                                           "tokens, and the baseline), benchmark each, then restore it")
    a.add_argument("server")
    a.add_argument("--steps", nargs="+", metavar="N", help="speculative steps, e.g. 3,5")
    a.add_argument("--topk", nargs="+", metavar="K", help="EAGLE top-k, e.g. 1,4")
    a.add_argument("--draft-tokens", nargs="+", metavar="N", help="draft tokens, e.g. 4,8")
    g = a.add_mutually_exclusive_group()
    g.add_argument("--baseline", action="store_true", help="also run without speculation (first)")
    g.add_argument("--baseline-only", action="store_true", help="run only without speculation")
    a.add_argument("--concurrency", nargs="+", metavar="N", help="loads, e.g. 1,16 (default 1)")
    a.add_argument("--num-prompts", type=int, default=200, metavar="N")
    a.add_argument("--input-len", type=int, default=1024, metavar="N")
    a.add_argument("--output-len", type=int, default=512, metavar="N")
    a.add_argument("--mode", choices=MODES, default="auto",
                   help="auto: SGLang's benchmark where the serving environment has it, else the built-in client")
    a.add_argument("--backend", choices=BACKENDS, default="sglang")
    a.add_argument("--ready-timeout", type=float, default=1800.0, metavar="S",
                   help="how long a relaunched server may take to become ready (default 1800 s)")
    a.add_argument("--state-file", metavar="PATH", help="the sweep's state (JSON); an existing one is resumed")
    a.add_argument("--sweep-id", metavar="ID", help=argparse.SUPPRESS)
    a.add_argument("--json", action="store_true", help="one JSON line per stored result, and one at the end")
    a.set_defaults(func=cmd_bench_sweep, acts=True, check=_check)


def preview(plan: SweepPlan) -> str:
    """The command a page shows before starting the job."""
    from backend.bench.sweep import command_line

    return shlex.join(["python", "-m", "backend.cli", "bench", "sweep", plan.server, *command_line(plan)])
