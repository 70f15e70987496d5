"""``train``: SpecForge training logs, tracker files and checkpoints, without the browser.

    python -m backend.cli train parselog LOG [--json] [--follow]
    python -m backend.cli train tracker DIR [--json]
    python -m backend.cli train checkpoints DIR [--run-id ID] [--json]
    python -m backend.cli train inspect CHECKPOINT [--target MODEL_DIR] [--sglang-version V]
                                                   [--draft-config FILE] [--json]
    python -m backend.cli [--workspace DIR] train runs [--json]
    python -m backend.cli [--workspace DIR] train command NAME [--resume] [--json]
    python -m backend.cli [--workspace DIR] train start NAME
    python -m backend.cli [--workspace DIR] train stop NAME [--no-wait]
    python -m backend.cli [--workspace DIR] train resume NAME [--yes]
    python -m backend.cli [--workspace DIR] train deploy CHECKPOINT --server NAME [--steps N] [--topk N]
        [--draft-tokens N] [--concurrency N ...] [--num-prompts N] [--input-len N] [--output-len N]
        [--measure-baseline] [--keep | --restore-after] [--builtin | --sglang] [--run-name NAME]
        [--ready-timeout S] [--state-file PATH] [--json]

``parselog`` prints one line per record (``--json``: one JSON object per line, with step, epoch,
position where it has one, split and each metric) and, on stderr, every line it could not read (and every
value it dropped) as ``LOG:LINE: why``, then the counts.  Bad lines never stop it: exit 0, 2 when the file
cannot be read.  ``--follow`` keeps reading as the log grows (woken by file events, else every second)
until interrupted; the counts are printed then.
``checkpoints`` and ``inspect`` verify each checkpoint (every safetensors file as long as its header
declares, ``training_state.pt`` unpickled safely): a torn or incomplete one is marked TORN with each damaged
file, never taken as the latest good one, and ``inspect`` exits 1 for it.
``tracker`` reads TensorBoard event files under DIR (SpecForge writes them to ``<output_dir>/runs``) or an
MLflow file-store run folder.  ``inspect --target`` runs the Servers page's draft preflight for the
checkpoint against that target model: exit 1 on errors.

``runs``, ``command``, ``start``, ``stop`` and ``resume`` act on the workspace's ``[[train]]`` runs
(backend.train.runs), audited with source ``cli``.  ``runs`` gives each run's cost (backend.flows.cost):
GPU-hours and energy of its current or last process run, or N/A with why (``--json``: ``gpu_hours`` and
``energy_kwh``, null where not measured, and ``cost`` with the reasons).  ``command`` prints the argv, the
environment it adds, the working folder and, for Gen-3, the YAML that ``start`` writes.  ``resume`` prints what it must be
confirmed against (SpecForge 0.2.0's ``--resume`` starts over; no checkpoint yet; torn checkpoints to rename
aside) and does nothing without ``--yes`` (exit 1); a resume that skips torn checkpoints says which good one
it continues from.

``deploy`` takes a checkpoint to a benchmarked server in one command (:mod:`backend.flows.deploy_job`):
it inspects and preflights the checkpoint against the server's target, relaunches the server with it
(EAGLE3) and waits until it is ready, benchmarks it at the stored baseline's load (or the load given),
stores the result labelled with the checkpoint, and prints the speedup against the baseline at the same
load with the break-even accept_len.  One line per step as it ends (``--json``: the final state as one
JSON object).  A failure, or SIGTERM, puts the server back as it was.  Exit status 0 when every step
succeeded, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from backend.cli.session import SOURCE, actor, print_findings, report
from backend.cli.session import CommandError as UserError

if TYPE_CHECKING:  # the parser is imported by the commands, not when the command line starts
    from backend.train.logparse import TrainRecord


def _clean(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_clean(x) for x in v]
    return v


def _text(r: TrainRecord) -> str:
    head = [f"{r.line_no}:" if r.line_no else "", r.kind]
    for label, v in (("step", r.step), ("epoch", r.epoch), ("position", r.position), ("split", r.split),
                     ("rank", r.rank)):
        if v is not None:
            head.append(f"{label} {v}")
    body = [f"{k}={v:g}" for k, v in r.metrics.items()]
    body += [f"{k}={v}" for k, v in r.info.items() if v is not None and k != "desc"]
    if r.rejected:
        body.append("dropped: " + "; ".join(r.rejected))
    return " ".join(x for x in head if x) + (" · " + " ".join(body) if body else "")


def _emit(records: list[TrainRecord], as_json: bool, out: TextIO) -> None:
    for r in records:
        if as_json:
            out.write(json.dumps(_clean(r.to_dict()), ensure_ascii=False) + "\n")
        else:
            out.write(_text(r) + "\n")


def cmd_parselog(args: argparse.Namespace, out: TextIO) -> int:
    from backend.train.reader import TrainLogReader, trainer_label

    err = sys.stderr
    path = Path(args.log)
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        err.write(f"{path}: cannot read: {exc.strerror or exc}\n")
        return 2
    if path.is_dir():
        err.write(f"{path}: is a folder; give the log file (or use `train tracker` for tracker files)\n")
        return 2
    reader = TrainLogReader(path, keep_unparsed=100_000)
    # records and unreadable lines go out poll by poll, so a long log streams instead of being held whole
    problems: list[str] = []

    def drain() -> None:
        while reader.unparsed:
            u = reader.unparsed.popleft()
            problems.append(f"{path}:{u.line_no}: {u.reason}")
            if len(problems) >= 1000 or args.follow:
                err.write("\n".join(problems) + "\n")
                problems.clear()

    def read_new() -> int:
        before = reader.stats.bytes_read
        chunk = reader.poll()
        if chunk.reset:
            err.write(f"{path}: the file was truncated or replaced while being read; read again from the start\n")
        _emit(chunk.records, args.json, out)
        drain()
        return reader.stats.bytes_read - before + (1 if chunk.reset else 0)

    if args.follow:
        import signal

        from backend.flows.bench_job import stop_on_sigterm

        stop = threading.Event()
        previous = stop_on_sigterm(stop, (signal.SIGTERM,))[signal.SIGTERM]  # end like Ctrl-C, with the counts
        try:
            while read_new() and not stop.is_set():
                pass
            _follow(path, read_new, out, stop)
        finally:
            signal.signal(signal.SIGTERM, previous)
    else:
        while read_new():
            pass
        _emit(reader.flush(), args.json, out)
        drain()
    if problems:
        err.write("\n".join(problems) + "\n")
    st = reader.stats
    gen = trainer_label(reader.generation)
    err.write(f"{path}: {st.lines:,} lines, {st.records:,} records, {st.ignored:,} other lines, "
              f"{st.unparsed:,} unparsed, {st.values_rejected:,} values dropped; {gen}\n")
    return 0


def _follow(path: Path, read_new, out: TextIO, stop) -> None:
    """Read what is appended until Ctrl-C or ``stop`` is set (SIGTERM), woken by file events with a 1 s
    polling fallback."""
    from backend.sglang.logwatch import FileWatcher

    wake = threading.Event()
    watcher = FileWatcher(path, wake)
    watcher.start()
    try:
        while not stop.is_set():
            out.flush()
            wake.wait(1.0)
            wake.clear()
            while read_new():
                pass
    except KeyboardInterrupt:
        pass
    finally:
        watcher.stop()
        out.flush()


def cmd_tracker(args: argparse.Namespace, out: TextIO) -> int:
    from backend.train.trackers import TensorboardReader, read_mlflow_run

    err = sys.stderr
    d = Path(args.dir)
    if not d.is_dir():
        err.write(f"{d}: not a folder\n")
        return 2
    if (d / "metrics").is_dir():
        recs, problems = read_mlflow_run(d)
        _emit(recs, args.json, out)
        err.write(f"{d}: MLflow run, {len(recs):,} records, {len(problems):,} unreadable lines\n")
        for p in problems:
            err.write(p + "\n")
        return 0
    tb = TensorboardReader(d)
    recs = tb.poll()
    _emit(recs, args.json, out)
    st = tb.stats
    files = len(tb.files)
    err.write(f"{d}: {files} TensorBoard event file(s), {st.events:,} events, {st.records:,} records, "
              f"{st.values_rejected:,} values dropped\n")
    for why, n in st.problems.items():
        err.write(f"{d}: {why}" + (f" (×{n})" if n > 1 else "") + "\n")
    if not files:
        err.write(f"{d}: no events.out.tfevents.* file and no MLflow metrics folder\n")
    return 0


def cmd_checkpoints(args: argparse.Namespace, out: TextIO) -> int:
    from backend.train.checkpoints import list_checkpoints

    run = list_checkpoints(args.dir, args.run_id)
    if args.json:
        rows = [{"name": c.name, "path": str(c.path), "generation": c.generation, "epoch": c.epoch, "step": c.step,
                 "run_id": c.run_id, "latest": c.latest, "best": c.best, "torn": c.torn,
                 "damage": list(c.problems)} for c in run.checkpoints]
        json.dump({"output_dir": str(run.output_dir), "checkpoints": rows, "best_meta": run.best_meta,
                   "latest_good": run.latest_good.name if run.latest_good else None,
                   "problems": list(run.problems)}, out, indent=2)
        out.write("\n")
    else:
        if not run.checkpoints:
            out.write(f"{run.output_dir}: no checkpoint folders (epoch_N, epoch_N_step_M or RUN-stepN)\n")
        for c in run.checkpoints:
            marks = " ".join(m for m, on in (("latest", c.latest), ("best", c.best)) if on)
            if c.torn:
                marks = "TORN" + (f", {marks.replace(' ', ', ')} by name, not usable" if marks else "")
            where = " ".join(f"{k} {v}" for k, v in (("epoch", c.epoch), ("step", c.step)) if v is not None)
            out.write(f"{c.name}  Gen-{c.generation}  {where}{'  [' + marks + ']' if marks else ''}\n")
            for why in c.problems:
                out.write(f"  torn: {why}\n")
        if run.torn:
            good = run.latest_good
            out.write(f"{len(run.torn)} torn or incomplete checkpoint(s); the newest good one is "
                      f"{good.name if good else 'none'}" + (" (a resume continues from it)\n" if good else "\n"))
        for p in run.problems:
            out.write(f"problem: {p}\n")
    return 0 if not run.problems or run.checkpoints else 1


def cmd_inspect(args: argparse.Namespace, out: TextIO) -> int:
    from backend.train.checkpoints import inspect_checkpoint
    from backend.flows.checkpoint_check import preflight_checkpoint

    try:
        info = inspect_checkpoint(args.checkpoint, draft_config=args.draft_config)
    except FileNotFoundError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    findings = None
    if args.target:
        findings = preflight_checkpoint(args.checkpoint, args.target, sglang_version=args.sglang_version,
                                        draft_config=args.draft_config)
    if args.json:
        from dataclasses import asdict

        doc = info.summary()
        if findings is not None:
            doc["preflight"] = [asdict(f) for f in findings]
        json.dump(_clean(doc), out, indent=2)
        out.write("\n")
    else:
        for k, v in info.summary().items():
            if v not in (None, [], ()):
                out.write(f"{k}: {v}\n")
        if findings is not None:
            print_findings(findings, out)
    if info.torn:
        sys.stderr.write(f"error: {info.path} is torn or incomplete, not servable and not resumable:\n"
                         + "".join(f"  {why}\n" for why in info.damage))
        return 1
    return 1 if findings and any(f.severity == "error" for f in findings) else 0


def _attribution(s, views) -> Any:
    """The GPU telemetry's attribution of processes to jobs, read once, where a run is live (a run's GPUs
    when its spec names none); None otherwise or when the telemetry cannot be read."""
    if not any(v is not None and v.live for v in views):
        return None
    try:
        from backend.telemetry.sampler import make_sampler

        tcfg = getattr(s.ws.config, "telemetry", None)
        sampler = make_sampler(gpu_source=getattr(tcfg, "source", "auto"), demo=bool(getattr(s.ws, "is_demo", False)),
                               managed=s.sup.views)
        sampler.sample_once()
        return getattr(sampler.latest(), "attribution", None)
    except Exception:  # noqa: BLE001 - no telemetry: a run without GPUs in its spec is N/A, with why
        return None


def _cost_text(c) -> str:
    """``1.50 GPU-h, 0.42 kWh`` / ``1.50 GPU-h, energy N/A`` / ``cost N/A (not started)``."""
    if c.gpu_hours is None:
        return f"cost N/A ({c.short_why})"
    energy = f"{c.energy_kwh:,.2f} kWh" if c.energy_kwh is not None else "energy N/A"
    return f"{c.gpu_hours:,.2f} GPU-h, {energy}" + (" so far" if c.running else "")


def _run_rows(s) -> list[dict[str, Any]]:
    from backend.flows import cost as job_cost
    from backend.train.command import CommandError

    rows = []
    views = {name: s.sup.view(name) for name in s.train.names()}
    attribution, power = _attribution(s, views.values()), job_cost.stored_power(s.store)
    for name in s.train.names():
        info = s.train.generation(name)
        v = views[name]
        try:
            problem = None
            s.train.command(name)
        except CommandError as exc:
            problem = str(exc)
        rows.append({"name": name, "generation": info.generation, "version": info.version,
                     "generation_chosen": info.chosen, "state": v.state.value if v else "NEVER",
                     "pid": v.pid if v else None, "exit_code": v.exit_code if v else None,
                     "output_dir": str(s.train.output_dir(name)), "log_path": str(s.train.log_path(name)),
                     "problem": problem, "_cost": job_cost.process_cost(v, attribution=attribution, power=power)})
    return rows


def _with_cost(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` for the JSON: ``gpu_hours``, ``energy_kwh`` (null where not measured) and ``cost`` (the whole
    record with the reasons and ``na``, the few words beside an N/A)."""
    row = dict(row)
    c = row.pop("_cost")
    return {**row, "gpu_hours": c.gpu_hours, "energy_kwh": c.energy_kwh,
            "cost": {**c.to_dict(), "na": c.short_why or None}}


