"""The dashboard's backend objects, one set per workspace per process.

A :class:`Runtime` owns the state store, the supervisor and its background
poll loop, and the other background components (telemetry sampler, server
monitors) as they are wired in.  Pages reach it through
``ui.context.runtime()``; nothing here imports streamlit.
"""

from __future__ import annotations

import atexit
import getpass
import logging
import threading
import time
from pathlib import Path

from backend.supervisor.spec import ProcessSpec
from backend.workspace import Workspace, load_workspace
from backend.sglang.fleet import PreflightBlocked
from state import Store

__all__ = ["PreflightBlocked", "Runtime", "close_all", "current_actor", "get_runtime"]

log = logging.getLogger(__name__)


def current_actor() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry in some containers
        return "unknown"


class Runtime:
    def __init__(self, workspace: Workspace, *, background: bool = True):
        from backend.sglang.fleet import ServerFleet
        from backend.supervisor.supervisor import Supervisor, SupervisorLoop
        from backend.telemetry.sampler import make_workspace_sampler

        self.workspace = workspace
        self.started_at = time.time()
        self.store = Store(workspace.store_path)
        self.supervisor = Supervisor(self.store, workspace.run_dir)
        # GPU + host telemetry: one background sampler per workspace per process
        self.telemetry = make_workspace_sampler(workspace, self.store, managed=self.supervisor.views)
        if background:
            self.telemetry.start()
        self.fleet = ServerFleet(workspace, self.supervisor, self.store, background=background,
                                 gpu_probe=self.gpu_probe)
        self.supervisor.sync_specs(self.all_specs())
        self.loop = SupervisorLoop(self.supervisor, interval_s=1.0)
        self._closed = False
        self._autostart()
        if background:
            self.loop.start()

    # -- specs -----------------------------------------------------------

    def all_specs(self) -> list[ProcessSpec]:
        return list(self.workspace.process_specs()) + self.fleet.specs()

    def _autostart(self) -> None:
        """Start ``autostart`` processes and servers that have never run in this workspace."""
        names = self.workspace.autostart_names() + [n for n in self.fleet.names()
                                                    if self.fleet.config(n).autostart]
        for name in names:
            view = self.supervisor.view(name)
            if view is not None and view.started_at is not None:
                continue
            try:
                self.start(name, actor="specdeck", source="autostart")
            except Exception as exc:  # reported in the audit log
                log.warning("autostart of %s failed: %s", name, exc)

    # -- servers ---------------------------------------------------------

    def gpu_probe(self) -> list[tuple[int, int, int]] | None:
        """(index, total bytes, free bytes) per GPU from the latest telemetry, None without a driver."""
        snap = self.telemetry.latest()
        if snap is None or not snap.gpus:
            return None
        out = []
        for g in snap.gpus:
            if g.lost or g.mem_total is None:
                continue
            free = g.mem_total - g.mem_used if g.mem_used is not None else g.mem_total
            out.append((g.index, g.mem_total, free))
        return out

    def active_alerts(self) -> list:
        """Alerts for the sidebar: server alerts first, then GPU alerts."""
        out = list(self.fleet.active_alerts())
        snap = self.telemetry.latest()
        if snap is not None:
            out.extend(snap.alerts)
        return out

    # -- control (preflight for servers, audit for everything) ------------

    def start(self, name: str, *, actor: str, source: str, force: bool = False):
        """Start a process; a server goes through preflight first."""
        if name in self.fleet.names():
            return self.fleet.launch(name, actor=actor, source=source, launch_anyway=force)
        return self.supervisor.start(name, actor=actor, source=source)

    def restart(self, name: str, *, actor: str, source: str, force: bool = False):
        if name in self.fleet.names():
            return self.fleet.launch(name, actor=actor, source=source, launch_anyway=force)
        return self.supervisor.restart(name, actor=actor, source=source, wait=False)

    def stop(self, name: str, *, actor: str, source: str):
        return self.supervisor.stop(name, actor=actor, source=source, wait=False)

    # -- lifecycle ---------------------------------------------------------

    def close(self) -> None:
        """Stop background threads and close the store; managed processes live on."""
        if self._closed:
            return
        self._closed = True
        self.loop.stop()
        self.fleet.close()
        self.telemetry.stop()  # flushes the open history bucket, so before the store closes
        self.supervisor.close()
        self.store.close()


_lock = threading.Lock()
_runtimes: dict[Path, Runtime] = {}


def get_runtime(path: str | Path | None = None, *, background: bool = True) -> Runtime:
    """The process-wide runtime for the workspace at ``path`` (see load_workspace)."""
    ws = load_workspace(path)
    with _lock:
        rt = _runtimes.get(ws.root)
        if rt is None or rt._closed:
            rt = Runtime(ws, background=background)
            _runtimes[ws.root] = rt
        return rt


def close_all() -> None:
    with _lock:
        for rt in _runtimes.values():
            rt.close()
        _runtimes.clear()


atexit.register(close_all)
