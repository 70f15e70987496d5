"""Relaunch a managed server with another config, wait until it is ready, and put it back.

A sweep (and a deploy) changes a server's configuration, waits until the new run serves,
does its work, and then brings the server back as it was:

* :func:`relaunch_and_wait` preflights ``cfg`` (errors raise :class:`PreflightFailed` naming
  each finding, and nothing is stopped), relaunches through the fleet (which writes the
  edited config to the workspace file, as the Servers page does), then waits until the
  supervisor shows the new run RUNNING, i.e. its readiness probe passed.  A run that ends
  or does not become ready within ``timeout_s`` raises :class:`RelaunchFailed` with the
  last lines of the server's log.
* :func:`remember` records what is to be restored: the config, the workspace file's text
  and whether the server was running.
* A server behind a ``[[router]]`` is drained before it is stopped (out of the router, its requests
  in flight finished or the router's ``drain_timeout_s`` passed; :func:`backend.flows.router_sync.drain`)
  and joins again once the new run is ready.
* :func:`restore` writes the server's ``[[server]]`` entry back exactly as it was (every
  line and comment of that entry; the rest of the file keeps any edit made meanwhile),
  then relaunches the original config and waits for ready, or stops the server if it was
  not running before.

``session`` is anything with ``ws`` (the workspace), ``sup`` (the supervisor) and ``fleet``
(the server fleet), such as :class:`backend.cli.session.Session`.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from backend.filemodes import write_private
from backend.sglang.config import ServerConfig
from backend.sglang.preflight import Finding
from specdeck_types.process import ProcState

PhaseHook = Callable[[str, str], None]  # (phase, detail)
LOG_LINES = 20
POLL_S = 0.2


class RelaunchError(Exception):
    """The server could not be brought up with the config asked for."""


class PreflightFailed(RelaunchError):
    """Preflight found errors; nothing was stopped or written."""

    def __init__(self, name: str, findings: list[Finding]):
        self.name = name
        self.findings = list(findings)
        errors = [f for f in self.findings if f.severity == "error"]
        lines = [f"{f.code}: {f.found}" + (f" (fix: {f.fix})" if f.fix else "") for f in errors]
        super().__init__(f"preflight of {name} found {len(errors)} error(s): " + "; ".join(lines))


class RelaunchStopped(RelaunchError):
    """``stop`` was set while waiting for the server."""


class RelaunchFailed(RelaunchError):
    """The new run ended, or was not ready in time; ``log_tail`` holds its last log lines."""

    def __init__(self, message: str, log_tail: str = ""):
        self.log_tail = log_tail
        super().__init__(message + (f"\nlast lines of the log:\n{log_tail}" if log_tail.strip() else ""))


@dataclass(frozen=True)
class LaunchResult:
    name: str
    argv: tuple[str, ...]
    findings: tuple[Finding, ...]
    run_id: str | None
    pid: int | None
    ready_after_s: float  # from the relaunch to the readiness probe passing


@dataclass(frozen=True)
class Original:
    """What :func:`restore` brings back."""

    name: str
    config: dict[str, Any]  # ServerConfig, every field (JSON types)
    file_text: str  # the workspace file as it was
    running: bool

    @property
    def cfg(self) -> ServerConfig:
        return ServerConfig.model_validate(self.config)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "config": self.config, "file_text": self.file_text, "running": self.running}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Original":
        return cls(str(d["name"]), dict(d["config"]), str(d["file_text"]), bool(d["running"]))


def remember(session, name: str) -> Original:
    """The server ``name`` as it is now: its config, the workspace file's text, whether it runs."""
    if name not in session.fleet.names():
        raise RelaunchError(f"no server named {name!r} in {session.ws.config_path}")
    session.sup.poll(sync_probes=True)
    v = session.sup.view(name)
    return Original(name, session.fleet.config(name).model_dump(mode="json"),
                    session.ws.config_path.read_text(encoding="utf-8"), bool(v is not None and v.live))