def cmd_runs(s, args: argparse.Namespace, out: TextIO) -> int:
    rows = _run_rows(s)
    if args.json:
        json.dump([_with_cost(r) for r in rows], out, indent=2)
        out.write("\n")
        return 0
    if not rows:
        out.write(f"no [[train]] runs in {s.ws.config_path}\n")
        return 0
    for r in rows:
        gen = f"Gen-{r['generation'][-1]}" if r["generation"] else "Gen-?"
        ver = f" SpecForge {r['version']}" if r["version"] else ""
        pid = f" pid {r['pid']}" if r["pid"] else ""
        out.write(f"{r['name']}  {gen}{ver}  {r['state']}{pid}  {_cost_text(r['_cost'])}  {r['output_dir']}\n")
        if r["problem"]:
            out.write(f"  cannot start: {r['problem']}\n")
    return 0


def cmd_command(s, args: argparse.Namespace, out: TextIO) -> int:
    import shlex

    from backend.train.command import CommandError

    try:
        c = s.train.command(args.name, resume=args.resume)
    except (KeyError, CommandError) as exc:
        raise UserError(str(exc).strip("'\"")) from None
    if args.json:
        json.dump({"name": c.name, "argv": list(c.argv), "env": c.env, "cwd": c.cwd,
                   "generation": c.generation.generation, "version": c.generation.version,
                   "generation_chosen": c.generation.chosen, "yaml_path": c.yaml_path, "yaml": c.yaml_text,
                   "output_dir": c.output_dir, "notes": list(c.notes)}, out, indent=2)
        out.write("\n")
        return 0
    out.write(f"# {c.name}: {c.generation.label}\n")
    out.write(f"cd {shlex.quote(c.cwd)}\n")
    for k, v in c.env.items():
        out.write(f"export {k}={shlex.quote(v)}\n")
    out.write(shlex.join(c.argv) + "\n")
    if c.yaml_text is not None:
        out.write(f"\n# {c.yaml_path} (written at start)\n{c.yaml_text}")
    for n in c.notes:
        out.write(f"# note: {n}\n")
    return 0


