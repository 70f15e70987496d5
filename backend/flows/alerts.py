"""Alerts across the domains: the snapshots the rules read, gathered from each domain's own
monitors (the supervisor's views, the server fleet's snapshots and stored baselines, the
regeneration progress followers, the telemetry sampler, the outputs folder's free space), and
the loop that evaluates them every ``[alerts] interval_s``.

``gather`` takes the dashboard's runtime (or anything with its ``workspace``, ``store``,
``supervisor``, ``fleet``, ``telemetry`` and ``jobs()``); a domain that cannot be read is left
out of that snapshot and logged, and the others are still evaluated.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from backend.alerts.engine import AlertEngine
from backend.alerts.model import DiskState, GpuState, RegenState, ServerState, Snapshot, Thresholds
from backend.alerts.notify import Notifier, RateLimit
# imported here, not in the loop's thread: two threads importing one package lazily at once can deadlock
from backend.bench.baseline import StoredBaselines
from backend.diskspace import space
from backend.regen.follow import progress_follower
from backend.telemetry.nvml import POWER_REASONS, THERMAL_REASONS
from backend.workspace import AlertsConfig, Workspace

log = logging.getLogger(__name__)

_THRESHOLD_FIELDS = tuple(Thresholds.__dataclass_fields__)


def thresholds_of(cfg: AlertsConfig) -> Thresholds:
    return Thresholds(**{k: getattr(cfg, k) for k in _THRESHOLD_FIELDS})


def notifier_of(cfg: AlertsConfig) -> Notifier:
    return Notifier(cfg.webhook, cfg.command, limit=RateLimit(cfg.max_per_hour, cfg.repeat_s))


def engine_for(workspace: Workspace, store, *, clock: Callable[[], float] = time.time) -> AlertEngine:
    cfg = workspace.config.alerts
    return AlertEngine(store, thresholds=thresholds_of(cfg), notifier=notifier_of(cfg), clock=clock,
                       base_url=cfg.base_url, workspace=workspace.name)


def configure(engine: AlertEngine, workspace: Workspace) -> None:
    """Bring an engine up to a reloaded config (the rate limit's counts kept where it is unchanged)."""
    cfg = workspace.config.alerts
    engine.thresholds = thresholds_of(cfg)
    limit = engine.notifier.limit
    if (limit.max_per_hour, limit.repeat_s) != (cfg.max_per_hour, cfg.repeat_s):
        limit = RateLimit(cfg.max_per_hour, cfg.repeat_s)
    engine.notifier = Notifier(cfg.webhook, cfg.command, limit=limit)
    engine.base_url, engine.workspace = cfg.base_url, workspace.name


# -- gathering ---------------------------------------------------------------------------------

def _servers(rt: Any, now: float, th: Thresholds, baselines: Any = None) -> tuple[ServerState, ...]:
    baselines = baselines if baselines is not None else StoredBaselines(rt.store)
    fleet = rt.fleet
    names = set(fleet.names()) if fleet is not None else set()
    out = []
    for v in rt.supervisor.views():
        if v.kind.value != "server":
            continue
        fields: dict[str, Any] = {}
        if v.name in names:
            try:
                snap = fleet.snapshot(v.name)
                dec = snap.run_decode if snap.run_decode is not None else snap.decode
                ts = dec.get("ts", [])
                acc = [(t, a) for t, a in zip(ts, dec.get("accept_len", [])) if t is not None and a is not None]
                speed = [(t, s, int(r)) for t, s, r in zip(ts, dec.get("gen_throughput", []), dec.get("running_req", []))
                         if t is not None and s is not None and r is not None]
                spec_on = bool(snap.spec_enabled or acc)
                base: dict[int, float] = {}
                if spec_on and speed:
                    cfg = fleet.config(v.name)
                    for c in {c for t, _, c in speed if t >= now - th.steady_window_s}:
                        choice = baselines.choose(v.name, cfg.model_path, cfg.served_model_name, c,
                                                  cfg.baseline_tok_s)
                        if choice.exact and choice.tok_s:
                            base[c] = choice.tok_s
                        elif c == 1 and choice.configured_applies:
                            # none stored: the configured single-stream figure, at the single-stream load only
                            base[c] = float(choice.configured_tok_s)  # type: ignore[arg-type]
                fields = dict(spec_on=spec_on, ready_at=snap.ready_ts, accept=tuple(acc[-2000:]),
                              speed=tuple(speed[-2000:]), baseline=base)
            except Exception:  # one server's monitor must not hide the others
                log.exception("alerts: reading server %s failed", v.name)
        out.append(ServerState(v.name, v.state.value, v.exit_code, v.tries, v.detail, **fields))
    return tuple(out)


def _regens(rt: Any, now: float, deadlines: dict[str, float]) -> tuple[RegenState, ...]:
    out = []
    for job in rt.jobs():
        if job.meta.get("kind") != "regen" or not job.meta.get("out"):
            continue
        view = rt.supervisor.view(job.name)
        running = view is not None and view.state.value == "RUNNING"
        try:
            f = progress_follower(job.meta["out"]).poll()
        except (OSError, ValueError):
            log.exception("alerts: reading the progress of %s failed", job.name)
            continue
        latest = f.latest or {}
        if latest.get("state") in ("paused", "done", "failed", "pausing", "stopping"):
            running = False
        h = f.history
        pts = tuple((t, int(d or 0), int(x or 0)) for t, d, x in zip(h.t, h.values["done"], h.values["failed"]))
        eta = f.eta(now) if running else None
        out.append(RegenState(
            job.name, running, latest.get("started_at"), f.last_completion_t, pts[-2000:],
            eta.low_s if eta else None, eta.point_s if eta else None, eta.high_s if eta else None,
            deadlines.get(job.name)))
    return tuple(out)


def _gpus(rt: Any, now: float, th: Thresholds) -> tuple[GpuState, ...]:
    slowing = THERMAL_REASONS | POWER_REASONS | {"hw_slowdown"}
    tel = rt.telemetry
    snap = tel.latest() if tel is not None else None
    if snap is None:
        return ()
    running = {v.name for v in rt.supervisor.views() if v.state.value == "RUNNING"}
    out = []
    for g in snap.gpus:
        if g.lost:
            continue
        held = tuple(j for j in (snap.attribution.jobs_on(g.index) if snap.attribution else ()) if j in running)
        util: tuple = ()
        if held:
            s = tel.history(g.index, "util_gpu", now - th.gpu_idle_s - 2 * snap.interval_s)
            util = tuple(zip(s.t, s.value))
        out.append(GpuState(g.index, g.mem_used, g.mem_total, tuple(sorted(set(g.throttle or ()) & slowing)),
                            util, held))
    return tuple(out)


def _disks(rt: Any) -> tuple[DiskState, ...]:
    sp = space(rt.workspace.outputs_dir, 0)
    if sp is None:
        return ()
    return (DiskState(str(sp.path), int(sp.free), int(sp.total)),)


def gather(rt: Any, now: float | None = None, *, baselines: Any = None) -> Snapshot:
    """The snapshot the rules read; ``baselines`` (a ``StoredBaselines`` of ``rt.store``, kept
    between calls) reads the stored baselines again only when the benchmark results change."""
    now = time.time() if now is None else now
    cfg = rt.workspace.config.alerts
    th = thresholds_of(cfg)
    deadlines = {k: v.timestamp() for k, v in cfg.deadlines.items()}
    parts: dict[str, tuple] = {}
    for name, read in (("servers", lambda: _servers(rt, now, th, baselines)), ("regens", lambda: _regens(rt, now, deadlines)),
                       ("gpus", lambda: _gpus(rt, now, th)), ("disks", lambda: _disks(rt))):
        try:
            parts[name] = read()
        except Exception:
            log.exception("alerts: gathering %s failed", name)
    return Snapshot(now, **parts)


class AlertLoop:
    """Evaluate the rules every ``[alerts] interval_s`` in a background thread."""

    def __init__(self, rt: Any, engine: AlertEngine, *, clock: Callable[[], float] = time.time):
        self.rt = rt
        self.engine = engine
        self.clock = clock
        self.last_run: float | None = None
        self.last_error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._baselines: Any = None

    def run_once(self):
        configure(self.engine, self.rt.workspace)
        if self._baselines is None:
            self._baselines = StoredBaselines(self.rt.store)
        result = self.engine.evaluate(gather(self.rt, self.clock(), baselines=self._baselines))
        self.last_run = self.clock()
        return result

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
                self.last_error = None
            except Exception as exc:  # keep evaluating: the next pass may work
                self.last_error = str(exc)
                log.exception("alerts: evaluation failed")
            self._stop.wait(self.rt.workspace.config.alerts.interval_s)

    def start(self) -> "AlertLoop":
        self._thread = threading.Thread(target=self._run, name="specdeck-alerts", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
