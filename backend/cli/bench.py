"""``bench``: benchmark results of the workspace, and benchmarks run here.

    bench import FILE... [--server NAME] [--algorithm NAME|none] [--json]
    bench list [--server S] [--concurrency N] [--target T] [--source S] [--limit N] [--json]
    bench delete ID...
    bench run SERVER [--concurrency N ...] [--num-prompts N] [--input-len N] [--output-len N]
        [--builtin | --sglang] [--backend sglang|sglang-oai-chat] [--progress-file PATH] [--json]
        [--where local|ray]
    bench sweep SERVER [--steps 3,5] [--topk 1,4] [--draft-tokens 4,8]
        [--baseline | --baseline-only] [--concurrency 1,16] [--num-prompts N] [--input-len N]
        [--output-len N] [--mode auto|builtin|sglang] [--backend sglang|sglang-oai-chat]
        [--ready-timeout S] [--state-file PATH] [--json]

``import`` recognises the format of each file (see :mod:`backend.bench.importers`),
stores every result in the workspace's state and prints one line per result
(``--json``: one JSON object per line, with ``"new": false`` for a result that
was already stored from the same file and line).  Lines that could not be read
are reported on stderr as ``FILE:LINE: field: why``; the rest is imported.
Exit status 1 when a file could not be imported or had such lines.

``list`` gives each result's cost (backend.flows.cost): GPU-hours of its server's GPUs (a router's: those
of the servers behind it) from its start to its end, and the energy from the power history the
dashboard's telemetry stored, or N/A with why (``--json``: ``gpu_hours`` and ``energy_kwh``, null where
not measured, and ``cost`` with the reasons).
``--server`` and ``--algorithm`` (``none``: runs without speculation) fill in
what a file does not say (:func:`backend.bench.intake.fill_in`).

``run`` benchmarks a workspace server in the foreground (:mod:`backend.flows.bench_job`).  Several
concurrencies run one after the other, each stored as its own result.  The job writes its
progress file (default: ``<outputs>/bench/<server>-<run id>/progress.json``) and prints one
line per stored result (a JSON object with ``--json``).  SIGTERM stops it cleanly: the
benchmark process gets SIGTERM, results already stored stay, the progress file says
``stopped``.  Before it starts it warns on stderr when the job's folder or the outputs folder
is low on space (:mod:`backend.diskspace`); a full disk ends it saying "no space left on device
in FOLDER".  A result whose server restarted while it was measured is stored marked invalid
with the reason (``bench list`` shows it).  Exit status 0 when every load was measured on one
server run, 1 otherwise.

``sweep`` relaunches a server in each configuration, benchmarks it and restores it
(:mod:`backend.flows.sweep`).  Lists take commas or spaces.  An axis left out keeps the
server's own value.  Progress goes to the state file (default
``<outputs>/bench/sweep-SERVER-ID/state.json``) and, line by line, to stdout; each stored
result is one line (a JSON object with ``--json``), and at the end the break-even model's
prediction for each speculative configuration is printed beside the measured tok/s (with
``--json``: one last object with the sweep's state and that check).  Given an existing state
file, the sweep resumes after the configurations already measured.  SIGTERM stops it; the
server is restored either way.  Exit status 0 when every configuration was measured and the
server restored, 1 otherwise, 2 for a bad plan.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from backend.bench.client import BACKENDS, Load
from backend.bench.describe import describe
from backend.flows.sweep_plan import MODES, PlanError, SweepPlan, parse_int_list
from backend.cli.session import SOURCE, CommandError, Session, actor, need_cluster, start_on_ray
from specdeck_types.bench import BenchResult

# The choices of run's and sweep's options come with the modules above; what a command does beyond
# them (the importers, the cost, the benchmark job, the sweep, the store) is imported in that command,
# so --help and the other commands do not pay for it.
if TYPE_CHECKING:
    from backend.flows import cost as job_cost
    from backend.flows.bench_runner import Target


def _target(s: Session, name: str) -> Target:
    """The workspace server ``name`` as a benchmark target, or an error for the user."""
    from backend.flows.bench_runner import UnknownServer, target_of

    try:
        return target_of(s, name)
    except UnknownServer as exc:
        raise CommandError(str(exc)) from None


def cmd_bench_import(s: Session, args: argparse.Namespace, out: TextIO) -> int:
    from backend.bench.importers import BenchImportError, import_file
    from backend.bench.intake import algorithm_choice, fill_in
    from state.bench import BenchStore

    store = BenchStore(s.store)
    algorithm = algorithm_choice(args.algorithm)
    failed = 0
    for name in args.files:
        try:
            parsed = import_file(name)
        except BenchImportError as exc:
            sys.stderr.write(f"error: {exc}\n")
            failed += 1
            continue
        for q in parsed.problems:
            sys.stderr.write(f"skipped: {q}\n")
        failed += bool(parsed.problems)
        for r in parsed.results:
            r, note = fill_in(r, server=args.server, algorithm=algorithm)
            if note:
                sys.stderr.write(f"note: {note}\n")
            ins = store.insert(r)
            if args.json:
                d = ins.result.to_dict()
                d.pop("raw", None)
                d["new"] = ins.new
                d["tool"] = ins.result.tool_name
                out.write(json.dumps(d, sort_keys=True) + "\n")
            else:
                where = f"{ins.result.source_file}:{ins.result.source_line}"
                state = "new" if ins.new else "already stored"
                out.write(f"{where}: {ins.result.format} ({state}) {describe(ins.result)}\n")
    if failed:
        sys.stderr.write(f"{failed} of {len(args.files)} file(s) could not be imported in full\n")
    return 1 if failed else 0


def result_cost(s: Session, r: BenchResult, power) -> job_cost.Cost:
    """What result ``r`` cost (:func:`backend.flows.cost.bench_cost`, as the Benchmarks page reads it):
    through a router, the GPUs of every server behind it; else its server's."""
    from backend.flows import cost as job_cost

    return job_cost.bench_cost(r, s.fleet, power=power)