def _phase(hook: PhaseHook | None, phase: str, detail: str = "") -> None:
    if hook is not None:
        hook(phase, detail)


def _log_tail(session, name: str) -> str:
    try:
        text, _ = session.sup.tail_last(name, LOG_LINES)
    except Exception:  # no log yet (the run never started): the message alone says why
        return ""
    return text.rstrip("\n")


def wait_ready(session, name: str, *, run_id: str | None, timeout_s: float, started: float | None = None,
               clock: Callable[[], float] = time.monotonic, stop: threading.Event | None = None) -> Any:
    """Poll the supervisor until run ``run_id`` of ``name`` is RUNNING; returns its view.

    Raises :class:`RelaunchFailed` when it ends (or another run replaced it) or when
    ``timeout_s`` passes first, :class:`RelaunchStopped` once ``stop`` is set."""
    started = clock() if started is None else started
    deadline = started + timeout_s
    while True:
        session.sup.poll(sync_probes=True)
        v = session.sup.view(name)
        if v is None:
            raise RelaunchFailed(f"{name} is no longer a managed process")
        if v.run_id == run_id and v.state == ProcState.RUNNING:
            return v
        if v.run_id != run_id:
            raise RelaunchFailed(f"{name} was restarted by someone else while waiting for it "
                                 f"(now {v.state.value}: {v.detail})", _log_tail(session, name))
        if v.state not in (ProcState.STARTING,):
            raise RelaunchFailed(f"{name} did not become ready: {v.state.value} ({v.detail})",
                                 _log_tail(session, name))
        if stop is not None and stop.is_set():
            raise RelaunchStopped(f"stopped while waiting for {name} to become ready")
        if clock() >= deadline:
            raise RelaunchFailed(f"{name} was not ready after {timeout_s:g} s "
                                 f"(readiness: {v.readiness}; state {v.state.value}: {v.detail})",
                                 _log_tail(session, name))
        if stop is not None:
            stop.wait(POLL_S)
        else:
            time.sleep(POLL_S)


def _drain(session, name: str, on_phase: PhaseHook | None):
    """Take a RUNNING server out of the routers in front of it and let its requests in flight finish
    (bounded by the routers' ``drain_timeout_s``) before it is stopped; the new run joins them again once
    it is ready (backend.flows.router_sync)."""
    from backend.flows.router_sync import drain

    if not getattr(session.fleet, "router_names", list)():
        return None
    session.sup.poll(sync_probes=True)
    res = drain(session.fleet, session.sup, session.ws.run_dir, name, on_phase=on_phase)
    if res is not None:
        left = "" if not res.in_flight else f", {res.in_flight} request(s) still in flight"
        _phase(on_phase, "drained", f"{name} out of {', '.join(res.routers) or 'no router'} after "
                                    f"{res.waited_s:.1f} s{left}")
    return res


def relaunch_and_wait(session, name: str, cfg: ServerConfig, *, actor: str, source: str, timeout_s: float,
                      on_phase: PhaseHook | None = None, stop: threading.Event | None = None) -> LaunchResult:
    """Preflight ``cfg``, relaunch server ``name`` with it and wait until the new run is ready
    (``stop``, when set meanwhile, ends the wait with :class:`RelaunchStopped`)."""
    from backend.sglang.fleet import PreflightBlocked
    from backend.supervisor.supervisor import SupervisorError
    from backend.workspace import ConfigError

    if name not in session.fleet.names():
        raise RelaunchError(f"no server named {name!r} in {session.ws.config_path}")
    _phase(on_phase, "preflight", f"checking {name}'s new configuration")
    findings = session.fleet.preflight(name, cfg)
    if any(f.severity == "error" for f in findings):
        raise PreflightFailed(name, findings)
    _drain(session, name, on_phase)
    _phase(on_phase, "relaunching", f"stopping {name} and starting it with the new configuration")
    t0 = time.monotonic()
    try:
        res = session.fleet.launch(name, cfg, actor=actor, source=source, findings=findings, wait=True)
    except PreflightBlocked as exc:  # the fleet checked again and found errors
        raise PreflightFailed(name, exc.findings) from exc
    except (SupervisorError, ConfigError) as exc:
        raise RelaunchFailed(f"could not relaunch {name}: {exc}", _log_tail(session, name)) from exc
    v = session.sup.view(name)
    _phase(on_phase, "waiting for ready", f"{name} is starting (run {v.run_id if v else '?'})")
    v = wait_ready(session, name, run_id=v.run_id if v else None, timeout_s=timeout_s, started=t0, stop=stop)
    return LaunchResult(name, tuple(res.argv), tuple(findings), v.run_id, v.pid, time.monotonic() - t0)


