"""Keep every ``[[router]]``'s workers equal to its servers that are RUNNING.

:class:`RouterSync` compares, for each router the supervisor shows RUNNING, the router's ``GET
/workers`` with the servers behind it whose runs are RUNNING (readiness passed) and not being
drained, then adds (``POST /workers``) and removes (``DELETE /workers/{id}``) the difference.  It is
level-triggered and idempotent: a tick that finds nothing to change changes nothing, and a router
that restarted (a new run) is given every ready server again.

The router's pitfall, handled here: a delete while an add is still pending does not cancel the add.
An add is remembered as pending (not posted again) until the worker is listed or a while has
passed; a worker that shows up once its server has stopped is removed by the next tick, like any
listed worker that should not be there.

A relaunch drains a server first (:func:`drain`): it writes a marker under ``run/drain/`` naming the
run being drained (so every reconciler, the dashboard's and ``supervise``'s, leaves that run out),
removes the server from its routers, and waits for the server's own in-flight requests to finish or
for the routers' ``drain_timeout_s``.  The marker names the old run's pid: the new run joins once it
is RUNNING, with no marker to clear.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from backend.sglang.router import RouterConfig, read_key, server_url
from backend.sglang.routerclient import (LoadUnanswered, RouterClient, RouterError, Worker, gauge_in_flight,
                                         live_load)

log = logging.getLogger(__name__)
_UNKNOWN = object()  # a drain's count of requests in flight while the server's answer is late

PENDING_S = 30.0  # an add not listed after this long is posted again
DRAIN_DIR = "drain"


@dataclass(frozen=True)
class WorkerView:
    url: str
    server: str | None  # the [[server]] behind this URL (None: a worker Specdeck did not add)
    server_state: str  # the supervisor's state of that server ("" for a foreign worker)
    listed: bool  # the router lists it
    healthy: bool | None  # the router's health check (None: not listed)
    load: int | None  # requests the router has in flight to it
    pending: bool  # an add was posted and is not listed yet
    draining: bool

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "server": self.server, "server_state": self.server_state, "listed": self.listed,
                "healthy": self.healthy, "load": self.load, "pending": self.pending, "draining": self.draining}


@dataclass(frozen=True)
class RouterView:
    name: str
    url: str
    policy: str
    state: str  # the supervisor's state of the router's process
    members: tuple[str, ...]
    workers: tuple[WorkerView, ...] = ()
    error: str | None = None  # what the last talk with the router said, when it went wrong
    checked_at: float | None = None
    added: tuple[str, ...] = ()  # URLs added by the last tick
    removed: tuple[str, ...] = ()  # URLs removed by the last tick

    @property
    def healthy_workers(self) -> int:
        return sum(1 for w in self.workers if w.listed and w.healthy)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": "router", "url": self.url, "policy": self.policy, "state": self.state,
                "servers": list(self.members), "workers": [w.to_dict() for w in self.workers],
                "healthy_workers": self.healthy_workers, "error": self.error, "checked_at": self.checked_at}


@dataclass
class _RouterMemory:
    run_id: str | None = None
    pending: dict[str, tuple[str, float]] = field(default_factory=dict)  # url -> (worker id, posted at)


# -- drain markers ------------------------------------------------------------------------------------


def _marker(run_dir: Path | str, server: str) -> Path:
    return Path(run_dir) / DRAIN_DIR / f"{server}.json"


def mark_draining(run_dir: Path | str, server: str, pid: int | None, until: float) -> None:
    from backend.filemodes import make_private_dirs, write_private

    p = _marker(run_dir, server)
    make_private_dirs(p.parent)
    write_private(p, json.dumps({"pid": pid, "until": until}))


def clear_draining(run_dir: Path | str, server: str) -> None:
    try:
        _marker(run_dir, server).unlink()
    except FileNotFoundError:
        pass


def is_draining(run_dir: Path | str, server: str, pid: int | None, now: float) -> bool:
    """Whether run ``pid`` of ``server`` is being drained (a marker for that run, not yet expired)."""
    try:
        d = json.loads(_marker(run_dir, server).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(d, dict) and d.get("pid") == pid and float(d.get("until") or 0) > now


# -- the reconciler -----------------------------------------------------------------------------------


class RouterSync:
    """The reconciler of every router of ``fleet`` (a :class:`backend.sglang.fleet.ServerFleet`)."""

    def __init__(self, fleet, supervisor, run_dir: Path | str, *, clock: Callable[[], float] = time.time,
                 client: Callable[..., RouterClient] = RouterClient):
        self.fleet = fleet
        self.supervisor = supervisor
        self.run_dir = Path(run_dir)
        self.clock = clock
        self._client = client
        self._lock = threading.Lock()
        self._memory: dict[str, _RouterMemory] = {}
        self._views: dict[str, RouterView] = {}
        self._thread: threading.Thread | None = None
        self.ticks = 0

    def client_for(self, cfg: RouterConfig) -> RouterClient:
        key_path = cfg.key_path(self.fleet.workspace.root)
        return self._client(cfg.url, key=read_key(key_path) if key_path is not None else None)

    def _state(self, name: str) -> tuple[str, Any]:
        v = self.supervisor.view(name)
        return (v.state.value if v is not None else "NEVER"), v

    def tick(self, *, act: bool = True) -> list[RouterView]:
        """One pass over every router; ``act=False`` only reads (what a reading command shows)."""
        with self._lock:
            out = []
            names = self.fleet.router_names()
            for gone in [n for n in self._memory if n not in names]:
                del self._memory[gone]
            for name in names:
                try:
                    view = self._one(name, act)
                except Exception as exc:  # one router's trouble never stops the others
                    log.exception("reconciling router %s failed", name)
                    cfg = self.fleet.router_config(name)
                    view = RouterView(name, cfg.url, cfg.policy, self._state(name)[0],
                                      tuple(self.fleet.router_members(name)), error=f"{type(exc).__name__}: {exc}",
                                      checked_at=self.clock())
                out.append(view)
            self._views = {v.name: v for v in out}
            self.ticks += 1
            return out

    def _one(self, name: str, act: bool) -> RouterView:
        cfg = self.fleet.router_config(name)
        members = self.fleet.router_members(name)
        now = self.clock()
        state, rv = self._state(name)
        mem = self._memory.setdefault(name, _RouterMemory())
        run_id = getattr(rv, "run_id", None)
        if run_id != mem.run_id:  # a new run of the router: it knows no worker and no pending add
            mem.run_id, mem.pending = run_id, {}
        # what should be behind the router: its servers whose runs are RUNNING and not drained
        wanted: dict[str, str] = {}
        info: dict[str, tuple[str, str, bool]] = {}  # url -> (server, state, draining)
        for s in members:
            scfg = self.fleet.config(s)
            url = server_url(scfg.host, scfg.port)
            sstate, sv = self._state(s)
            draining = sv is not None and is_draining(self.run_dir, s, sv.pid, now)
            info[url] = (s, sstate, draining)
            if sstate == "RUNNING" and not draining:
                wanted[url] = s
        if state != "RUNNING":
            mem.pending = {}
            return RouterView(name, cfg.url, cfg.policy, state, tuple(members),
                              tuple(WorkerView(u, s, st, False, None, None, False, d) for u, (s, st, d) in info.items()),
                              checked_at=now)
        client = self.client_for(cfg)
        listed = {w.url: w for w in client.workers()}
        added, removed, errors = [], [], []
        for url in list(mem.pending):
            wid, at = mem.pending[url]
            if url in listed or now - at > PENDING_S:
                del mem.pending[url]
        if act:
            for url, w in listed.items():
                if url not in wanted:
                    try:
                        client.remove(w.id)
                        removed.append(url)
                    except RouterError as exc:
                        errors.append(str(exc))
            for url in wanted:
                if url in listed or url in mem.pending:
                    continue
                try:
                    mem.pending[url] = (client.add(url), now)
                    added.append(url)
                except RouterError as exc:
                    errors.append(str(exc))
            if removed:
                listed = {u: w for u, w in listed.items() if u not in removed}
        workers = []
        for url, (s, st, d) in info.items():
            w: Worker | None = listed.get(url)
            workers.append(WorkerView(url, s, st, w is not None, w.healthy if w else None, w.load if w else None,
                                      url in mem.pending, d))
        for url, w in listed.items():
            if url not in info:
                workers.append(WorkerView(url, None, "", True, w.healthy, w.load, False, False))
        if added or removed:
            log.info("router %s: added %s, removed %s", name, added or "none", removed or "none")
        return RouterView(name, cfg.url, cfg.policy, state, tuple(members), tuple(workers),
                          "; ".join(errors) or None, now, tuple(added), tuple(removed))

    def views(self) -> list[RouterView]:
        """The last tick's view of every router (a read-only pass when none ran yet)."""
        with self._lock:
            have = dict(self._views)
        names = self.fleet.router_names()
        if any(n not in have for n in names):  # none yet (or a router just added): read them now
            return self.tick(act=False)
        return [have[n] for n in names]

    def view(self, name: str) -> RouterView | None:
        return next((v for v in self.views() if v.name == name), None)

    def run_in_background(self, stop: threading.Event, interval_s: float = 1.0) -> None:
        """Tick every ``interval_s`` on a daemon thread until ``stop`` is set."""
        if not self.fleet.router_names() and self._thread is None:
            interval_s = max(interval_s, 2.0)  # nothing to do until an edit adds a router: tick slower

        def loop() -> None:
            while not stop.wait(interval_s):
                if self.fleet.router_names():
                    try:
                        self.tick()
                    except Exception:  # keep going; the next tick may succeed
                        log.exception("router reconcile failed")

        self._thread = threading.Thread(target=loop, name="specdeck-routers", daemon=True)
        self._thread.start()


