"""The workspace's SGLang servers: configs, process specs, monitors, preflight and relaunch.

The runtime owns one :class:`ServerFleet`.  It turns the ``[[server]]`` entries
of the workspace file into supervisor specs and one :class:`ServerMonitor` each,
and carries out the page's control actions:

* ``preflight(name, cfg)``: the findings for a (possibly edited) config;
* ``launch(name, cfg, actor=..., launch_anyway=...)``: preflight, refuse on
  errors unless ``launch_anyway`` (audited as ``launch-anyway``), then stop
  the running server and start it with the new spec, without waiting; the
  page then watches the snapshot until RUNNING;
* ``stop(name, actor=...)``.

An edited config is written back to the workspace file's ``[[server]]`` entry
(``backend.workspace.update_server_entry``: comments kept, validated first), so
it survives a dashboard restart.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from backend.sglang.alerts import Alert
from backend.sglang.argcheck import warm_parser
from backend.sglang.config import ServerConfig
from backend.sglang.launch import build_argv, to_process_spec
from backend.sglang.monitor import ServerMonitor, ServerSnapshot
from backend.sglang.preflight import Finding, has_errors, run_preflight
from backend.sglang.router import RouterConfig
from backend.sglang.router import to_process_spec as router_spec
from backend.sglang.runs import RunInfo
from backend.sglang.version import Capabilities, resolve_capabilities
from specdeck_types.process import ProcessSpec

log = logging.getLogger(__name__)


class PreflightBlocked(Exception):
    """Launch refused: preflight found errors and "launch anyway" was not confirmed."""

    def __init__(self, findings: list[Finding]):
        self.findings = findings
        errs = [f for f in findings if f.severity == "error"]
        super().__init__("; ".join(f"{f.code}: {f.found}" for f in errs))


@dataclass(frozen=True)
class LaunchResult:
    name: str
    argv: tuple[str, ...]
    findings: tuple[Finding, ...]
    forced: bool  # launched despite errors


class ServerFleet:
    def __init__(self, workspace, supervisor, store=None, *, background: bool = True,
                 gpu_probe: Callable | None = None, monitor_kwargs: dict | None = None):
        self.workspace = workspace
        self.supervisor = supervisor
        self.store = store if store is not None else getattr(supervisor, "store", None)
        self.gpu_probe = gpu_probe
        self._lock = threading.RLock()
        # held by a launch from its write of the workspace file to its new spec, and by the runtime's reload
        # from its read of the file to the specs it sets: a reload that read the file before a launch wrote it
        # must not set its older config after the launch (the relaunch would start without the edit)
        self.file_lock = threading.RLock()
        self._configs: dict[str, ServerConfig] = {}
        self._caps: dict[str, Capabilities] = {}
        self._monitors: dict[str, ServerMonitor] = {}
        self._background = background
        self._monitor_kwargs = monitor_kwargs or {}
        self._routers: dict[str, RouterConfig] = {c.name: c for c in self._router_configs(workspace)}
        for cfg in self._workspace_configs(workspace):
            self._add(cfg)

    @staticmethod
    def _workspace_configs(workspace) -> list[ServerConfig]:
        # the workspace validated every entry already
        return [ServerConfig.model_validate(e) for e in getattr(workspace.config, "server", []) or []]

    @staticmethod
    def _router_configs(workspace) -> list[RouterConfig]:
        return [RouterConfig.model_validate(e) for e in getattr(workspace.config, "router", []) or []]

    def _add(self, cfg: ServerConfig, caps: Capabilities | None = None) -> None:
        self._configs[cfg.name] = cfg
        self._caps[cfg.name] = caps or resolve_capabilities(cfg)
        mon = ServerMonitor(cfg, self.log_path(cfg.name), self._caps[cfg.name], **self._monitor_kwargs)
        self._monitors[cfg.name] = mon
        if self._background:
            mon.start()
            # SGLang's parser imports sglang now, so the page's first preflight need not wait for it
            warm_parser(cfg, self._caps[cfg.name])

    def sync(self, workspace) -> None:
        """Follow an edited workspace file: add new servers, drop removed ones,
        take changed configs (a running server keeps its process until relaunched)."""
        wanted = {c.name: c for c in self._workspace_configs(workspace)}
        with self._lock:
            current = dict(self._configs)
        # version detection may run the serving interpreter: never under the lock
        caps = {n: resolve_capabilities(c) for n, c in wanted.items() if current.get(n) != c}
        removed = []
        routers = {c.name: c for c in self._router_configs(workspace)}
        with self._lock:
            self.workspace = workspace
            self._routers = routers
            for name in [n for n in self._configs if n not in wanted]:
                removed.append(self._monitors.pop(name))
                del self._configs[name], self._caps[name]
            for name, cfg in wanted.items():
                if name not in self._configs:
                    self._add(cfg, caps.get(name))
                elif cfg != self._configs[name]:
                    self._configs[name] = cfg
                    self._caps[name] = caps.get(name) or resolve_capabilities(cfg)
                    self._monitors[name].set_config(cfg, self._caps[name])
                    if self._background:
                        warm_parser(cfg, self._caps[name])
        for mon in removed:  # joins its thread: outside the lock
            mon.stop()

    # -- config ----------------------------------------------------------------

    def _save(self, cfg: ServerConfig) -> None:
        """Write ``cfg`` back to the workspace file (what the user set, not every default)."""
        from backend.workspace import update_server_entry

        update_server_entry(self.workspace, cfg.name, cfg.model_dump(mode="json", exclude_unset=True))

    def names(self) -> list[str]:
        with self._lock:
            return list(self._configs)

    def config(self, name: str) -> ServerConfig:
        return self._configs[name]

    def capabilities(self, name: str) -> Capabilities:
        return self._caps[name]

    def warm_parser(self, name: str) -> None:
        """Keep SGLang's parser for ``name``'s launch warm (started again if it ended idle);
        never waits."""
        warm_parser(self._configs[name], self._caps[name])

    def log_path(self, name: str) -> Path:
        return Path(self.workspace.log_path(name))

    def specs(self) -> list[ProcessSpec]:
        """Supervisor specs of every server and every router (the runtime adds them to the process specs)."""
        with self._lock:
            items = [(cfg, self._caps[n]) for n, cfg in self._configs.items()]
            routers = list(self._routers.values())
        return [to_process_spec(cfg, self.workspace.logs_dir, caps) for cfg, caps in items] + \
            [router_spec(r, self.workspace.logs_dir, self.workspace.root) for r in routers]

    # -- routers -----------------------------------------------------------------

    def router_names(self) -> list[str]:
        with self._lock:
            return list(self._routers)

    def router_config(self, name: str) -> RouterConfig:
        with self._lock:
            return self._routers[name]

    def router_members(self, name: str) -> list[str]:
        """The servers behind router ``name``."""
        with self._lock:
            return self._routers[name].members(list(self._configs))

    def argv(self, cfg: ServerConfig) -> list[str]:
        return build_argv(cfg, resolve_capabilities(cfg))

    # -- reading ---------------------------------------------------------------------

    def monitor(self, name: str) -> ServerMonitor:
        return self._monitors[name]

    def _run(self, name: str) -> RunInfo | None:
        """The supervisor's current run of ``name`` (its figures are the only ones shown)."""
        try:
            return RunInfo.of(self.supervisor.view(name))
        except Exception:  # a supervisor that cannot answer: the log alone decides
            log.exception("could not read the supervisor's view of %s", name)
            return None

    def snapshot(self, name: str) -> ServerSnapshot:
        return self._monitors[name].snapshot(self._run(name))

    def snapshots(self) -> list[ServerSnapshot]:
        with self._lock:
            monitors = list(self._monitors.items())
        return [m.snapshot(self._run(n)) for n, m in monitors]

    def active_alerts(self) -> list[Alert]:
        out = []
        for s in self.snapshots():
            if s.alert is not None:
                out.append(Alert(s.alert.severity, s.alert.code, f"{s.name}: {s.alert.title}", s.alert.message,
                                 s.alert.causes, s.alert.since))
            if s.fatal is not None:
                out.append(Alert("error", "server-fatal", f"{s.name}: {s.fatal.title}", s.fatal.message,
                                 (s.fatal.hint,) if s.fatal.hint else (), s.fatal.ts))
        return out

    # -- actions -----------------------------------------------------------------------

    def _running(self, name: str) -> bool:
        v = self.supervisor.view(name)
        return v is not None and v.live

    def preflight(self, name: str, cfg: ServerConfig | None = None, *,
                  port_probe: Callable | None = None) -> list[Finding]:
        """Findings for ``cfg`` (default: the current config) of server ``name``.

        When the server runs now on the same host and port, the port check is
        skipped: the stop before the launch frees it.
        """
        cfg = cfg or self._configs[name]
        running = self._running(name)
        probe = port_probe
        if probe is None and running and _listen_addr(self.supervisor.view(name)) == (cfg.host, cfg.port):
            probe = lambda host, port: True  # noqa: E731 (held by this very server, stopped before the start)
        gpu_probe = self.gpu_probe
        if gpu_probe is not None and running:
            # memory this very server holds is free again once it is replaced
            gpu_probe = lambda: self.gpu_probe(exclude=name)  # noqa: E731
        return run_preflight(cfg, gpu_probe=gpu_probe, port_probe=probe, version=resolve_capabilities(cfg))

    def launch(self, name: str, cfg: ServerConfig | None = None, *, actor: str, source: str = "dashboard",
               launch_anyway: bool = False, findings: list[Finding] | None = None,
               wait: bool = False) -> LaunchResult:
        """Preflight, then (re)start ``name`` with ``cfg``.  Does not wait for ready.

        Raises :class:`PreflightBlocked` when preflight has errors and
        ``launch_anyway`` is false (the refusal is audited).
        """
        with self.file_lock, self._lock:
            if name not in self._configs:
                raise KeyError(f"no server named {name!r} (known: {', '.join(self._configs) or 'none'})")
            cfg = cfg or self._configs[name]
            if cfg.name != name:
                raise ValueError(f"the config is for {cfg.name!r}, not {name!r}")
            findings = findings if findings is not None else self.preflight(name, cfg)
            errors = [f for f in findings if f.severity == "error"]
            if errors and not launch_anyway:
                self._audit(actor, source, "launch", name,
                            "preflight errors: " + ", ".join(f.code for f in errors), "refused")
                raise PreflightBlocked(findings)
            if errors:
                self._audit(actor, source, "launch-anyway", name,
                            "launched despite preflight errors: " + "; ".join(f"{f.code}: {f.found}" for f in errors),
                            "ok")
            caps = resolve_capabilities(cfg)
            spec = to_process_spec(cfg, self.workspace.logs_dir, caps)
            changed = cfg != self._configs[name]
            if changed:
                self._save(cfg)  # raises ConfigError (file:line: key: reason) before anything stops
            self._configs[name] = cfg
            self._caps[name] = caps
            # a running server keeps its process until stopped; the new spec is
            # used by the start that follows (kept in the state store, so any
            # supervisor that records the exit starts it: the caller never waits)
            self.supervisor.register(spec)
            self._monitors[name].set_config(cfg, caps)
            if self._running(name):
                # wait=True (a one-shot command line) stops, then starts, before returning
                self.supervisor.restart(name, actor=actor, source=source, wait=wait)
            else:
                self.supervisor.start(name, actor=actor, source=source)
            return LaunchResult(name, spec.argv, tuple(findings), bool(errors))

    def stop(self, name: str, *, actor: str, source: str = "dashboard", wait: bool = False):
        return self.supervisor.stop(name, actor=actor, source=source, wait=wait)

    def _audit(self, actor: str, source: str, action: str, target: str, detail: str, outcome: str) -> None:
        if self.store is None:
            return
        try:
            from state import audit

            audit.record(self.store, actor, source, action, target, detail, outcome)
        except Exception:  # the action's result must not depend on the audit write
            log.exception("could not audit %s %s", action, target)

    def close(self) -> None:
        for m in self._monitors.values():
            m.stop()


def _listen_addr(view) -> tuple[str, int] | None:
    """(host, port) that the run of ``view`` was launched with, from its argv."""
    if view is None or view.spec is None:
        return None
    argv = list(view.spec.argv)
    host, port = "127.0.0.1", 30000  # sglang.launch_server's defaults
    for flag, value in zip(argv, argv[1:]):
        if flag == "--host":
            host = value
        elif flag == "--port":
            try:
                port = int(value)
            except ValueError:
                return None
    return host, port


def findings_as_rows(findings: list[Finding]) -> list[dict[str, Any]]:
    return [{"severity": f.severity, "check": f.code, "found": f.found, "fix": f.fix, "field": f.field or ""}
            for f in findings]


__all__ = ["ServerFleet", "PreflightBlocked", "LaunchResult", "findings_as_rows", "has_errors"]
