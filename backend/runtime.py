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

from typing import TYPE_CHECKING

from backend.supervisor.spec import ProcessSpec
from backend.workspace import Workspace, load_workspace
from state import Store, audit

if TYPE_CHECKING:
    from backend.sglang.config import ServerConfig

log = logging.getLogger(__name__)


def current_actor() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry in some containers
        return "unknown"


class PreflightBlocked(RuntimeError):
    """A server launch was refused because preflight found errors."""

    def __init__(self, name: str, findings: list):
        self.name = name
        self.findings = findings
        errors = [f for f in findings if f.severity == "error"]
        super().__init__(f"preflight found {len(errors)} error(s) for {name}: "
                         + "; ".join(f.found for f in errors))


class Runtime:
    def __init__(self, workspace: Workspace, *, background: bool = True):
        from backend.supervisor.supervisor import Supervisor, SupervisorLoop

        self.workspace = workspace
        self.started_at = time.time()
        self.store = Store(workspace.store_path)
        self.servers = self._load_servers()
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
        self.monitors = {name: self._make_monitor(cfg) for name, cfg in self.servers.items()}
        if background:
            for mon in self.monitors.values():
                mon.start()

    # -- specs -----------------------------------------------------------

    def all_specs(self) -> list[ProcessSpec]:
        return list(self.workspace.process_specs()) + [self.server_spec(c) for c in self.servers.values()]

    def _autostart(self) -> None:
        """Start ``autostart`` processes and servers that have never run in this workspace."""
        names = self.workspace.autostart_names() + [n for n, c in self.servers.items() if c.autostart]
        for name in names:
            view = self.supervisor.view(name)
            if view is not None and view.started_at is not None:
                continue
            try:
                self.start(name, actor="specdeck", source="autostart")
            except Exception as exc:  # reported in the audit log
                log.warning("autostart of %s failed: %s", name, exc)

    # -- servers ---------------------------------------------------------

    def _load_servers(self) -> dict[str, "ServerConfig"]:
        from backend.sglang.config import ServerConfig

        return {c.name: c for c in (ServerConfig.model_validate(e) for e in self.workspace.config.server)}

    def server_spec(self, cfg: "ServerConfig") -> ProcessSpec:
        from backend.sglang.launch import to_process_spec

        return to_process_spec(cfg, self.workspace.logs_dir)

    def _make_monitor(self, cfg: "ServerConfig"):
        from backend.sglang.launch import log_path_for
        from backend.sglang.monitor import ServerMonitor

        return ServerMonitor(cfg, log_path_for(cfg, self.workspace.logs_dir))

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

    def preflight(self, cfg: "ServerConfig") -> list:
        """Preflight findings for ``cfg``, errors first."""
        from backend.sglang.preflight import run_preflight

        active = self.supervisor.view(cfg.name)
        running_here = active is not None and active.active and cfg.name in self.servers \
            and (self.servers[cfg.name].host, self.servers[cfg.name].port) == (cfg.host, cfg.port)
        # the port of a server that is about to be replaced is free by the time it starts
        port_probe = (lambda host, port: True) if running_here else None
        return run_preflight(cfg, gpu_probe=self.gpu_probe, port_probe=port_probe)

    # -- control (preflight for servers, audit for everything) ------------

    def start(self, name: str, *, actor: str, source: str, force: bool = False):
        """Start a process; a server goes through preflight first."""
        self._preflight_gate(name, self.servers.get(name), actor=actor, source=source, force=force,
                             action="start")
        return self.supervisor.start(name, actor=actor, source=source)

    def restart(self, name: str, *, actor: str, source: str, force: bool = False):
        self._preflight_gate(name, self.servers.get(name), actor=actor, source=source, force=force,
                             action="restart")
        return self.supervisor.restart(name, actor=actor, source=source, wait=False)

    def stop(self, name: str, *, actor: str, source: str):
        return self.supervisor.stop(name, actor=actor, source=source, wait=False)

    def relaunch_server(self, name: str, cfg: "ServerConfig", *, actor: str, source: str,
                        force: bool = False):
        """Preflight ``cfg``, write it to the workspace file, then stop and start the server.

        Errors block unless ``force`` ("launch anyway"), which is audited.
        """
        if name not in self.servers:
            raise KeyError(f"no server named {name!r} in {self.workspace.config_path}")
        if cfg.name != name:
            raise ValueError("a relaunch keeps the server's name")
        self._preflight_gate(name, cfg, actor=actor, source=source, force=force, action="relaunch")
        if cfg != self.servers[name]:
            from backend.workspace import update_server_entry

            update_server_entry(self.workspace, name,
                                cfg.model_dump(mode="json", exclude_defaults=True) | {"name": name,
                                                                                     "model_path": cfg.model_path})
            audit.record(self.store, actor, source, "edit-config", name,
                         detail=f"server config written to {self.workspace.config_path}")
        self.servers[name] = cfg
        self.supervisor.register(self.server_spec(cfg))
        self.monitors[name].set_config(cfg)
        view = self.supervisor.view(name)
        if view is not None and view.active:
            return self.supervisor.restart(name, actor=actor, source=source, wait=False)
        return self.supervisor.start(name, actor=actor, source=source)

    def _preflight_gate(self, name: str, cfg, *, actor: str, source: str, force: bool, action: str) -> None:
        if cfg is None:
            return
        from backend.sglang.preflight import has_errors

        findings = self.preflight(cfg)
        if not has_errors(findings):
            return
        errors = [f for f in findings if f.severity == "error"]
        codes = ", ".join(f.code for f in errors)
        if not force:
            audit.record(self.store, actor, source, action, name, detail=f"blocked by preflight: {codes}",
                         outcome="refused")
            raise PreflightBlocked(name, findings)
        audit.record(self.store, actor, source, "launch-anyway", name,
                     detail=f"{action} despite preflight errors: {codes}")

    # -- lifecycle ---------------------------------------------------------

    def close(self) -> None:
        """Stop background threads and close the store; managed processes live on."""
        if self._closed:
            return
        self._closed = True
        self.loop.stop()
        for mon in getattr(self, "monitors", {}).values():
            mon.stop()
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