def _cost_text(c: job_cost.Cost) -> str:
    if c.gpu_hours is None:
        return f"cost N/A ({c.short_why})"
    energy = f"{c.energy_kwh:,.3f} kWh" if c.energy_kwh is not None else "energy N/A"
    return f"cost {c.gpu_hours:,.3f} GPU-h, {energy}"


def cmd_bench_list(s: Session, args: argparse.Namespace, out: TextIO) -> int:
    from backend.flows import cost as job_cost
    from state.bench import BenchFilter, BenchStore

    flt = BenchFilter(server=args.server, concurrency=args.concurrency, target_model=args.target,
                      source=args.source)
    results = BenchStore(s.store).list(flt, limit=args.limit)
    power = job_cost.stored_power(s.store)
    if args.json:
        for r in results:
            d = r.to_dict()
            d.pop("raw", None)
            c = result_cost(s, r, power)
            d.update(gpu_hours=c.gpu_hours, energy_kwh=c.energy_kwh, cost={**c.to_dict(), "na": c.short_why or None})
            out.write(json.dumps(d, sort_keys=True) + "\n")
        return 0
    if not results:
        out.write("no benchmark results" + (" match" if flt != BenchFilter() else "") +
                  "; import some with `bench import FILE`\n")
    for r in results:
        out.write(describe(r) + f" · {_cost_text(result_cost(s, r, power))}"
                  + (f"  INVALID: {r.invalid}" if r.invalid else "") + "\n")
    return 0


def cmd_bench_delete(s: Session, args: argparse.Namespace, out: TextIO) -> int:
    from state import audit
    from state.bench import BenchStore

    store = BenchStore(s.store)
    found = {i: store.get(i) for i in args.ids}
    missing = [i for i, r in found.items() if r is None]
    if missing:
        sys.stderr.write(f"error: no benchmark result {', '.join(f'#{i}' for i in missing)}; "
                         "`bench list` shows the stored ones (nothing deleted)\n")
        return 1
    for i, r in found.items():
        store.delete(i)
        out.write(f"deleted #{i}: {describe(r)}\n")
    audit.record(s.store, actor(), SOURCE, "delete", "benchmarks", "deleted " + ", ".join(f"#{i}" for i in found))
    return 0


def _check_import(args: argparse.Namespace) -> str | None:
    from backend.bench.intake import algorithm_choice

    if not args.files:
        return "bench import needs at least one FILE"
    try:
        algorithm_choice(args.algorithm)
    except ValueError as exc:
        return f"--{exc}"
    return None


def _register_import(bs: argparse._SubParsersAction) -> None:
    a = bs.add_parser("import", help="store results from bench_serving, bench_one_batch_server, "
                                     "bench_speculative, SpecForge or CSV files")
    a.add_argument("files", nargs="*", metavar="FILE")
    a.add_argument("--server", metavar="NAME", help="the server the results are from, for files that do not say")
    a.add_argument("--algorithm", metavar="NAME", help="the speculation algorithm (EAGLE3, ...; none for runs "
                                                      "without speculation), for files that do not say")
    a.add_argument("--json", action="store_true", help="one JSON object per result")
    a.set_defaults(func=cmd_bench_import, check=_check_import, acts=False)


def _register_list(bs: argparse._SubParsersAction) -> None:
    a = bs.add_parser("list", help="stored results, oldest first")
    a.add_argument("--server", metavar="S")
    a.add_argument("--concurrency", type=int, metavar="N")
    a.add_argument("--target", metavar="MODEL", help="target model")
    a.add_argument("--source", metavar="SRC", help="run, or import: (every import), or import:FORMAT")
    a.add_argument("--limit", type=int, metavar="N", help="only the newest N")
    a.add_argument("--json", action="store_true", help="one JSON object per result")
    a.set_defaults(func=cmd_bench_list, acts=False)


def _register_delete(bs: argparse._SubParsersAction) -> None:
    a = bs.add_parser("delete", help="delete stored results by id (a file can be imported again)")
    a.add_argument("ids", nargs="+", type=int, metavar="ID", help="ids as `bench list --json` shows them")
    a.set_defaults(func=cmd_bench_delete, acts=False)


