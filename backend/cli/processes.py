"""``processes``: list, start, stop, restart managed processes; show their logs."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Callable, TextIO

from backend.cli.session import SOURCE, CommandError, Session, actor, duration, print_findings, report

# The supervisor's modules come with the session a command opens, not with --help.


def cmd_list(s: Session, args: argparse.Namespace, out: TextIO) -> int:
    views = s.sup.views()
    if args.json:
        rows = [{
            "name": v.name, "kind": v.kind.value, "state": v.state.value, "pid": v.pid,
            "uptime_s": v.uptime_s, "exit_code": v.exit_code, "ready": v.ready, "readiness": v.readiness,
            "tries": v.tries, "detail": v.detail, "log_path": v.log_path, "state_since": v.state_since,
            "backend": v.backend, "submission_id": v.submission_id, "pending": v.pending,
        } for v in views]
        json.dump(rows, out, indent=2)
        out.write("\n")
        return 0
    if not views:
        out.write(f"no managed processes in {s.ws.root}\n")
        return 0
    table = [("NAME", "KIND", "WHERE", "STATE", "PID", "UPTIME", "EXIT", "READY", "DETAIL")]
    for v in views:
        table.append((
            v.name, v.kind.value, v.backend, v.state.value,
            str(v.pid) if v.pid else (v.submission_id or "-"), duration(v.uptime_s),
            "-" if v.exit_code is None else str(v.exit_code), "yes" if v.ready else "no", v.detail,
        ))
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]) - 1)]
    for r in table:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1] + "\n")
    return 0


def _launch_server(s: Session, args: argparse.Namespace, out: TextIO) -> int:
    from backend.sglang.fleet import PreflightBlocked

    try:
        s.fleet.launch(args.name, actor=actor(), source=SOURCE, launch_anyway=args.launch_anyway, wait=True)
    except PreflightBlocked as exc:
        print_findings(exc.findings, out)
        raise CommandError(f"{args.name} was not started: preflight found errors "
                           "(fix them, or pass --launch-anyway to start it regardless; that is audited)") from None
    report(s.sup.view(args.name), out)
    return 0


def cmd_start(s: Session, args: argparse.Namespace, out: TextIO) -> int:
    if args.name in s.fleet.names():
        return _launch_server(s, args, out)
    report(s.sup.start(args.name, actor=actor(), source=SOURCE), out)
    return 0


def cmd_stop(s: Session, args: argparse.Namespace, out: TextIO) -> int:
    report(s.sup.stop(args.name, actor=actor(), source=SOURCE, wait=not args.no_wait), out)
    return 0


def cmd_stop_all(s: Session, args: argparse.Namespace, out: TextIO) -> int:
    from backend.supervisor.supervisor import SupervisorError

    failed = 0
    for v in s.sup.views():
        if v.live:
            try:
                report(s.sup.stop(v.name, actor=actor(), source=SOURCE, wait=True), out)
            except SupervisorError as exc:
                out.write(f"{v.name}: {exc}\n")
                failed += 1
    return 1 if failed else 0


def cmd_restart(s: Session, args: argparse.Namespace, out: TextIO) -> int:
    if args.name in s.fleet.names():
        return _launch_server(s, args, out)
    report(s.sup.restart(args.name, actor=actor(), source=SOURCE), out)
    return 0


FOLLOW_INTERVAL_S = 0.25
FOLLOW_MAX_BYTES = 256 * 1024  # the most one read prints; a writer faster than that is skipped ahead


def follow(path: str, offset: int, out: TextIO, *, should_stop: Callable[[], bool] = lambda: False,
           interval_s: float = FOLLOW_INTERVAL_S, max_bytes: int = FOLLOW_MAX_BYTES) -> None:
    """Print what is appended to ``path`` from ``offset`` on until ``should_stop()``
    (or Ctrl-C).  When more than ``max_bytes`` arrived since the last read, it
    jumps to the newest lines and says how much it skipped, so a fast writer
    never leaves it further and further behind."""
    from backend.supervisor.logtail import LogTailer

    tailer = LogTailer(path, offset, max_bytes=max_bytes, skip_ahead=True)
    while not should_stop():
        c = tailer.read()
        if c.reset:
            out.write(f"----- {path} was {'rotated' if c.rotated else 'truncated'} -----\n")
        if c.skipped:
            out.write(f"----- skipped {c.skipped:,} bytes of {path} to keep up -----\n")
        if c.text:
            out.write(c.text)
            out.flush()
        time.sleep(interval_s)


def cmd_log(s: Session, args: argparse.Namespace, out: TextIO) -> int:
    from backend.supervisor.logtail import read_last

    v = s.sup.view(args.name)
    if v is None:
        raise CommandError(f"no managed process named {args.name!r} (known: {', '.join(s.sup.names()) or 'none'})")
    chunk = read_last(v.log_path, args.n)
    if chunk.missing:
        out.write(f"({v.log_path} does not exist yet)\n")
    out.write(chunk.text)
    out.flush()
    if not args.follow:
        return 0
    # On stderr, so the printed log stays clean: from here on every appended line is shown.
    sys.stderr.write(f"following {v.log_path} from byte {chunk.offset:,} (Ctrl-C to stop)\n")
    sys.stderr.flush()
    try:
        follow(v.log_path, chunk.offset, out)
    except KeyboardInterrupt:
        pass
    return 0


def _check_log(args: argparse.Namespace) -> str | None:
    return "-n must be >= 0" if args.n < 0 else None


def register(sub: argparse._SubParsersAction) -> None:
    procs = sub.add_parser("processes", help="list, start, stop, restart managed processes; show logs")
    ps = procs.add_subparsers(dest="action", required=True, metavar="ACTION")
    a = ps.add_parser("list", help="every managed process and its state")
    a.add_argument("--json", action="store_true", help="machine-readable output")
    a.set_defaults(func=cmd_list, acts=False)
    a = ps.add_parser("start", help="start a process from the workspace config (servers: after preflight)")
    a.add_argument("name")
    a.add_argument("--launch-anyway", action="store_true", help="start a server despite preflight errors (audited)")
    a.set_defaults(func=cmd_start)
    a = ps.add_parser("stop", help="SIGTERM to its process group, SIGKILL after the grace period")
    a.add_argument("name")
    a.add_argument("--no-wait", action="store_true", help="return after SIGTERM (a supervisor finishes the stop)")
    # A stop needs no store write to be true: the wrapper records the exit in the run files.
    a.set_defaults(func=cmd_stop, store_optional=True)
    a = ps.add_parser("stop-all", help="stop every running process")
    a.set_defaults(func=cmd_stop_all, store_optional=True)
    a = ps.add_parser("restart", help="stop (if running) and start again (servers: after preflight)")
    a.add_argument("name")
    a.add_argument("--launch-anyway", action="store_true", help="restart a server despite preflight errors (audited)")
    a.set_defaults(func=cmd_restart)
    a = ps.add_parser("log", help="the end of a process's log")
    a.add_argument("name")
    a.add_argument("-n", type=int, default=50, metavar="N", help="lines to show (default 50)")
    a.add_argument("--follow", "-f", action="store_true", help="keep printing new lines until Ctrl-C")
    a.set_defaults(func=cmd_log, check=_check_log, acts=False)
