"""``supervise``: the reconcile loop in the foreground, and the alerts' rules evaluated every
``[alerts] interval_s`` with their notifications (a 24-55 h run is watched without a dashboard)."""

from __future__ import annotations

import argparse
import signal
import time
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:  # the session is opened by backend.cli.main, not by --help
    from backend.cli.session import Session


class _Headless:
    """What the alerts read from a running dashboard, from this command line's session: the workspace,
    its store, the supervisor, the servers and the jobs started from a page (no GPU sampler here)."""

    telemetry = None

    def __init__(self, s: Session):
        self.workspace, self.store, self.supervisor, self.fleet = s.ws, s.store, s.sup, s.fleet

    def jobs(self) -> list:
        from backend.supervisor.adhoc import load_jobs

        return load_jobs(self.workspace.run_dir)


def cmd_supervise(s: Session, args: argparse.Namespace, out: TextIO) -> int:
    stop = False

    def _on_term(signum, frame):  # noqa: ARG001
        nonlocal stop
        stop = True

    previous = signal.signal(signal.SIGTERM, _on_term)
    out.write(f"supervising {s.ws.root} every {args.interval:g} s (Ctrl-C to stop; processes keep running)\n")
    out.flush()
    seen: dict[str, tuple[str, int | None]] = {}
    # Everything this loop uses is imported here, before the alerts' thread starts: two threads importing
    # the same package lazily at once can deadlock on the import locks (seen: this thread importing the
    # telemetry package for the targets file while the alerts' thread imported its NVML module).
    from backend.flows.prom_targets import writer_for  # the file_sd file Prometheus reads
    from backend.flows.router_sync import RouterSync

    routers = RouterSync(s.fleet, s.sup, s.ws.run_dir)  # [[router]] workers follow the servers' states
    targets = writer_for(s.ws, s.fleet, s.sup)
    alerts = None
    if not args.no_alerts:
        from backend.flows.alerts import AlertLoop, engine_for

        alerts = AlertLoop(_Headless(s), engine_for(s.ws, s.store)).start()
    try:
        while not stop:
            s.sup.poll()
            targets.sync()
            if s.fleet.router_names():
                routers.tick()
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
        if alerts is not None:
            alerts.stop()
    out.write("supervise: stopped\n")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    a = sub.add_parser("supervise", help="run the reconcile loop in the foreground until Ctrl-C")
    a.add_argument("--interval", type=float, default=1.0, metavar="S", help="seconds between polls (default 1)")
    a.add_argument("--no-alerts", action="store_true", help="do not evaluate the alerts' rules nor notify")
    a.set_defaults(func=cmd_supervise)