def _act(s, name: str, fn) -> Any:
    from backend.train.command import CommandError

    try:
        return fn()
    except (KeyError, CommandError, ValueError) as exc:
        raise UserError(str(exc).strip("'\"")) from None


def cmd_start(s, args: argparse.Namespace, out: TextIO) -> int:

    v = _act(s, args.name, lambda: s.train.start(args.name, actor=actor(), source=SOURCE))
    report(v, out)
    out.write(f"log: {s.train.log_path(args.name)}\n")
    return 0


def cmd_stop(s, args: argparse.Namespace, out: TextIO) -> int:

    report(_act(s, args.name, lambda: s.train.stop(args.name, actor=actor(), source=SOURCE,
                                                   wait=not args.no_wait)), out)
    return 0


def cmd_resume(s, args: argparse.Namespace, out: TextIO) -> int:
    from backend.train.runs import ResumeNeedsConfirmation

    warning = _act(s, args.name, lambda: s.train.resume_warning(args.name))
    if warning:
        out.write(f"warning: {warning}\n")
    note = _act(s, args.name, lambda: s.train.resume_note(args.name))
    if note and note not in warning:
        out.write(f"note: {note}\n")
    try:
        v = _act(s, args.name, lambda: s.train.resume(args.name, actor=actor(), source=SOURCE,
                                                      confirmed=args.yes))
    except ResumeNeedsConfirmation:
        raise UserError(f"{args.name} was not resumed: read the warning above, then run again with --yes "
                        "to resume anyway") from None
    report(v, out)
    out.write(f"log: {s.train.log_path(args.name)}\n")
    return 0


