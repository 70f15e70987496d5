"""``regen``: run, follow, check and requeue a regeneration.

    regen run (--input FILE [--input FILE ...] | --mix NAME) --server URL_OR_NAME [--server ...]
              --out PATH [--concurrency N] [--max-tokens N] [--temperature T] [--top-p P]
              [--reasoning none|save|disable] [--system-prompt TEXT] [--model NAME]
              [--stream] [--first-byte-timeout S] [--chunk-timeout S] [--startup-timeout S]
              [--max-attempts N] [--workspace DIR] [--where local|ray]
    regen status PATH [--json]
    regen validate PATH [--input FILE ... | --mix NAME]
    regen requeue PATH [--class CLASS]

``status`` gives the latest counts and what the run cost (:mod:`backend.flows.cost`): GPU-hours of its
servers' GPUs over its process's time, the energy from the GPU history the dashboard stored (NVML's energy
counter, else the power readings) and the answer tokens per kWh, for a run started by the dashboard or command
line of its workspace (``--workspace``, else the one the output lies in); N/A with why otherwise (``--json``:
``gpu_hours``, ``energy_kwh`` and ``tokens_per_kwh``, null where not measured, and ``cost`` with the reasons).

``run`` stays in the foreground until every row is done (``--where ray``: it is submitted as a job on the
workspace's [cluster] and returns; the Regeneration page and ``regen status`` follow it).  When PATH already has a run, it resumes
it (with no other argument, with the parameters of ``PATH``'s ``.job.json``; arguments given
replace those; other inputs than the run was made from are refused).  Exit status: 0 when nothing
is left (failed rows included) or after a pause, 130 after SIGINT/SIGTERM once everything written
is flushed (also while it starts), 1 when the run failed (no server answered within
``--startup-timeout``, a full disk), 2 for bad arguments or input.  A server is a URL
(``http://host:port``, also the URL of an ``sglang-router``) or the name of a ``[[server]]`` or a
``[[router]]`` of the workspace (a router by name: the progress log also records each worker behind
it, from the router's exporter).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from backend.regen.config import (CHUNK_S, FIRST_BYTE_S, REASONING, SLOWEST_DECODE_TOK_S, STARTUP_S, JobConfig,
                                  ServerSpec, normalize_url, read_job_json)
from backend.regen.output import OutputError, RunFiles, requeue, validate
from backend.regen.progress import RunLocked, last_snapshot, locked

# aiohttp, pydantic (a mix) and the dataset readers are imported by the commands that use them,
# so the rest of the command line does not pay for them at start.

DEFAULTS = {"concurrency": 64, "max_tokens": 4096, "temperature": 0.7}


class UsageError(ValueError):
    """Bad arguments or workspace config (exit status 2)."""


def register(sub: argparse._SubParsersAction) -> None:
    regen = sub.add_parser("regen", help="regenerate training answers through the target model(s)")
    rs = regen.add_subparsers(dest="action", required=True, metavar="ACTION")
    ws = {"metavar": "DIR", "default": argparse.SUPPRESS,
          "help": "workspace for server names and mixes (default: $SPECDECK_WORKSPACE, else the demo)"}

    a = rs.add_parser("run", help="ask every row again (resumes when the output exists)")
    a.add_argument("--input", action="append", default=[], metavar="FILE", help="JSONL or Parquet prompts (repeat)")
    a.add_argument("--mix", metavar="NAME", help="a [[mix]] of the workspace instead of --input")
    a.add_argument("--server", action="append", default=[], metavar="URL_OR_NAME",
                   help="http://host:port, a router URL, or a workspace server or router name (repeat)")
    a.add_argument("--out", required=True, metavar="PATH", help="output .jsonl (SpecForge's format)")
    a.add_argument("--concurrency", type=int, metavar="N", help="requests in flight per server (default 64)")
    a.add_argument("--max-tokens", type=int, metavar="N", help="per answer (default 4096)")
    a.add_argument("--temperature", type=float, metavar="T", help="default 0.7")
    a.add_argument("--top-p", type=float, metavar="P")
    a.add_argument("--reasoning", choices=REASONING,
                   help="none (default); save: keep reasoning_content; disable: enable_thinking=false")
    a.add_argument("--system-prompt", metavar="TEXT", help="system turn for rows that have none")
    a.add_argument("--model", metavar="NAME", help="model name sent (default: the server's first /v1/models)")
    a.add_argument("--stream", dest="stream", action="store_true", default=None,
                   help="stream the answers: a stalled server is noticed within --chunk-timeout (costs the "
                        "client about three times the CPU)")
    a.add_argument("--no-stream", dest="stream", action="store_false", help="whole answers (the default)")
    a.add_argument("--first-byte-timeout", type=float, metavar="S",
                   help=f"seconds from a request to the first byte of its answer before it is asked again "
                        f"(default: streamed {FIRST_BYTE_S:g}; not streamed, the whole answer comes at once: "
                        f"{FIRST_BYTE_S:g} + max-tokens / {SLOWEST_DECODE_TOK_S:g})")
    a.add_argument("--chunk-timeout", type=float, metavar="S",
                   help=f"seconds between two chunks of a streamed answer before it is asked again "
                        f"(default {CHUNK_S:g})")
    a.add_argument("--startup-timeout", type=float, metavar="S",
                   help=f"give up when no server has answered at all this long after start (default {STARTUP_S:g})")
    a.add_argument("--max-attempts", type=int, metavar="N",
                   help="5xx/429/timeouts of one row while its server is up before it is an error (default 10)")
    a.add_argument("--workspace", **ws)
    a.add_argument("--where", choices=("local", "ray"), default="local",
                   help="ray: submit the run as a job on the workspace's [cluster] and return (default: run here)")
    a.set_defaults(regen_func=cmd_run, run_parser=a)

    a = rs.add_parser("status", help="the latest counts from the run's progress log")
    a.add_argument("path", metavar="PATH")
    a.add_argument("--json", action="store_true", help="the latest snapshot as JSON")
    a.set_defaults(regen_func=cmd_status)

    a = rs.add_parser("validate", help="check an output: unique ids, assistant last, counts against inputs")
    a.add_argument("path", metavar="PATH")
    a.add_argument("--input", action="append", default=[], metavar="FILE")
    a.add_argument("--mix", metavar="NAME")
    a.add_argument("--workspace", **ws)
    a.set_defaults(regen_func=cmd_validate)

    a = rs.add_parser("requeue", help="move failed rows back to the queue (the next run asks them)")
    a.add_argument("path", metavar="PATH")
    a.add_argument("--class", dest="error_class", metavar="CLASS", help="only this error class")
    a.set_defaults(regen_func=cmd_requeue)
    # A regeneration reads and writes its own files; it opens no supervisor session.
    regen.set_defaults(func=_run, session=False)


def _run(args: argparse.Namespace, out: TextIO) -> int:
    """Run the parsed ``regen`` command; the exit status."""
    err = sys.stderr
    try:
        return args.regen_func(args, out, err)
    except (UsageError, OutputError, ValueError) as exc:  # ServerURLError, DatasetError too
        err.write(f"error: {exc}\n")
        return 2
    except RunLocked as exc:
        err.write(f"error: {exc}\n")
        return 1


# -- helpers --------------------------------------------------------------------------------


def _workspace(args: argparse.Namespace):
    from backend.workspace import ConfigError
    from backend.flows.workspace import load_workspace

    try:
        return load_workspace(getattr(args, "workspace", None))
    except ConfigError as exc:
        raise UsageError(str(exc)) from None


def _server(value: str, args: argparse.Namespace, cache: dict[str, Any]) -> ServerSpec:
    v = value.strip()
    if "://" in v or ":" in v or "/" in v or any(c.isspace() for c in v):
        try:
            return ServerSpec(normalize_url(v))
        except ValueError as exc:
            raise UsageError(f"--server {exc}") from None
    if "ws" not in cache:
        cache["ws"] = _workspace(args)
    ws = cache["ws"]
    for entry in ws.config.server:
        if entry.get("name") == v:
            host = str(entry.get("host") or "127.0.0.1")
            if host in ("0.0.0.0", "::", ""):
                host = "127.0.0.1"
            return ServerSpec(normalize_url(f"http://{host}:{int(entry.get('port') or 30000)}"), name=v)
    routers = getattr(ws.config, "router", None) or []
    for entry in routers:
        if entry.get("name") == v:  # an sglang-router: the job also records the workers behind it
            from backend.sglang.router import RouterConfig, reach_host

            rc = RouterConfig.model_validate(entry)
            return ServerSpec(normalize_url(rc.url), name=v,
                              metrics=f"http://{reach_host(rc.host)}:{rc.metrics}")
    known = ", ".join(str(e.get("name")) for e in ws.config.server) or "none"
    rnames = ", ".join(str(e.get("name")) for e in routers)
    raise UsageError(f"--server {value!r}: not a URL and not a [[server]] of {ws.config_path} (known: {known}"
                     + (f"; routers: {rnames})" if rnames else ")"))


def _mix(name: str, args: argparse.Namespace, cache: dict[str, Any]) -> tuple[dict[str, Any], str]:
    from backend.regen.catalog import mixes

    ws = cache.get("ws") or _workspace(args)
    cache["ws"] = ws
    found = mixes(ws.config.dataset, ws.config.mix)
    if name not in found:
        raise UsageError(f"--mix {name!r}: no such [[mix]] in {ws.config_path} "
                         f"(known: {', '.join(found) or 'none'})")
    return found[name].model_dump(), str(ws.root)


def _config(args: argparse.Namespace, files: RunFiles) -> JobConfig:
    cache: dict[str, Any] = {}
    if args.input and args.mix:
        raise UsageError("give --input FILE ... or --mix NAME, not both")
    for p in args.input:
        path = Path(p).expanduser()
        if path.is_dir():
            raise UsageError(f"--input {p}: a folder, not a file; give the JSON lines or Parquet files in it")
        if not path.is_file():
            raise UsageError(f"--input {p}: no such file")
    servers = [_server(s, args, cache) for s in args.server]
    if files.job.exists():
        cfg = read_job_json(files)
        _same_inputs(cfg, args, files, cache)
    elif not (args.input or args.mix) or not servers:
        raise UsageError(f"{files.out}: a new run needs --input FILE (or --mix NAME) and --server URL_OR_NAME")
    else:
        cfg = JobConfig(out=files.out, servers=[], **DEFAULTS)
    cfg.out = files.out
    if servers:
        cfg.servers = servers
    if args.input:
        cfg.inputs, cfg.mix, cfg.root = [str(Path(p).expanduser().resolve()) for p in args.input], None, None
    elif args.mix:
        cfg.mix, cfg.root = _mix(args.mix, args, cache)
        cfg.inputs = []
    for key in ("concurrency", "max_tokens", "temperature", "top_p", "reasoning", "system_prompt", "model",
                "stream", "first_byte_timeout", "chunk_timeout", "startup_timeout", "max_attempts"):
        value = getattr(args, key)
        if value is not None:
            setattr(cfg, key, value)
    cfg.check()
    return cfg


def _same_inputs(cfg: JobConfig, args: argparse.Namespace, files: RunFiles, cache: dict[str, Any]) -> None:
    """Refuse to resume ``files`` with other inputs than it was made from (its ``.job.json``)."""
    if cfg.inputs:
        was = f"the files {', '.join(cfg.inputs)}"
    else:
        files_of = ", ".join(str(e.get("file")) for e in (cfg.mix or {}).get("entries") or [])
        was = f"the mix {(cfg.mix or {}).get('name')!r} ({files_of})"
    if args.input:
        given = [str(Path(p).expanduser().resolve()) for p in args.input]
        if given == list(cfg.inputs):
            return
        now = f"--input {', '.join(given)}"
    elif args.mix:
        mix, root = _mix(args.mix, args, cache)
        if cfg.mix is not None and mix == cfg.mix and root == cfg.root:
            return
        now = f"--mix {args.mix} ({', '.join(str(e.get('file')) for e in mix.get('entries') or [])})"
    else:
        return
    raise UsageError(f"{files.out} was made from {was} (see {files.job}); {now} is another input. Resume with "
                     "the same input, or give another --out")


# -- commands -------------------------------------------------------------------------------


def _submit_on_ray(args: argparse.Namespace, out: TextIO) -> int:
    """``run --where ray``: the same run as a job on the workspace's [cluster] (CPU only), saved with the
    dashboard's jobs so its Regeneration page follows it; returns once Ray has the job."""
    from backend.cli.session import Session, need_cluster, start_on_ray
    from backend.regen.control import args_argv, cli_job_spec

    s = Session(getattr(args, "workspace", None))
    try:
        need_cluster(s.ws, UsageError)
        args.out = str(Path(args.out).expanduser().resolve())  # the job's working folder is not this one
        args.input = [str(Path(p).expanduser().resolve()) for p in args.input]
        spec, meta = cli_job_spec(args_argv(args.run_parser, args, ("where", "workspace")), args.out, s.ws.root,
                                  s.ws.logs_dir)
        said = start_on_ray(s, spec, meta, f"progress: regen status {meta['out']}")
    finally:
        s.close()
    out.write(said)
    return 0


