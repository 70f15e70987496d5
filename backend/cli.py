"""Specdeck's command line: the dashboard's process operations without a browser.

    python -m backend.cli [--workspace DIR] processes list [--json]
    python -m backend.cli [--workspace DIR] processes start NAME [--launch-anyway]
    python -m backend.cli [--workspace DIR] processes stop NAME [--no-wait]
    python -m backend.cli [--workspace DIR] processes stop-all
    python -m backend.cli [--workspace DIR] processes restart NAME [--launch-anyway]
    python -m backend.cli [--workspace DIR] processes log NAME [-n N] [--follow]
    python -m backend.cli [--workspace DIR] servers list
    python -m backend.cli [--workspace DIR] servers preflight NAME [--json]
    python -m backend.cli [--workspace DIR] supervise [--interval S]
    python -m backend.cli init DIR
    python -m backend.cli regen run|status|validate|requeue ...   (backend/regen/cli.py)

The workspace is the ``--workspace`` folder, else ``$SPECDECK_WORKSPACE``,
else the demo workspace.  Every start/stop/restart is written to the audit
log with the user's name and source ``cli``.  Starting a server runs its
preflight first; errors refuse the start unless ``--launch-anyway`` (audited).  Exit status: 0 done,
1 refused or failed, 2 bad usage or workspace config.
"""

from __future__ import annotations

import argparse
import getpass
import json
import signal
import sqlite3
import sys
import time
from pathlib import Path
from typing import TextIO

from backend.regen import cli as regen_cli
from backend.supervisor.logtail import LogTailer, read_last
from backend.supervisor.machine import describe_exit
from backend.supervisor.supervisor import Supervisor, SupervisorError
from backend.workspace import ConfigError, load_workspace
from state import Store

SOURCE = "cli"


class CommandError(Exception):
    """A failure to report to the user (exit status 1)."""


def _actor() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry in some containers
        return "unknown"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


class _Session:
    """The workspace, its store, a supervisor and the server fleet, closed together."""

    def __init__(self, workspace: str | None):
        from backend.sglang.fleet import ServerFleet

        self.ws = load_workspace(workspace)
        self.store = Store(self.ws.store_path)
        try:
            self.sup = Supervisor(self.store, self.ws.run_dir)
            self._telemetry = None
            self.fleet = ServerFleet(self.ws, self.sup, self.store, background=False, gpu_probe=self.gpu_probe)
            # Not pruning: a dashboard of an older config may still own records;
            # the dashboard prunes when it syncs.
            self.sup.sync_specs(self.ws.process_specs() + self.fleet.specs(), prune=False)
        except BaseException:
            self.store.close()
            raise

    def gpu_probe(self, exclude: str | None = None) -> list[tuple[int, int, int]] | None:
        """GPUs and free memory for preflight, from the workspace's telemetry source
        (as the dashboard sees them), read once per command."""
        from backend.telemetry.attribution import free_memory_by_gpu
        from backend.telemetry.sampler import make_workspace_sampler

        if self._telemetry is None:
            sampler = make_workspace_sampler(self.ws, None, managed=self.sup.views)
            self._telemetry = sampler.sample_once()
        return free_memory_by_gpu(self._telemetry, exclude)

    def close(self) -> None:
        self.fleet.close()
        self.sup.close()
        self.store.close()


def cmd_list(s: _Session, args: argparse.Namespace, out: TextIO) -> int:
    views = s.sup.views()
    if args.json:
        rows = [{
            "name": v.name, "kind": v.kind.value, "state": v.state.value, "pid": v.pid,
            "uptime_s": v.uptime_s, "exit_code": v.exit_code, "ready": v.ready, "readiness": v.readiness,
            "tries": v.tries, "detail": v.detail, "log_path": v.log_path, "state_since": v.state_since,
        } for v in views]
        json.dump(rows, out, indent=2)
        out.write("\n")
        return 0
    if not views:
        out.write(f"no managed processes in {s.ws.root}\n")
        return 0
    table = [("NAME", "KIND", "STATE", "PID", "UPTIME", "EXIT", "READY", "DETAIL")]
    for v in views:
        table.append((
            v.name, v.kind.value, v.state.value, str(v.pid) if v.pid else "-", _duration(v.uptime_s),
            "-" if v.exit_code is None else str(v.exit_code), "yes" if v.ready else "no", v.detail,
        ))
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]) - 1)]
    for r in table:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths)) + "  " + r[-1] + "\n")
    return 0