# -- drain --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DrainResult:
    server: str
    routers: tuple[str, ...]  # the routers it was removed from
    waited_s: float
    in_flight: int | None  # requests still in flight when the wait ended (None: the server could not tell)


def routers_of(fleet, server: str) -> list[str]:
    return [r for r in fleet.router_names() if server in fleet.router_members(r)]


def drain(fleet, supervisor, run_dir: Path | str, server: str, *, clock: Callable[[], float] = time.monotonic,
          sleep: Callable[[float], None] = time.sleep, on_phase: Callable[[str, str], None] | None = None,
          client: Callable[..., RouterClient] = RouterClient, limit_s: float | None = None) -> DrainResult | None:
    """Take RUNNING ``server`` out of every router in front of it and wait until its in-flight requests
    finish (at most the longest ``drain_timeout_s`` of those routers, and at most ``limit_s`` when given).
    None when no router is in front of it or the server is not RUNNING: there is nothing to drain."""
    routers = routers_of(fleet, server)
    v = supervisor.view(server)
    if not routers or v is None or v.state.value != "RUNNING":
        return None
    scfg = fleet.config(server)
    url = server_url(scfg.host, scfg.port)
    timeout = max(fleet.router_config(r).drain_timeout_s for r in routers)
    if limit_s is not None:
        timeout = min(timeout, limit_s)
    mark_draining(run_dir, server, v.pid, time.time() + timeout + 60.0)
    sync = RouterSync(fleet, supervisor, run_dir, client=client)
    taken = []
    for r in routers:
        rv = supervisor.view(r)
        if rv is None or rv.state.value != "RUNNING":
            continue
        try:
            c = sync.client_for(fleet.router_config(r))
            for w in c.workers():
                if w.url == url:
                    c.remove(w.id)
            taken.append(r)
        except (RouterError, ValueError) as exc:
            log.warning("could not take %s out of router %s: %s", server, r, exc)
    if on_phase is not None:
        on_phase("draining", f"{server} left {', '.join(taken) or 'no running router'}; waiting up to "
                             f"{timeout:g} s for its requests in flight")
    t0 = clock()
    live = False

    def read(last: int | None) -> int | None:
        # The server's live count (/get_load).  A slow answer (a loaded machine) leaves the count unknown:
        # the drain goes on with the last one known, or waits for one; the /metrics gauges are read only
        # from a server without /get_load, since they change only at each decode log line and can say 0
        # while a request runs (which ended a drain 3 s before its request did).
        nonlocal live
        try:
            n = live_load(url)
        except LoadUnanswered:
            return _UNKNOWN if last is None else last
        if n is not None:
            live = True
            return n
        if live:  # it answered with a count before: a count missing now is not read from the gauges
            return _UNKNOWN if last is None else last
        return gauge_in_flight(url)

    left = read(None)
    while left and clock() - t0 < timeout:  # _UNKNOWN is true: waited on
        sleep(0.2)
        left = read(None if left is _UNKNOWN else left)
    return DrainResult(server, tuple(taken), clock() - t0, None if left is _UNKNOWN else left)