def cmd_run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if getattr(args, "where", "local") == "ray":
        return _submit_on_ray(args, out)
    # A SIGTERM/SIGINT from here until the job sets its own handlers ends the run the same way as
    # later: nothing asked, everything written kept, exit 130.
    received: list[str] = []

    def early(signum: int, frame: Any) -> None:
        received.append(signal.Signals(signum).name)

    old = {sig: signal.signal(sig, early) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        return _cmd_run(args, out, err, received)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _cmd_run(args: argparse.Namespace, out: TextIO, err: TextIO, received: list[str]) -> int:
    files = RunFiles.of(args.out)
    cfg = _config(args, files)
    if received:
        err.write(f"stopped ({received[0]}) while starting; nothing was asked\n")
        return 130
    from backend.regen.job import run_job

    def say(text: str) -> None:
        out.write(time.strftime("%H:%M:%S ") + text + "\n")
        out.flush()

    names = ", ".join(s.url + (f" ({s.name})" if s.name else "") for s in cfg.servers)
    say(f"regen {'resume' if files.exists() else 'start'}: {files.out} via {names}, "
        f"{cfg.concurrency} in flight per server")
    try:
        code = run_job(cfg, say=say, pending_stop=lambda: received[0] if received else None)
    except OSError as exc:  # e.g. a full disk: what was written before stays, a rerun resumes
        where = f"{exc.filename}: " if exc.filename else ""
        err.write(f"error: regen run failed: {where}{exc.strerror or exc}; every row written before is kept, "
                  "run the same command again to resume\n")
        return 1
    snap = last_snapshot(files.progress) or {}
    say(f"{snap.get('state', '?')}: {snap.get('done', 0)} done, {snap.get('failed', 0)} failed, "
        f"{snap.get('skipped', 0)} skipped of {snap.get('total', 0)}" + (f" - {snap['message']}" if snap.get("message")
                                                                          else ""))
    if code == 1 and snap.get("state") == "failed" and snap.get("message"):
        err.write(f"error: {snap['message']}\n")
    return code


def _eta(snap: dict[str, Any]) -> str:
    rate, left = snap.get("req_s") or 0, snap.get("remaining") or 0
    if not left:
        return "-"
    if not rate:
        return "N/A"
    s = int(left / rate)
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def _job_of(run_dir: Path, out: Path):
    """The regeneration job of the workspace (started from its dashboard) that writes ``out``, or None."""
    from backend.supervisor.adhoc import load_jobs

    want = out.expanduser().resolve()
    for job in load_jobs(run_dir):
        where = job.meta.get("out")
        if job.meta.get("kind") == "regen" and where and Path(where).expanduser().resolve() == want:
            return job
    return None


def _cost(args: argparse.Namespace, files: RunFiles, snap: dict[str, Any]):
    """What the run cost (:mod:`backend.flows.cost`): its servers' GPUs over its process's time, the energy
    from the power history the dashboard stored; unknown with why for a run this workspace did not start."""
    import os

    from backend.flows import cost as job_cost
    from backend.cli.session import Session
    from backend.workspace import CONFIG_NAME, resolve_root

    chosen = getattr(args, "workspace", None) or os.environ.get("SPECDECK_WORKSPACE")
    if not chosen:  # the workspace the output lies in, else the demo where it exists (never created here)
        found = next((d for d in files.out.parents if (d / CONFIG_NAME).is_file()), None)
        chosen = found or (resolve_root(None) if (resolve_root(None) / CONFIG_NAME).is_file() else None)
    if not chosen:
        return job_cost.unknown("no workspace was chosen (--workspace or $SPECDECK_WORKSPACE) and the output lies "
                                "in none, so no process record gives its time or GPUs", "no workspace")
    try:
        s = Session(str(chosen), act=False)
    except Exception as exc:  # a config or store error: the counts are still worth showing
        return job_cost.unknown(f"the workspace could not be opened to find this run's process record ({exc})",
                                "workspace not readable")
    try:
        job = _job_of(Path(s.ws.run_dir), files.out)
        view = None
        if job is not None:
            s.sup.sync_specs([job.spec], prune=False)
            view = s.sup.view(job.name)
        from backend.regen.follow import progress_follower

        try:  # a resumed run's earlier tokens are told from this start's by the progress history
            history = progress_follower(files.out).poll().history
        except (OSError, ValueError):
            history = None
        return job_cost.regen_cost(view, snap, s.fleet, power=job_cost.stored_power(s.store), history=history)
    finally:
        s.close()


def cost_fields(c) -> dict[str, Any]:
    """A job's cost in the command line's JSON: ``gpu_hours``, ``energy_kwh`` and ``tokens_per_kwh`` (null where not
    measured) and ``cost``, the whole record (:meth:`Cost.to_dict`) with ``na``, the few words beside an N/A."""
    return {"gpu_hours": c.gpu_hours, "energy_kwh": c.energy_kwh, "tokens_per_kwh": getattr(c, "tokens_per_kwh", None),
            "cost": {**c.to_dict(), "na": c.short_why or None}}


def cost_text(c) -> str:
    """``0.52 GPU-h, 0.14 kWh`` / ``0.52 GPU-h, energy N/A`` / ``N/A (not started)``."""
    if c.gpu_hours is None:
        return f"N/A ({c.short_why})"
    energy = f"{c.energy_kwh:,.2f} kWh" if c.energy_kwh is not None else "energy N/A"
    return f"{c.gpu_hours:,.2f} GPU-h, {energy}" + (" so far" if c.running else "")


def cmd_status(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    files = RunFiles.of(args.path)
    snap = last_snapshot(files.progress)
    if snap is None:
        err.write(f"error: {files.progress}: no progress log (has this run started?)\n")
        return 1
    live = locked(files.progress)
    c = _cost(args, files, snap)
    if args.json:
        json.dump(dict(snap, job_running=live, **cost_fields(c)), out, indent=2, ensure_ascii=False)
        out.write("\n")
        return 0
    age = time.time() - float(snap.get("t") or 0)
    state = snap.get("state", "?")
    if not live and state in ("starting", "running", "waiting", "pausing"):
        state += " (no job is running on it now)"
    total = snap.get("total") or 0
    finished = (snap.get("done") or 0) + (snap.get("failed") or 0) + (snap.get("skipped") or 0)
    pct = f"{100 * finished / total:.1f}%" if total else "-"
    out.write(f"{files.out}: {state}, snapshot {age:.0f} s old\n")
    out.write(f"  {finished:,}/{total:,} ({pct}): done {snap.get('done', 0):,}, failed {snap.get('failed', 0):,}, "
              f"skipped {snap.get('skipped', 0):,}, in flight {snap.get('in_flight', 0):,}, "
              f"remaining {snap.get('remaining', 0):,}\n")
    out.write(f"  {snap.get('req_s', 0):.2f} req/s, {snap.get('tok_s', 0):.1f} tok/s over {snap.get('window_s')} s; "
              f"ETA {_eta(snap)}; tokens: prompt {snap.get('prompt_tokens', 0):,}, "
              f"completion {snap.get('completion_tokens', 0):,}\n")
    for name, d in (snap.get("datasets") or {}).items():
        out.write(f"  dataset {name}: {d.get('done', 0):,}/{d.get('total', 0):,} done, {d.get('failed', 0)} failed, "
                  f"{d.get('skipped', 0)} skipped\n")
    for url, s in (snap.get("servers") or {}).items():
        label = url + (f" ({s['name']})" if s.get("name") else "")
        out.write(f"  server {label}: {s.get('state')}, {s.get('in_flight', 0)} in flight, {s.get('done', 0):,} done, "
                  f"{s.get('failed', 0)} failed, {s.get('retries', 0)} retries, {s.get('req_s', 0):.2f} req/s"
                  + (f", last error: {s['last_error']}" if s.get("last_error") else "") + "\n")
    for cls, e in (snap.get("errors") or {}).items():
        out.write(f"  errors {cls}: {e.get('count')} (e.g. {e.get('example')})\n")
    if snap.get("message"):
        out.write(f"  {snap['message']}\n")
    why = c.gpu_hours_why if c.gpu_hours is None else (c.energy_why if c.energy_kwh is None else c.gpus_from)
    tpk = getattr(c, "tokens_per_kwh", None)
    per_kwh = f", {tpk:,.0f} tokens/kWh" if tpk is not None else ""
    out.write(f"  cost: {cost_text(c)}{per_kwh}" + (f"; {why}" if why else "") + "\n")
    return 0


def _expected(args: argparse.Namespace, files: RunFiles) -> tuple[set[str], int] | None:
    from backend.regen.datasets import Skipped, read_mix

    cache: dict[str, Any] = {}
    if args.input and args.mix:
        raise UsageError("give --input FILE ... or --mix NAME, not both")
    if args.input or args.mix:
        cfg = JobConfig(out=files.out, servers=[], inputs=list(args.input))
        if args.mix:
            cfg.inputs = []
            cfg.mix, cfg.root = _mix(args.mix, args, cache)
    elif files.job.exists():
        cfg = read_job_json(files)
    else:
        return None
    ids: set[str] = set()
    skipped = 0
    for item in read_mix(cfg.mix_config(), Path(cfg.root or ".")):
        if isinstance(item, Skipped):
            skipped += 1
        else:
            ids.add(item.id)
    return ids, skipped


def cmd_validate(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    files = RunFiles.of(args.path)
    if not files.out.exists():
        err.write(f"error: {files.out}: no such file\n")
        return 1
    exp = _expected(args, files)
    v = validate(files, exp[0] if exp else None, exp[1] if exp else None)
    out.write(f"rows: {v.rows}\nassistant messages: {v.assistant_messages}\nerror rows: {v.errors}\n"
              f"skipped rows: {v.skipped}\nduplicate ids: {v.duplicates}\n")
    if v.inputs_checked:
        out.write(f"input ids missing from the output and error files: {len(v.missing)}"
                  + (f" (e.g. {', '.join(v.missing[:5])})" if v.missing else "") + "\n")
        out.write(f"output ids not in the inputs: {len(v.unknown)}"
                  + (f" (e.g. {', '.join(v.unknown[:5])})" if v.unknown else "") + "\n")
    else:
        out.write("inputs: not checked (give --input or --mix, or validate a run with a .job.json)\n")
    for p in v.problems:
        out.write(f"  {p}\n")
    if v.problem_count > len(v.problems):
        out.write(f"  ... and {v.problem_count - len(v.problems)} more\n")
    out.write("validation passed\n" if v.ok else "validation FAILED\n")
    return 0 if v.ok else 1


def cmd_requeue(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    files = RunFiles.of(args.path)
    if files.progress.exists() and locked(files.progress):
        err.write(f"error: a job is running on {files.out}; pause it first (its failed rows stay where they are)\n")
        return 1
    n = requeue(files, args.error_class)
    what = f"failed rows of class {args.error_class}" if args.error_class else "failed rows"
    out.write(f"{n} {what} moved back to the queue of {files.out}; the next regen run asks them again\n")
    return 0