def _report(v, out: TextIO) -> None:
    pid = f" pid {v.pid}" if v.pid else ""
    code = f" ({describe_exit(v.exit_code)})" if v.state.value in ("EXITED", "FATAL") and v.exit_code is not None else ""
    out.write(f"{v.name}: {v.state.value}{pid}{code}\n")


def _launch_server(s: _Session, args: argparse.Namespace, out: TextIO) -> int:
    from backend.sglang.fleet import PreflightBlocked

    try:
        s.fleet.launch(args.name, actor=_actor(), source=SOURCE, launch_anyway=args.launch_anyway, wait=True)
    except PreflightBlocked as exc:
        _print_findings(exc.findings, out)
        raise CommandError(f"{args.name} was not started: preflight found errors "
                           "(fix them, or pass --launch-anyway to start it regardless; that is audited)") from None
    _report(s.sup.view(args.name), out)
    return 0


def cmd_start(s: _Session, args: argparse.Namespace, out: TextIO) -> int:
    if args.name in s.fleet.names():
        return _launch_server(s, args, out)
    _report(s.sup.start(args.name, actor=_actor(), source=SOURCE), out)
    return 0


def cmd_stop(s: _Session, args: argparse.Namespace, out: TextIO) -> int:
    _report(s.sup.stop(args.name, actor=_actor(), source=SOURCE, wait=not args.no_wait), out)
    return 0


def cmd_stop_all(s: _Session, args: argparse.Namespace, out: TextIO) -> int:
    failed = 0
    for v in s.sup.views():
        if v.live:
            try:
                _report(s.sup.stop(v.name, actor=_actor(), source=SOURCE, wait=True), out)
            except SupervisorError as exc:
                out.write(f"{v.name}: {exc}\n")
                failed += 1
    return 1 if failed else 0


def cmd_restart(s: _Session, args: argparse.Namespace, out: TextIO) -> int:
    if args.name in s.fleet.names():
        return _launch_server(s, args, out)
    _report(s.sup.restart(args.name, actor=_actor(), source=SOURCE), out)
    return 0


def _print_findings(findings, out: TextIO) -> None:
    for f in findings:
        out.write(f"{f.severity.upper():8} {f.code}: {f.found}\n")
        if f.fix:
            out.write(f"{'':8} fix: {f.fix}\n")


def cmd_servers_list(s: _Session, args: argparse.Namespace, out: TextIO) -> int:
    names = s.fleet.names()
    if not names:
        out.write(f"no [[server]] entries in {s.ws.config_path}\n")
    for name in names:
        cfg = s.fleet.config(name)
        v = s.sup.view(name)
        spec = cfg.speculative.algorithm or "off"
        out.write(f"{name}: {v.state.value if v else 'NEVER'} · {cfg.host}:{cfg.port} · speculation {spec}"
                  f"{' · simulated' if cfg.simulate else ''}\n")
    return 0


def cmd_servers_preflight(s: _Session, args: argparse.Namespace, out: TextIO) -> int:
    if args.name not in s.fleet.names():
        raise CommandError(f"no server named {args.name!r} in {s.ws.config_path}")
    findings = s.fleet.preflight(args.name)
    if args.json:
        from dataclasses import asdict

        json.dump([asdict(f) for f in findings], out, indent=2)
        out.write("\n")
    else:
        _print_findings(findings, out)
        errors = sum(1 for f in findings if f.severity == "error")
        out.write(f"preflight of {args.name}: {errors} error(s), "
                  f"{sum(1 for f in findings if f.severity == 'warning')} warning(s)\n")
    return 1 if any(f.severity == "error" for f in findings) else 0


def cmd_log(s: _Session, args: argparse.Namespace, out: TextIO) -> int:
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
    tailer = LogTailer(v.log_path, chunk.offset)
    try:
        while True:
            c = tailer.read()
            if c.reset:
                out.write(f"----- {v.log_path} was {'rotated' if c.rotated else 'truncated'} -----\n")
            if c.text:
                out.write(c.text)
                out.flush()
            time.sleep(0.5)
    except KeyboardInterrupt:
        return 0


def cmd_supervise(s: _Session, args: argparse.Namespace, out: TextIO) -> int:
    stop = False

    def _on_term(signum, frame):  # noqa: ARG001
        nonlocal stop
        stop = True

    previous = signal.signal(signal.SIGTERM, _on_term)
    out.write(f"supervising {s.ws.root} every {args.interval:g} s (Ctrl-C to stop; processes keep running)\n")
    out.flush()
    seen: dict[str, tuple[str, int | None]] = {}
    try:
        while not stop:
            s.sup.poll()
            for v in s.sup.views():
                key = (v.state.value, v.pid)
                if seen.get(v.name) != key:
                    seen[v.name] = key
                    out.write(time.strftime("%H:%M:%S ") + f"{v.name}: {v.state.value}"
                              + (f" pid {v.pid}" if v.pid else "") + (f" - {v.detail}" if v.detail else "") + "\n")
                    out.flush()
            deadline = time.monotonic() + args.interval
            while not stop and time.monotonic() < deadline:
                time.sleep(min(0.1, args.interval))
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
    out.write("supervise: stopped\n")
    return 0