def cmd_bench_run(s: Session, args: argparse.Namespace, out: TextIO) -> int:
    from backend.diskspace import low_space
    from backend.flows.bench_job import DONE, job_dir, run_job, stop_on_sigterm
    from state.bench import BenchStore

    target = _target(s, args.server)
    mode = "builtin" if args.builtin else "sglang" if args.sglang else "auto"
    loads = [Load(concurrency=c, num_prompts=args.num_prompts, input_len=args.input_len,
                  output_len=args.output_len, backend=args.backend, seed=args.seed,
                  warmup_requests=args.warmup_requests) for c in args.concurrency]
    if args.where == "ray":
        return _submit_on_ray(s, args, loads, mode, out)
    run_id = time.strftime("%Y%m%d-%H%M%S")
    work = job_dir(s.ws, args.server, run_id)
    progress = Path(args.progress_file) if args.progress_file else work / "progress.json"
    if args.progress_file:
        work = progress.parent
    stop = threading.Event()
    stop_on_sigterm(stop)
    bench = BenchStore(s.store)
    for low in low_space([work, s.ws.outputs_dir]):
        sys.stderr.write(f"warning: low disk space: {low.describe()}\n")

    def store(r: BenchResult) -> BenchResult:
        return bench.insert(r).result

    def emit(r: BenchResult) -> None:
        asked, got = r.load.num_prompts, r.results.completed
        if asked is not None and got is not None and got < asked:
            sys.stderr.write(f"warning: {asked - got} of {asked} requests failed at concurrency "
                             f"{r.load.concurrency}; the figures are of the {got} that completed "
                             f"(details in {work})\n")
        if r.invalid:
            sys.stderr.write(f"warning: result #{r.id} is invalid: {r.invalid}\n")
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
    if final.invalid:
        sys.stderr.write(f"error: {len(final.invalid)} of {len(stored)} result(s) of {args.server} are invalid: "
                         f"the server restarted while they were measured\n")
        return 1
    return 0


def _submit_on_ray(s: Session, args: argparse.Namespace, loads: list[Load], mode: str, out: TextIO) -> int:
    """``run --where ray``: the same benchmark as a job on the workspace's [cluster] (CPU only), saved with
    the dashboard's jobs so its Benchmarks page follows it; the job stores the results.  Returns once Ray
    has the job."""
    from backend.flows.bench_job import bench_process_spec, command_line, job_meta

    need_cluster(s.ws)
    run_id = time.strftime("%Y%m%d-%H%M%S")
    tail = command_line(args.server, loads, mode) + ["--seed", str(args.seed), "--warmup-requests",
                                                     str(args.warmup_requests)]
    spec = bench_process_spec(s.ws, args.server, run_id, tail, where="ray")
    meta = job_meta(s.ws, args.server, run_id, mode, loads)
    acting = Session(str(s.ws.root))  # this command's own session only observes
    try:
        said = start_on_ray(acting, spec, meta, f"progress {meta['progress']}")
    finally:
        acting.close()
    out.write(said)
    return 0


def _check_run(args: argparse.Namespace) -> str | None:
    for name in ("num_prompts", "input_len", "output_len"):
        if getattr(args, name) < 1:
            return f"--{name.replace('_', '-')} must be at least 1"
    if any(c < 1 for c in args.concurrency):
        return "--concurrency values must be at least 1"
    if args.builtin and args.sglang:
        return "--builtin and --sglang exclude each other"
    return None


def _register_run(bench_sub: argparse._SubParsersAction) -> None:
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
    a.add_argument("--where", choices=("local", "ray"), default="local",
                   help="ray: submit the benchmark as a job on the workspace's [cluster] and return (default: here)")
    a.set_defaults(func=cmd_bench_run, acts=False, check=_check_run)


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


def _check_sweep(args: argparse.Namespace) -> str | None:
    try:
        plan_of(args)
    except PlanError as exc:
        return "; ".join(_flag(p) for p in exc.problems)
    return None


def cmd_bench_sweep(s: Session, args: argparse.Namespace, out: TextIO) -> int:
    from backend.bench.sweep_check import describe_row
    from backend.flows.bench_job import stop_on_sigterm
    from backend.flows.sweep import DONE as SWEEP_DONE
    from backend.flows.sweep import SweepStateError, run_sweep, state_path

    plan = plan_of(args)
    _target(s, plan.server)  # an unknown server is a clear error before anything else
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
    if st.state != SWEEP_DONE or st.errors:
        sys.stderr.write(f"error: sweep {st.sweep_id} {st.state} with {st.n_done} of {len(st.configs)} "
                         f"configuration(s) measured; state in {path}\n")
        return 1
    return 0


def _register_sweep(bench_sub: argparse._SubParsersAction) -> None:
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
    a.set_defaults(func=cmd_bench_sweep, acts=True, check=_check_sweep)


def register(sub: argparse._SubParsersAction) -> None:
    bench = sub.add_parser("bench", help="benchmark results: import, list, delete, run, sweep")
    bs = bench.add_subparsers(dest="action", required=True, metavar="ACTION")
    _register_import(bs)
    _register_list(bs)
    _register_delete(bs)
    _register_run(bs)
    _register_sweep(bs)
