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
from state import Store

log = logging.getLogger(__name__)


def current_actor() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry in some containers
        return "unknown"


class Runtime:
    def __init__(self, workspace: Workspace, *, background: bool = True):
        from backend.supervisor.supervisor import Supervisor, SupervisorLoop

        self.workspace = workspace
        self.started_at = time.time()
        self.store = Store(workspace.store_path)
        self.supervisor = Supervisor(self.store, workspace.run_dir)
        self.supervisor.sync_specs(self.all_specs())
        self.loop = SupervisorLoop(self.supervisor, interval_s=1.0)
        self._closed = False
        self._autostart()
        if background:
            self.loop.start()
        from backend.telemetry.sampler import make_workspace_sampler

        # GPU + host telemetry: one background sampler per workspace per process
        self.telemetry = make_workspace_sampler(workspace, self.store, managed=self.supervisor.views)
        if background:
            self.telemetry.start()

    # -- specs -----------------------------------------------------------

    def all_specs(self) -> list[ProcessSpec]:
        return list(self.workspace.process_specs())

    def _autostart(self) -> None:
        """Start ``autostart`` processes that have never run in this workspace."""
        for name in self.workspace.autostart_names():
            view = self.supervisor.view(name)
            if view is not None and view.started_at is not None:
                continue
            try:
                self.supervisor.start(name, actor="specdeck", source="autostart")
            except Exception as exc:  # reported in the audit log by the supervisor
                log.warning("autostart of %s failed: %s", name, exc)

    # -- lifecycle ---------------------------------------------------------

    def close(self) -> None:
        """Stop background threads and close the store; managed processes live on."""
        if self._closed:
            return
        self._closed = True
        self.loop.stop()
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