def cmd_init(args: argparse.Namespace, out: TextIO) -> int:
    from backend.demo import write_demo_workspace

    root = Path(args.dir).expanduser().resolve()
    cfg = root / "specdeck.toml"
    existed = cfg.exists()
    write_demo_workspace(root)
    load_workspace(root)  # validates it and creates logs/, run/, outputs/
    out.write(f"{cfg}: {'already there, left as it was' if existed else 'written'}\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m backend.cli", description="Specdeck without the browser.")
    p.add_argument("--workspace", "-w", metavar="DIR",
                   help="workspace folder (default: $SPECDECK_WORKSPACE, else the demo workspace)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    procs = sub.add_parser("processes", help="list, start, stop, restart managed processes; show logs")
    ps = procs.add_subparsers(dest="action", required=True, metavar="ACTION")
    a = ps.add_parser("list", help="every managed process and its state")
    a.add_argument("--json", action="store_true", help="machine-readable output")
    a.set_defaults(func=cmd_list)
    a = ps.add_parser("start", help="start a process from the workspace config (servers: after preflight)")
    a.add_argument("name")
    a.add_argument("--launch-anyway", action="store_true", help="start a server despite preflight errors (audited)")
    a.set_defaults(func=cmd_start)
    a = ps.add_parser("stop", help="SIGTERM to its process group, SIGKILL after the grace period")
    a.add_argument("name")
    a.add_argument("--no-wait", action="store_true", help="return after SIGTERM (a supervisor finishes the stop)")
    a.set_defaults(func=cmd_stop)
    a = ps.add_parser("stop-all", help="stop every running process")
    a.set_defaults(func=cmd_stop_all)
    a = ps.add_parser("restart", help="stop (if running) and start again (servers: after preflight)")
    a.add_argument("name")
    a.add_argument("--launch-anyway", action="store_true", help="restart a server despite preflight errors (audited)")
    a.set_defaults(func=cmd_restart)
    a = ps.add_parser("log", help="the end of a process's log")
    a.add_argument("name")
    a.add_argument("-n", type=int, default=50, metavar="N", help="lines to show (default 50)")
    a.add_argument("--follow", "-f", action="store_true", help="keep printing new lines until Ctrl-C")
    a.set_defaults(func=cmd_log)

    servers = sub.add_parser("servers", help="SGLang servers: list, preflight")
    ss = servers.add_subparsers(dest="action", required=True, metavar="ACTION")
    a = ss.add_parser("list", help="every [[server]] entry and its state")
    a.set_defaults(func=cmd_servers_list)
    a = ss.add_parser("preflight", help="check a server's launch config (exit 1 on errors)")
    a.add_argument("name")
    a.add_argument("--json", action="store_true", help="machine-readable findings")
    a.set_defaults(func=cmd_servers_preflight)

    a = sub.add_parser("supervise", help="run the reconcile loop in the foreground until Ctrl-C")
    a.add_argument("--interval", type=float, default=1.0, metavar="S", help="seconds between polls (default 1)")
    a.set_defaults(func=cmd_supervise)

    regen_cli.add_parser(sub)

    a = sub.add_parser("init", help="create a workspace (with the demo config) in DIR")
    a.add_argument("dir")
    a.set_defaults(func=None)
    return p


def main(argv: list[str] | None = None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    args = build_parser().parse_args(argv)
    if args.command == "processes" and getattr(args, "n", 0) < 0:
        err.write("error: -n must be >= 0\n")
        return 2
    try:
        if args.command == "init":
            return cmd_init(args, out)
        if args.command == "regen":
            return regen_cli.main(args, out, err)
        session = _Session(args.workspace)
    except ConfigError as exc:
        err.write(f"error: {exc}\n")
        return 2
    except sqlite3.Error as exc:
        err.write(f"error: the state file of the workspace could not be opened or upgraded: {exc}\n")
        return 1
    try:
        return args.func(session, args, out)
    except (SupervisorError, CommandError) as exc:
        err.write(f"error: {exc}\n")
        return 1
    finally:
        session.close()


if __name__ == "__main__":
    sys.exit(main())