def _request(args: argparse.Namespace):
    from backend.flows.deploy import KEEP, RESTORE, DeployRequest

    return DeployRequest(
        checkpoint=str(Path(args.checkpoint).expanduser().resolve()), server=args.server,
        num_steps=args.steps, eagle_topk=args.topk, num_draft_tokens=args.draft_tokens,
        concurrency=tuple(args.concurrency or ()), num_prompts=args.num_prompts, input_len=args.input_len,
        output_len=args.output_len, measure_baseline=args.measure_baseline,
        after=RESTORE if args.restore_after else KEEP,
        mode="builtin" if args.builtin else "sglang" if args.sglang else "auto", run_name=args.run_name,
        ready_timeout_s=args.ready_timeout, restore_timeout_s=max(args.ready_timeout, args.restore_timeout))


def cmd_deploy(s, args: argparse.Namespace, out: TextIO) -> int:
    from backend.flows.bench_job import stop_on_sigterm
    from backend.flows.deploy import DONE
    from backend.flows.deploy_job import run_deploy, state_path

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


def _check_deploy(args: argparse.Namespace) -> str | None:
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


def _register_deploy(train_sub: argparse._SubParsersAction) -> None:
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
    a.set_defaults(func=cmd_deploy, acts=True, check=_check_deploy)


