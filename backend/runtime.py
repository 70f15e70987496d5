"""The dashboard's backend objects, one set per workspace per process.

A :class:`Runtime` owns the state store, the supervisor and its poll loop,
the telemetry sampler, the SGLang server fleet (one monitor per server) and
a watcher that follows edits of the workspace file.  All of them run in
background threads; pages only read their snapshots, through
``ui.context.runtime()``.  Nothing here imports streamlit.
"""

from __future__ import annotations

import atexit
import getpass
import logging
import os
import secrets
import threading
import time
from pathlib import Path

from backend.auth import USERS_FILE, AccessPolicy, Authority, Caller, NotAuthorised, UserStore
from backend.workspace import ConfigError, Workspace, read_config_text, resolve_root
from backend.flows.workspace import load_workspace, parse_config
from backend.sglang.fleet import PreflightBlocked
from specdeck_types.process import ProcessSpec
from state import Store, audit

__all__ = ["NotAuthorised", "PreflightBlocked", "Runtime", "close_all", "current_actor", "get_runtime"]

log = logging.getLogger(__name__)


def current_actor() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry in some containers
        return "unknown"


class Runtime:
    """Everything the dashboard runs for one workspace.

    ``background=False`` starts no threads (tests and one-shot tools drive
    ``supervisor.poll()`` and ``maybe_reload()`` themselves).  Closing it
    stops the threads; managed processes keep running.
    """

    def __init__(self, workspace: Workspace, *, background: bool = True):
        from backend.sglang.fleet import ServerFleet
        from backend.supervisor.loop import SupervisorLoop
        from backend.supervisor.supervisor import Supervisor
        from backend.telemetry.sampler import make_workspace_sampler

        self.workspace = workspace
        self.started_at = time.time()
        self.config_error: ConfigError | None = None  # an edit that did not validate
        self._stamp = _config_stamp(workspace)
        self._background = background
        self._reload_lock = threading.Lock()
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self._closed = False
        self.telemetry = self.fleet = self.loop = self.supervisor = self.train = None
        self.alerts = self.alert_loop = None  # the alerts engine and its evaluation thread
        self.store = Store(workspace.store_path)
        # who may control: users.toml of the workspace, sessions in this process
        self.access_token = dashboard_token(workspace)
        self.auth = Authority(UserStore(workspace.root / USERS_FILE), audit=self._audit_auth,
                              workspace_root=str(workspace.root), policy=self.access_policy)
        try:
            self.supervisor = Supervisor(self.store, workspace.run_dir, default_cwd=workspace.root)
            # GPU + host telemetry: one background sampler per workspace per process
            self.telemetry = make_workspace_sampler(workspace, self.store, managed=self.supervisor.views)
            if background:
                self.telemetry.start()
            self.fleet = ServerFleet(workspace, self.supervisor, self.store, background=background,
                                     gpu_probe=self.gpu_probe)
            from backend.train.runs import TrainRuns

            self.train = TrainRuns(workspace, self.supervisor, self.store, authorise=self.authorise)
            self.supervisor.sync_specs(self.all_specs())
            self.loop = SupervisorLoop(self.supervisor, interval_s=1.0)
            from backend.flows.alerts import AlertLoop, engine_for

            self.alerts = engine_for(workspace, self.store)
            self.alert_loop = AlertLoop(self, self.alerts)
            from backend.flows.router_sync import RouterSync

            # [[router]] workers follow the servers' states; the thread ends with the runtime (self._stop)
            self.router_sync = RouterSync(self.fleet, self.supervisor, workspace.run_dir)
            if background:
                self.router_sync.run_in_background(self._stop)
            self._autostart()
            if background:
                # the command line's `servers preflight` borrows this dashboard's warm SGLang parsers
                from backend.sglang import argshare

                argshare.serve(workspace.run_dir)
                self.loop.start()
                self.alert_loop.start()
                from backend.flows.prom_targets import start_for_runtime  # the file_sd file Prometheus reads

                self.prom_targets = start_for_runtime(self)
                self._watcher = threading.Thread(target=self._watch_config, name="specdeck-config",
                                                 daemon=True)
                self._watcher.start()
        except BaseException:
            self.close()
            raise

    # -- access ------------------------------------------------------------

    def access_policy(self) -> AccessPolicy:
        """The workspace's ``[access]`` settings as they are now (a config edit counts at once)."""
        acc = self.workspace.config.access
        return AccessPolicy(anonymous_view=acc.anonymous_view,
                            local_token=self.access_token if acc.loopback_token else None)

    def typed_path(self, actor: str | Caller, typed: str, *, action: str = "read", source: str) -> Path:
        """A path typed in the dashboard, resolved, for a request allowed to read it.

        A dashboard request (:class:`Caller`) must be allowed to act (an operator, or a
        local session) and the path must lie under the workspace's roots
        (``Workspace.read_roots``): otherwise :class:`NotAuthorised` or
        ``backend.auth.PathRefused``, audited.  The command line (a plain name) is not limited."""
        if isinstance(actor, Caller):
            return self.auth.authorise_path(actor, typed, self.workspace.read_roots, action=action,
                                            source=source, base=self.workspace.root)
        return Path(str(typed)).expanduser().resolve()

    # -- config reload -----------------------------------------------------

    def maybe_reload(self) -> bool:
        """Follow edits of the workspace file (a stat per call; parsed only when it changed).

        A valid edit re-syncs processes and servers (running ones keep their
        process until restarted); an invalid one keeps the last good config
        and is kept in ``config_error`` for the pages to show.  Telemetry
        settings take effect at the next dashboard start.
        """
        with self._reload_lock:
            return self._reload()

    def _watch_config(self, interval_s: float = 2.0) -> None:
        """Background: follow config edits off the page's render path."""
        while not self._stop.wait(interval_s):
            try:
                self.maybe_reload()
            except Exception:  # keep watching; the next edit may fix it
                log.exception("reloading %s failed", self.workspace.config_path)

    def _reload(self) -> bool:
        # a launch of this process writes the file and sets its spec in between, never during (a launch from
        # another process, the command line's, is not held back: its spec is in the state store, and the next
        # reload reads its write)
        with self.fleet.file_lock:
            return self._reload_locked()

    def _reload_locked(self) -> bool:
        stamp = _config_stamp(self.workspace)
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        ws = self.workspace
        try:
            cfg = parse_config(read_config_text(ws.config_path), ws.config_path)
            # The new folders must exist before the edit is taken up.
            Workspace(root=ws.root, config_path=ws.config_path, config=cfg).ensure_dirs()
        except ConfigError as exc:
            self.config_error = exc
            return False
        self.config_error = None
        ws.config = cfg
        self.fleet.sync(ws)
        self.supervisor.sync_specs(self.all_specs())
        self._autostart()
        return True

    # -- specs -----------------------------------------------------------

    def all_specs(self) -> list[ProcessSpec]:
        """The workspace's processes, its servers, its training runs, and the jobs started from a page."""
        specs = list(self.workspace.process_specs()) + self.fleet.specs() + self.train.specs()
        taken = {s.name for s in specs}
        return specs + [j.spec for j in self.jobs() if j.name not in taken]

    def jobs(self) -> list:
        """Jobs started from a page (backend.supervisor.adhoc), oldest first."""
        from backend.supervisor.adhoc import load_jobs

        return load_jobs(self.workspace.run_dir)

    def start_job(self, spec: ProcessSpec, meta: dict, *, actor: str | Caller, source: str):
        """Save an ad-hoc job (so a dashboard restart re-adopts it) and start it, audited."""
        from backend.supervisor.adhoc import save_job

        who, client = self.authorise(actor, "start", spec.name, source)
        with audit.acting_from(client):
            configured = {s.name for s in list(self.workspace.process_specs()) + self.fleet.specs()}
            configured.update(self.train.names())
            if spec.name in configured:
                msg = f"{spec.name} is a process of the workspace file; choose another output name"
                audit.record(self.store, who, source, "start", spec.name, msg, "refused", client=client)
                raise ValueError(msg)
            view = self.supervisor.view(spec.name)
            if view is not None and view.live:
                msg = f"{spec.name} is already {view.state.value}; pause or stop it first"
                audit.record(self.store, who, source, "start", spec.name, msg, "refused", client=client)
                raise ValueError(msg)
            save_job(self.workspace.run_dir, spec, meta)
            self.supervisor.register(spec)
            return self.supervisor.start(spec.name, actor=who, source=source)

    def act(self, action: str, target: str, fn, *, actor: str | Caller, source: str, detail: str = ""):
        """Run ``fn()`` (an action on files, not on a process) authorised and audited.

        ``fn`` returns ``(ok, message)``; the audit records the message with ``ok`` or ``error``.
        """
        who, client = self.authorise(actor, action, target, source)
        with audit.acting_from(client):
            try:
                ok, message = fn()
            except Exception as exc:
                audit.record(self.store, who, source, action, target, f"{detail} {exc}".strip(), "error",
                             client=client)
                raise
            audit.record(self.store, who, source, action, target, f"{detail} {message}".strip(),
                         "ok" if ok else "error", client=client)
            return ok, message

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

    def gpu_probe(self, exclude: str | None = None) -> list[tuple[int, int, int]] | None:
        """(index, total bytes, free bytes) per GPU from the latest telemetry, None without a driver.

        Memory held by the managed process ``exclude`` (a server about to be
        relaunched) counts as free; the GPUs are then read afresh, process list
        included (see probe_free_memory).
        """
        from backend.telemetry.attribution import probe_free_memory

        return probe_free_memory(self.telemetry, exclude)

    def active_alerts(self) -> list:
        """Alerts for the sidebar: server alerts first, then GPU alerts, regeneration stalls, and the
        alerts engine's own (a slower speculation, a server down, errors, a deadline, a full disk)."""
        out = list(self.fleet.active_alerts())
        snap = self.telemetry.latest()
        if snap is not None:
            out.extend(snap.alerts)
        out.extend(self._job_alerts())
        if self.alerts is not None:  # what only the alerts engine raises, neither acknowledged nor muted
            from backend.alerts.engine import ENGINE_ONLY

            try:
                out.extend(self.alerts.notices(ENGINE_ONLY))
            except Exception:  # a store that cannot be read has its own banner
                log.exception("reading the active alerts failed")
        return out

    def _job_alerts(self) -> list:
        """A running regeneration that completed nothing for its stall time (see backend.regen.follow)."""
        from backend.regen.follow import STALL_AFTER_S, progress_follower

        found = []
        for job in self.jobs():
            if job.meta.get("kind") != "regen" or not job.meta.get("out"):
                continue
            view = self.supervisor.view(job.name)
            if view is None or view.state.value != "RUNNING":
                continue
            try:
                alert = progress_follower(job.meta["out"]).poll().stall(
                    job.name, running=True, after_s=float(job.meta.get("stall_after_s") or STALL_AFTER_S))
            except (OSError, ValueError):
                log.exception("reading the progress of %s failed", job.name)
                continue
            if alert is not None:
                found.append(alert)
        return found

    # -- control (authorisation, preflight for servers, audit for everything) --

    def authorise(self, actor: str | Caller, action: str, name: str, source: str) -> tuple[str, str]:
        """(name the audit records, client address) of a request allowed to act.

        A :class:`Caller` (every dashboard request) is checked by ``self.auth``:
        refused, it raises :class:`NotAuthorised` and the refusal is audited.  A
        plain name is code on this host (the command line, autostart, tests),
        trusted as that name, from ``local``.
        """
        if isinstance(actor, Caller):
            acc = self.auth.authorise(actor, action, name, source)
            return acc.actor, acc.client
        return actor, audit.LOCAL

    def start(self, name: str, *, actor: str | Caller, source: str, force: bool = False):
        """Start a process; a server goes through preflight first."""
        who, client = self.authorise(actor, "start", name, source)
        with audit.acting_from(client):
            if name in self.fleet.names():
                return self.fleet.launch(name, actor=who, source=source, launch_anyway=force)
            if name in self.train.names():  # its command is built (and a Gen-3 YAML written) now
                return self.train.start(name, actor=who, source=source)
            return self.supervisor.start(name, actor=who, source=source)

    def restart(self, name: str, *, actor: str | Caller, source: str, force: bool = False):
        who, client = self.authorise(actor, "restart", name, source)
        with audit.acting_from(client):
            if name in self.fleet.names():
                return self.fleet.launch(name, actor=who, source=source, launch_anyway=force)
            if name in self.train.names():  # a fresh start of the run's current command, never a stale --resume
                self.supervisor.register(self.train.spec(name))
            return self.supervisor.restart(name, actor=who, source=source, wait=False)

    def launch(self, name: str, cfg=None, *, actor: str | Caller, source: str, launch_anyway: bool = False,
               findings=None):
        """(Re)launch a server with ``cfg`` (an edit is written back to the workspace file)."""
        who, client = self.authorise(actor, "launch", name, source)
        with audit.acting_from(client):
            return self.fleet.launch(name, cfg, actor=who, source=source, launch_anyway=launch_anyway,
                                     findings=findings)

    def stop(self, name: str, *, actor: str | Caller, source: str):
        who, client = self.authorise(actor, "stop", name, source)
        with audit.acting_from(client):
            return self.supervisor.stop(name, actor=who, source=source, wait=False)

    # -- programs run and files read for a page (operator actions, audited per request) --

    def _run_for(self, actor: str | Caller, action: str, target: str, source: str, fn, describe=None):
        """``fn()`` for a request allowed to act, audited with its user and address: ``describe(result)``
        gives the entry's detail; an exception is recorded as ``error`` and raised."""
        who, client = self.authorise(actor, action, target, source)
        with audit.acting_from(client):
            try:
                result = fn()
            except Exception as exc:
                audit.record(self.store, who, source, action, target, f"{type(exc).__name__}: {exc}"[:500],
                             "error", client=client)
                raise
            audit.record(self.store, who, source, action, target, (describe(result) if describe else "")[:500],
                         "ok", client=client)
            return result

    def preflight(self, actor: str | Caller, name: str, cfg=None, *, source: str) -> list:
        """The preflight findings of server ``name`` (``cfg``: an edit not saved yet).

        Preflight runs the server's python (SGLang's own parser, its version) and reads its model
        folders, so a dashboard request must be allowed to act (:class:`NotAuthorised` otherwise,
        audited).  An edit's model or draft folder that differs from the workspace file's is a path
        typed in the dashboard: it must lie under the workspace's roots (see :meth:`typed_path`)."""
        from backend.sglang.preflight import has_errors

        def run() -> list:
            if cfg is not None and isinstance(actor, Caller):
                saved = self.fleet.config(name)
                typed = [(cfg.model_path, saved.model_path),
                         (cfg.speculative.draft_model_path, saved.speculative.draft_model_path)]
                for new, old in typed:
                    if new and new != old:
                        self.typed_path(actor, new, action="preflight", source=source)
            return self.fleet.preflight(name, cfg)

        def said(found: list) -> str:
            errs = sum(1 for f in found if f.severity == "error")
            warns = sum(1 for f in found if f.severity == "warning")
            return (f"{'edited config' if cfg is not None else 'workspace config'}: {errs} error(s), "
                    f"{warns} warning(s)" + (" (blocks a launch)" if has_errors(found) else ""))

        return self._run_for(actor, "preflight", name, source, run, said)

    def probe_python(self, actor: str | Caller, python: str, *, source: str, refresh: bool = False):
        """What the interpreter ``python`` says about its specforge package (it is run as
        ``python -c <probe>``): an operator action, refused (and audited) for any other request.
        ``refresh`` asks it again rather than taking the answer kept from before."""
        from backend.train.generation import probe_env

        def said(p) -> str:
            return f"specforge {p.version or 'not installed'}" if p.ok else (p.error or "no answer")

        return self._run_for(actor, "probe", str(python)[:300], source,
                             lambda: probe_env(str(python), use_cache=not refresh), said)

    def detect_generation(self, actor: str | Caller, name: str, *, source: str):
        """Training run ``name``'s SpecForge generation detected afresh: its interpreter is asked again
        (a program run), so an operator action, refused (and audited) for any other request."""
        return self._run_for(actor, "detect", name, source, lambda: self.train.generation(name, refresh=True),
                             lambda info: info.label)

    def review_train(self, actor: str | Caller, cfg, *, name: str | None = None, source: str):
        """The command of training run ``cfg`` (a new run, or run ``name`` edited), as the form's
        review shows it before anything is saved.

        Building it runs the typed interpreter (``python -c <probe>``) and reads the typed SpecForge
        checkout and output folder, so a dashboard request must be allowed to act, and those folders
        must lie under the workspace's roots (:class:`NotAuthorised` / ``backend.auth.PathRefused``,
        audited).  Raises ``backend.train.command.CommandError`` naming the fields that prevent it."""
        def run():
            if isinstance(actor, Caller):
                for typed in (cfg.specforge_dir, cfg.output_dir):
                    if typed:
                        self.typed_path(actor, typed, action="review", source=source)
            return self.train.command(name or cfg.name, cfg=cfg)

        return self._run_for(actor, "review", cfg.name, source, run,
                             lambda cmd: f"{cfg.python}: {cmd.generation.label}")

    def read_pcie(self, actor: str | Caller, *, source: str) -> None:
        """Ask the telemetry sampler for PCIe throughput now (each read holds the GPU driver about 20 ms
        per counter per GPU): an operator action, refused (and audited) for any other request."""
        self._run_for(actor, "read-pcie", "gpus", source, lambda: self.telemetry.request_slow(pcie=True),
                      lambda _: "PCIe throughput read requested")

    def _audit_auth(self, actor: str, source: str, action: str, target: str, detail: str, outcome: str,
                    client: str) -> None:
        audit.record(self.store, actor, source, action, target, detail, outcome, client=client)

    # -- lifecycle ---------------------------------------------------------

    def close(self) -> None:
        """Stop background threads and close the store; managed processes live on."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(timeout=10)
        if self.alert_loop is not None:
            self.alert_loop.stop()
        if self.loop is not None:
            self.loop.stop()
        if self._background:
            from backend.sglang import argshare

            argshare.stop(self.workspace.run_dir)
        if self.fleet is not None:
            self.fleet.close()
        if self.telemetry is not None:
            self.telemetry.stop()  # flushes the open history bucket, so before the store closes
        if self.supervisor is not None:
            self.supervisor.close()
        self.store.close()


_lock = threading.Lock()
_runtimes: dict[Path, Runtime] = {}


TOKEN_ENV = "SPECDECK_ACCESS_TOKEN"
TOKEN_FILE = "dashboard-token"


def dashboard_token(ws: Workspace) -> str:
    """The loopback token of this dashboard: ``$SPECDECK_ACCESS_TOKEN`` (``scripts/dashboard`` sets it
    and prints the URL that carries it), else a fresh one.  Either way it is written to
    ``run/dashboard-token`` (0600), where the machine's user can read it when the URL is lost."""
    token = (os.environ.get(TOKEN_ENV) or "").strip() or secrets.token_urlsafe(24)
    path = ws.run_dir / TOKEN_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            os.fchmod(f.fileno(), 0o600)
            f.write(token + "\n")
    except OSError as exc:
        log.warning("could not write the dashboard token to %s: %s", path, exc)
    return token


def _config_stamp(ws: Workspace) -> tuple[int, int] | None:
    try:
        st = ws.config_path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


def get_runtime(path: str | Path | None = None, *, background: bool = True) -> Runtime:
    """The process-wide runtime for the workspace at ``path`` (see load_workspace).

    The first call loads the workspace and starts the background work (a
    thread follows config edits); later calls return the same runtime.
    """
    root = resolve_root(path)
    with _lock:
        rt = _runtimes.get(root)
        if rt is None or rt._closed:
            rt = Runtime(load_workspace(path), background=background)
            _runtimes[rt.workspace.root] = rt
            _runtimes[root] = rt
        elif not rt._background:
            rt.maybe_reload()  # no watcher thread: follow edits here
        return rt


def close_all() -> None:
    with _lock:
        for rt in set(_runtimes.values()):
            rt.close()
        _runtimes.clear()


atexit.register(close_all)
