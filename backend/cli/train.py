"""``train``: SpecForge training logs, tracker files and checkpoints, without the browser.

    python -m backend.cli train parselog LOG [--json] [--follow]
    python -m backend.cli train tracker DIR [--json]
    python -m backend.cli train checkpoints DIR [--run-id ID] [--json]
    python -m backend.cli train inspect CHECKPOINT [--target MODEL_DIR] [--sglang-version V]
                                                   [--draft-config FILE] [--json]

``parselog`` prints one line per record (``--json``: one JSON object per line, with step, epoch,
position where it has one, split and each metric) and, on stderr, every line it could not read (and every
value it dropped) as ``LOG:LINE: why``, then the counts.  Bad lines never stop it: exit 0, 2 when the file
cannot be read.  ``--follow`` keeps reading as the log grows (woken by file events, else every second)
until interrupted; the counts are printed then.
``tracker`` reads TensorBoard event files under DIR (SpecForge writes them to ``<output_dir>/runs``) or an
MLflow file-store run folder.  ``inspect --target`` runs the Servers page's draft preflight for the
checkpoint against that target model: exit 1 on errors.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

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
    from backend.train.reader import TrainLogReader

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
        import threading

        stop = threading.Event()
        previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())  # end like Ctrl-C, with the counts
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
    gen = f"SpecForge Gen-{reader.generation}" if reader.generation else "generation not told by the log"
    err.write(f"{path}: {st.lines:,} lines, {st.records:,} records, {st.ignored:,} other lines, "
              f"{st.unparsed:,} unparsed, {st.values_rejected:,} values dropped; {gen}\n")
    return 0


def _follow(path: Path, read_new, out: TextIO, stop) -> None:
    """Read what is appended until Ctrl-C or ``stop`` is set (SIGTERM), woken by file events with a 1 s
    polling fallback."""
    import threading

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
                 "run_id": c.run_id, "latest": c.latest, "best": c.best} for c in run.checkpoints]
        json.dump({"output_dir": str(run.output_dir), "checkpoints": rows, "best_meta": run.best_meta,
                   "problems": list(run.problems)}, out, indent=2)
        out.write("\n")
    else:
        if not run.checkpoints:
            out.write(f"{run.output_dir}: no checkpoint folders (epoch_N, epoch_N_step_M or RUN-stepN)\n")
        for c in run.checkpoints:
            marks = " ".join(m for m, on in (("latest", c.latest), ("best", c.best)) if on)
            where = " ".join(f"{k} {v}" for k, v in (("epoch", c.epoch), ("step", c.step)) if v is not None)
            out.write(f"{c.name}  Gen-{c.generation}  {where}{'  [' + marks + ']' if marks else ''}\n")
        for p in run.problems:
            out.write(f"problem: {p}\n")
    return 0 if not run.problems or run.checkpoints else 1


def cmd_inspect(args: argparse.Namespace, out: TextIO) -> int:
    from backend.cli.session import print_findings
    from backend.train.checkpoints import inspect_checkpoint, preflight_checkpoint

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
    return 1 if findings and any(f.severity == "error" for f in findings) else 0


def register(sub: argparse._SubParsersAction) -> None:
    train = sub.add_parser("train", help="SpecForge training: parse logs and tracker files, list and inspect "
                                         "checkpoints")
    ts = train.add_subparsers(dest="action", required=True, metavar="ACTION")
    from backend.train.cli_deploy import register as register_deploy  # train deploy (backend/train/cli_deploy.py)
    register_deploy(ts)
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