def register(sub: argparse._SubParsersAction) -> None:
    train = sub.add_parser("train", help="SpecForge training: runs (start, stop, resume), logs, tracker files, "
                                         "checkpoints")
    ts = train.add_subparsers(dest="action", required=True, metavar="ACTION")
    _register_deploy(ts)
    a = ts.add_parser("parselog", help="parse a training log: one record per line (Gen-1, Gen-2, Gen-3)")
    a.add_argument("log")
    a.add_argument("--json", action="store_true", help="one JSON object per line")
    a.add_argument("--follow", "-f", action="store_true", help="keep reading as the log grows, until interrupted")
    a.set_defaults(func=cmd_parselog, session=False)
    a = ts.add_parser("tracker", help="read TensorBoard event files or an MLflow file-store run")
    a.add_argument("dir")
    a.add_argument("--json", action="store_true", help="one JSON object per line")
    a.set_defaults(func=cmd_tracker, session=False)
    a = ts.add_parser("checkpoints", help="list a run's checkpoints (latest and best marked)")
    a.add_argument("dir", help="the run's output folder")
    a.add_argument("--run-id", default=None, help="Gen-3 run id (when several runs share the folder)")
    a.add_argument("--json", action="store_true")
    a.set_defaults(func=cmd_checkpoints, session=False)
    a = ts.add_parser("inspect", help="inspect a checkpoint without loading weights; preflight with --target")
    a.add_argument("checkpoint")
    a.add_argument("--target", default=None, help="target model folder to preflight against (exit 1 on errors)")
    a.add_argument("--sglang-version", default=None, help="sglang version of the serving environment")
    a.add_argument("--draft-config", default=None, help="draft config for a Gen-3 export command")
    a.add_argument("--json", action="store_true")
    a.set_defaults(func=cmd_inspect, session=False)
    a = ts.add_parser("runs", help="the workspace's training runs: generation, state, output folder")
    a.add_argument("--json", action="store_true")
    a.set_defaults(func=cmd_runs, acts=False)
    a = ts.add_parser("command", help="the command (argv, environment, Gen-3 YAML) a run starts with")
    a.add_argument("name")
    a.add_argument("--resume", action="store_true", help="the command of a resume")
    a.add_argument("--json", action="store_true")
    a.set_defaults(func=cmd_command, acts=False)
    a = ts.add_parser("start", help="start a training run through the supervisor (audited)")
    a.add_argument("name")
    a.set_defaults(func=cmd_start)
    a = ts.add_parser("stop", help="stop a training run: SIGTERM, then SIGKILL after its grace period")
    a.add_argument("name")
    a.add_argument("--no-wait", action="store_true", help="return once the signal is sent")
    a.set_defaults(func=cmd_stop)
    a = ts.add_parser("resume", help="start a run again from its latest checkpoint (--resume)")
    a.add_argument("name")
    a.add_argument("--yes", action="store_true", help="resume even when a warning is printed (audited)")
    a.set_defaults(func=cmd_resume)