def restored_text(current_text: str, original_text: str, name: str) -> str:
    """``current_text`` with the ``[[server]]`` entry ``name`` replaced by the one in ``original_text``."""
    import tomlkit

    cur, orig = tomlkit.parse(current_text), tomlkit.parse(original_text)
    entries = [e for e in orig.get("server") or [] if e.get("name") == name]
    if not entries:
        raise RelaunchError(f"the saved workspace file has no [[server]] entry named {name!r}")
    servers = cur.get("server") or []
    for i, e in enumerate(servers):
        if e.get("name") == name:
            servers[i] = entries[0]
            return tomlkit.dumps(cur)
    raise RelaunchError(f"the workspace file no longer has a [[server]] entry named {name!r}")


def restore(session, name: str, original: Original, *, actor: str, source: str, timeout_s: float,
            on_phase: PhaseHook | None = None) -> LaunchResult | None:
    """Write ``name``'s entry back as it was and relaunch it (or stop it, if it was not running).

    Preflight errors do not block a restore (it brings back what ran before); they are
    audited as a launch despite errors.  Returns the relaunch's result, or None when the
    server was stopped instead."""
    from backend.supervisor.supervisor import SupervisorError
    from backend.flows.workspace import parse_config

    ws = session.ws
    _phase(on_phase, "restoring", f"writing {name}'s entry back into {ws.config_path}")
    current = ws.config_path.read_text(encoding="utf-8")
    text = restored_text(current, original.file_text, name)
    if text != current:
        cfg = parse_config(text, ws.config_path)  # raises ConfigError before anything is written
        write_private(ws.config_path, text)
        ws.config = cfg
    session.fleet.sync(ws)
    session.sup.poll(sync_probes=True)
    v = session.sup.view(name)
    if not original.running:
        if v is not None and v.live:
            _phase(on_phase, "restoring", f"stopping {name}, which was not running before")
            session.fleet.stop(name, actor=actor, source=source, wait=True)
        return None
    cfg = session.fleet.config(name)
    want = next(s for s in session.fleet.specs() if s.name == name)
    if v is not None and v.state == ProcState.RUNNING and not v.spec_pending \
            and tuple(v.spec.argv) == tuple(want.argv) and v.spec.env == want.env:
        return LaunchResult(name, tuple(v.spec.argv), (), v.run_id, v.pid, 0.0)  # runs as it was
    findings = session.fleet.preflight(name, cfg)
    forced = any(f.severity == "error" for f in findings)
    _drain(session, name, on_phase)
    _phase(on_phase, "restoring", f"relaunching {name} with its original configuration")
    t0 = time.monotonic()
    try:
        res = session.fleet.launch(name, cfg, actor=actor, source=source, findings=findings,
                                   launch_anyway=forced, wait=True)
    except SupervisorError as exc:
        raise RelaunchFailed(f"could not relaunch {name} with its original configuration: {exc}",
                             _log_tail(session, name)) from exc
    v = session.sup.view(name)
    _phase(on_phase, "waiting for ready", f"{name} is starting with its original configuration")
    v = wait_ready(session, name, run_id=v.run_id if v else None, timeout_s=timeout_s, started=t0)
    return LaunchResult(name, tuple(res.argv), tuple(findings), v.run_id, v.pid, time.monotonic() - t0)
