"""Live view of one SGLang server: its log, ``/health``, ``/metrics`` and server info.

``ServerMonitor`` runs one background thread per server.  The thread wakes on
watchdog file events for the log (or every ``poll_interval_s``), reads the new
bytes, and every ``http_interval_s`` asks the server over HTTP.  Pages call
:meth:`ServerMonitor.snapshot`, which never does I/O.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from backend.sglang.alerts import Alert, spec_accept_alert
from backend.sglang.client import Reading, SglangClient
from backend.sglang.config import ServerConfig
from backend.sglang.ingest import FileWatcher, IngestStats, LogIngester, UnparsedLine
from backend.sglang.launch import endpoints
from backend.sglang.logparse import FatalEvent, Phase, PhaseEvent, rank_label
from backend.modelinfo import ModelInfoError, read_json_config
from backend.sglang.runs import (RunInfo, current_run_start, readings_after, readings_boundary, run_starts,
                                 split_series)
from backend.sglang.version import Capabilities, capabilities, resolve_capabilities

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FatalInfo:
    code: str
    title: str
    message: str
    hint: str | None
    cause: str | None  # last line of the traceback, when there is one
    context: tuple[str, ...]
    ts: float | None

    @classmethod
    def of(cls, ev: FatalEvent) -> "FatalInfo":
        cause = None
        for line in reversed(ev.context):
            s = line.strip()
            if s and ("Error" in s.split(":", 1)[0] or "Exception" in s.split(":", 1)[0]):
                cause = s
                break
        return cls(ev.code, ev.title, ev.message, ev.hint, cause, tuple(ev.context), ev.ts)


@dataclass(frozen=True)
class ServerSnapshot:
    name: str
    taken_at: float
    refreshed_at: float | None  # end of the monitor's last refresh (log read + HTTP); None before the first
    log_path: str
    version: str
    version_assumed: bool
    spec_enabled: bool
    algorithm: str | None
    baseline_tok_s: float | None
    # startup
    status: str  # "no-log" | "starting" | "ready" | "failed" | "unreachable"
    phase: str | None  # Phase name (LAUNCHED ... READY) from the log
    phase_label: str | None
    phase_percent: float | None
    phase_detail: str
    progress: float  # 0..1 over the whole startup
    launched_ts: float | None
    ready_ts: float | None
    startup_events: tuple[tuple[float | None, str, str], ...]  # (ts, phase, detail)
    fatal: FatalInfo | None
    problems: tuple[FatalInfo, ...]  # warnings such as KV retraction, batch OOM
    # series (plain lists, equal lengths per group)
    decode: dict
    prefill: dict
    accept_rate_meaning: str
    accept_rate_description: str
    ranks: tuple[str, ...]
    latest_decode: dict | None
    latest_prefill: dict | None
    # HTTP readings, each with its own time
    health: Reading | None
    metrics: Reading | None
    server_info: Reading | None
    alert: Alert | None
    stats: IngestStats
    unparsed: tuple[UnparsedLine, ...]
    log_tail: tuple[str, ...]
    watching: bool  # watchdog events arrive; otherwise timer polling only
    # runs: a restart (relaunch, crash and restart, stop and start) begins a new run
    run_id: str | None = None  # the supervisor's id of the current run, when known
    run_started_ts: float | None = None  # where the current run begins (None: one run only)
    run_live: bool = True  # the current run's process is starting or running
    run_starts: tuple[float, ...] = ()  # every run start within the series (chart markers and breaks)
    run_decode: dict | None = None  # the current run's decode series (empty while it loads)

    @property
    def ready(self) -> bool:
        return self.health is not None and self.health.ok

    @property
    def lifetime_accept_len(self) -> float | None:
        """/server_info's average over the current run (None once the run has ended)."""
        si = self.server_info
        if not self.run_live:
            return None
        return si.value.avg_spec_accept_length if si is not None and si.ok and si.value else None


def _draft_arch(cfg: ServerConfig) -> str | None:
    path = cfg.speculative.draft_model_path
    if not path:
        return None
    try:
        archs = read_json_config(Path(path).expanduser() / "config.json").get("architectures") or []
        return str(archs[0]) if archs else None
    except (ModelInfoError, IndexError):
        return None


REFRESH_SLICE_BYTES = 32 * 1024 * 1024  # log bytes read per lock hold
# how long a snapshot waits for the lock before it takes the last one of the same run and config: while a long
# log is caught up (a 1 GB log: 32 slices) every page run would otherwise wait for a slice, several times
SNAPSHOT_WAIT_S = 0.05


class ServerMonitor:
    def __init__(self, cfg: ServerConfig, log_path: str | Path, version: Capabilities | str | None = None, *,
                 client: SglangClient | None = None, clock: Callable[[], float] = time.time,
                 poll_interval_s: float = 1.0, http_interval_s: float = 2.0, max_points: int = 20000,
                 watch: bool = True, http: bool = True):
        self.cfg = cfg
        self.log_path = Path(log_path)
        if isinstance(version, Capabilities):
            self.caps = version
        elif version:
            self.caps = capabilities(version)
        else:
            self.caps = resolve_capabilities(cfg)
        self.clock = clock
        self.poll_interval_s = poll_interval_s
        self.http_interval_s = http_interval_s
        self.http_enabled = http
        self.client = client or SglangClient(endpoints(cfg, self.caps).base_url, self.caps)
        self.ingester = LogIngester(self.log_path, caps=self.caps, max_points=max_points)
        self._draft_arch = _draft_arch(cfg)
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watcher: FileWatcher | None = FileWatcher(self.log_path, self._wake) if watch else None
        self._health: Reading | None = None
        self._metrics: Reading | None = None
        self._server_info: Reading | None = None
        self._last_http = 0.0
        self._refreshed_at: float | None = None
        self._generation = 0
        self._last_snapshot: tuple[tuple, ServerSnapshot] | None = None  # ((run, generation), snapshot)

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        if self._watcher is not None:
            self._watcher.start()
        self._thread = threading.Thread(target=self._loop, name=f"server-monitor-{self.cfg.name}", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        t, self._thread = self._thread, None
        if t is not None:
            t.join(timeout=timeout_s)
        if self._watcher is not None:
            self._watcher.stop()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.refresh()
            except Exception:  # keep monitoring; the next pass may succeed
                log.exception("server monitor %s: refresh failed", self.cfg.name)
            self._wake.wait(timeout=self.poll_interval_s)
            self._wake.clear()
            if self._watcher is not None and not self._watcher.active and self.log_path.parent.is_dir():
                self._watcher.start()  # the log folder appeared after we started

    def set_config(self, cfg: ServerConfig, version: Capabilities | str | None = None) -> None:
        """Use a new config after a relaunch (same log path)."""
        with self._lock:
            self.cfg = cfg
            if version is not None:
                self.caps = version if isinstance(version, Capabilities) else capabilities(version)
                self.ingester.caps = self.caps
            self._draft_arch = _draft_arch(cfg)
            self.client = SglangClient(endpoints(cfg, self.caps).base_url, self.caps)
            self._health = self._metrics = self._server_info = None
            self._generation += 1  # readings of the old endpoint still in flight are dropped

    # -- work ---------------------------------------------------------------------

    def refresh(self, *, http: bool | None = None) -> int:
        """Read new log bytes, and ask the server over HTTP when due (or when ``http``)."""
        n = 0
        while True:  # in slices, so a snapshot never waits for a whole catch-up read
            with self._lock:
                got = self.ingester.poll(max_bytes=REFRESH_SLICE_BYTES)
            n += got
            if got < REFRESH_SLICE_BYTES or self._stop.is_set():
                break
        due = self.http_enabled if http is None else http
        if due and (http or self.clock() - self._last_http >= self.http_interval_s):
            self._poll_http()
        self._refreshed_at = self.clock()
        return n

    def _poll_http(self) -> None:
        self._last_http = self.clock()
        with self._lock:
            client, generation = self.client, self._generation
        health = client.health()
        metrics = server_info = None
        if health.status is not None:  # something answers on the port
            if self.cfg.enable_metrics:
                metrics = client.metrics()
            if health.ok:
                server_info = client.server_info()
        with self._lock:
            if generation != self._generation:  # the config changed while we asked
                return
            self._health = health
            if metrics is not None:
                self._metrics = metrics if metrics.ok or self._metrics is None else self._metrics_failed(metrics)
            if server_info is not None:
                self._server_info = server_info if server_info.ok or self._server_info is None \
                    else replace(self._server_info, ok=False, error=server_info.error)

    def _metrics_failed(self, r: Reading) -> Reading:
        old = self._metrics
        return replace(old, ok=False, error=r.error) if old is not None else r

    # -- snapshot -------------------------------------------------------------------

    def _drop_readings_before(self, t: float | None) -> None:
        """Forget HTTP answers given before ``t`` (by the previous run's process)."""
        if t is None:
            return
        kept = readings_after((self._health, self._metrics, self._server_info), t)
        if kept != [self._health, self._metrics, self._server_info]:
            self._health, self._metrics, self._server_info = kept
            self._generation += 1  # and any still in flight

    def snapshot(self, run: RunInfo | None = None) -> ServerSnapshot:
        """The current state; ``run`` is what the supervisor knows of the current run.  While a catch-up read
        holds the lock for more than :data:`SNAPSHOT_WAIT_S`, the last snapshot of the same run and config
        (at most one slice behind; its ``taken_at`` says when) is given instead of waiting for the slice.
        """
        key = (run, self._generation)
        if not self._lock.acquire(timeout=SNAPSHOT_WAIT_S):
            last = self._last_snapshot
            if last is not None and last[0] == key:
                return last[1]
            self._lock.acquire()
        try:
            snap = self._build_snapshot(run)
            self._last_snapshot = ((run, self._generation), snap)
            return snap
        finally:
            self._lock.release()

    def _build_snapshot(self, run: RunInfo | None = None) -> ServerSnapshot:
        """The current state; ``run`` is what the supervisor knows of the current run.

        Figures belong to one run: the latest values, ``run_decode``,
        ``latest_*``, HTTP readings and the lifetime accept_len come from the
        current run only, so a relaunched server shows nothing until its new
        process logs something.  ``decode`` keeps every run for the charts,
        which break their lines at ``run_starts``.
        """
        now = self.clock()
        with self._lock:
            ing = self.ingester
            su = ing.startup
            cfg = self.cfg
            decode = ing.decode.as_lists()
            log_start = su.launched_ts if su.run_index else None
            starts = run_starts(su.events, log_start)
            start = current_run_start(log_start, run)
            if run is not None and run.started_at is not None and (not starts or run.started_at > starts[-1] + 1):
                starts.append(run.started_at)  # started, but its log header is not read yet
            self._drop_readings_before(readings_boundary(log_start, run))
            live = run is None or run.live
            run_decode = split_series(decode, start) if live else {k: [] for k in decode}
            first_ts = next((t for t in decode["ts"] if t is not None), None)
            chart_starts = tuple(s for s in starts if first_ts is not None and s >= first_ts)
            spec_on = cfg.spec_enabled or any(a is not None for a in run_decode["accept_len"])
            si = self._server_info
            if si is not None and si.ok and si.value and si.value.speculative_algorithm:
                spec_on = True
            algorithm = cfg.speculative.algorithm
            if si is not None and si.ok and si.value and si.value.speculative_algorithm:
                algorithm = si.value.speculative_algorithm
            ready_ts = su.ready_ts
            if ready_ts is None and self._health is not None and self._health.ok and su.run_index == 0 \
                    and su.phase is None:
                ready_ts = self._health.at  # no startup lines seen (log rotated): ready since first 200
            alert = spec_accept_alert(zip(run_decode["ts"], run_decode["accept_len"]), spec_on=spec_on,
                                      ready_ts=ready_ts, now=now, algorithm=algorithm,
                                      draft_arch=self._draft_arch)
            # the supervisor started a run whose log header is not read yet: the
            # log's startup state (phase, ready, fatal) is the previous run's
            unlogged = run is not None and run.started_at is not None and \
                (log_start is None or run.started_at > log_start + 1.0)
            fatal = FatalInfo.of(su.fatal) if su.fatal is not None and not unlogged else None
            health = self._health
            if unlogged:
                ready_ts = alert = None
            if fatal is not None:
                status = "failed"
            elif health is not None and health.ok:
                status = "ready"
            elif unlogged:
                status = "starting"
            elif su.phase is not None and su.phase < Phase.READY:
                status = "starting"
            elif su.phase is None:
                status = "no-log" if not self.log_path.exists() else "starting"
            else:
                status = "unreachable" if health is not None else "ready"
            phase = None if unlogged else su.phase
            return ServerSnapshot(
                name=cfg.name,
                taken_at=now,
                refreshed_at=self._refreshed_at,
                log_path=str(self.log_path),
                version=self.caps.version,
                version_assumed=self.caps.assumed,
                spec_enabled=spec_on,
                algorithm=algorithm,
                baseline_tok_s=cfg.baseline_tok_s,
                status=status,
                phase=phase.name if phase is not None else None,
                phase_label=phase.label if phase is not None else None,
                phase_percent=None if unlogged else su.percent,
                phase_detail="" if unlogged else su.detail,
                progress=0.0 if unlogged else su.progress,
                launched_ts=run.started_at if unlogged else su.launched_ts,
                ready_ts=ready_ts,
                startup_events=tuple((e.ts, e.phase.name, e.detail) for e in su.events if isinstance(e, PhaseEvent)),
                fatal=fatal,
                problems=tuple(FatalInfo.of(p) for p in su.problems),
                decode=decode,
                prefill=ing.prefill.as_lists(),
                accept_rate_meaning=ing.accept_rate_meaning,
                accept_rate_description=ing.accept_rate_description,
                ranks=tuple(sorted(rank_label(r) for r in ing.ranks_seen)),
                latest_decode=_in_run(ing.last_decode, start, live),
                latest_prefill=_in_run(ing.last_prefill, start, live),
                health=health,
                metrics=self._metrics,
                server_info=si,
                alert=alert,
                stats=replace(ing.stats),
                unparsed=tuple(ing.unparsed),
                log_tail=tuple(ing.tail),
                watching=self._watcher is not None and self._watcher.active,
                run_id=run.run_id if run is not None else None,
                run_started_ts=start,
                run_live=live,
                run_starts=chart_starts,
                run_decode=run_decode,
            )


def _in_run(rec, start: float | None, live: bool) -> dict | None:
    """``rec`` as a dict when it belongs to the current run (logged after ``start``)."""
    if rec is None or not live:
        return None
    if start is not None and (rec.ts is None or rec.ts <= start):
        return None
    return rec.to_dict()


# -- the verdict against the baseline: only over a steady window at the baseline's load --------------

STEADY_WINDOW_S = 20.0  # seconds of decode lines at the baseline's load before a verdict
PAR_TOLERANCE = 0.03  # within ±3 % of the baseline reads "on par"
SLOW_RATIO = 0.90  # below: red; from here up to the band: amber


@dataclass(frozen=True)
class SteadyVerdict:
    """Faster, on par or slower than the baseline, or why there is no verdict.

    ``verdict`` is "faster" | "on par" | "slower" | "none"; ``level`` is the colour's meaning
    ("good" | "par" | "warn" | "bad" | "none")."""

    verdict: str
    level: str
    window_s: float
    load: int | None  # requests in flight when the baseline was measured
    tok_s: float | None  # mean gen throughput over the window (all running requests together)
    baseline_tok_s: float | None
    ratio: float | None
    reason: str  # why there is no verdict ("" when there is one)
    seen: str = ""  # the load seen over the window, e.g. "2-4 requests in flight"
    short: str = ""  # the reason in a few words, for the badge
    span_s: float | None = None  # the seconds the window's lines cover (at least three quarters of window_s)

    @property
    def seconds(self) -> float:
        return self.window_s if self.span_s is None else min(self.span_s, self.window_s)

    @property
    def basis(self) -> str:
        return f"{self.seconds:.0f} s at {'?' if self.load is None else f'{self.load:,}'} req"

    @property
    def badge(self) -> str:
        """Short enough for a metric's delta at 1024 px: ``slower 0.91× · 20 s at 16 req``."""
        if self.verdict == "none":
            return f"no verdict: {self.short or self.reason}"
        if self.verdict == "on par":
            return f"on par · {self.basis}"
        return f"{self.verdict} {self.ratio:.2f}× · {self.basis}"

    @property
    def sentence(self) -> str:
        if self.verdict == "none":
            return f"no verdict: {self.reason}"
        head = (f"{self.verdict} over the last {self.seconds:.0f} s at {_in_flight(self.load)} (the baseline's "
                f"load): {self.tok_s:,.1f} vs {self.baseline_tok_s:,.1f} tok/s, {self.ratio:.2f}×")
        if self.verdict == "on par":
            head += f", within ±{PAR_TOLERANCE * 100:.0f} %"
        return head


def _in_flight(n: int | None) -> str:
    return f"{'?' if n is None else f'{n:,}'} request{'' if n == 1 else 's'} in flight"


def _loads(values: list[int]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:,} request{'' if hi == 1 else 's'} in flight" if lo == hi else f"{lo:,}-{hi:,} requests in flight"


def steady_verdict(ts: list, gen_throughput: list, running_req: list, baseline_tok_s: float | None,
                   load: int | None, *, now: float, window_s: float = STEADY_WINDOW_S,
                   tolerance: float = PAR_TOLERANCE) -> SteadyVerdict:
    """The verdict over the decode lines of the ``window_s`` seconds up to the newest one (logged within
    the last half window before ``now``, else the server is idle).

    The baseline was measured at ``load`` requests in flight (the configured single-stream one at 1);
    a verdict needs every line of the window at that load, lines spanning at least three quarters of the
    window, and then compares the window's mean gen throughput with the baseline: within ±``tolerance``
    it is on par, above faster, below slower (red under ``SLOW_RATIO``)."""
    def none(reason: str, short: str, seen: str = "") -> SteadyVerdict:
        return SteadyVerdict("none", "none", window_s, load, None, baseline_tok_s, None, reason, seen, short)

    if not baseline_tok_s or baseline_tok_s <= 0 or not load:
        return none("no baseline to compare with", "no baseline")
    logged = [(t, g, r) for t, g, r in zip(ts, gen_throughput, running_req)
              if t is not None and t <= now + 1.0 and g is not None and r is not None]
    if not logged or now - logged[-1][0] > window_s / 2:  # lines come every few decode steps while busy
        return none(f"no decode line in the last {window_s / 2:.0f} s (no request running)", "idle")
    start = logged[-1][0] - window_s  # the window ends at the newest line
    points = [p for p in logged if p[0] >= start]
    loads = [int(r) for _t, _g, r in points]
    if any(r != load for r in loads):
        return none(f"load differs from the baseline's (baseline: {_in_flight(load)}; the last {window_s:.0f} s: "
                    f"{_loads(loads)})", "load differs", seen=_loads(loads))
    span = points[-1][0] - points[0][0]
    if len(points) < 3 or span < 0.75 * window_s:
        return none(f"steady at the baseline's load ({_in_flight(load)}) for {span:.0f} s of the "
                    f"{window_s:.0f} s needed", f"steady {span:.0f} of {window_s:.0f} s")
    mean = sum(g for _t, g, _r in points) / len(points)
    ratio = mean / baseline_tok_s
    if ratio >= 1 + tolerance:
        verdict, level = "faster", "good"
    elif ratio >= 1 - tolerance:
        verdict, level = "on par", "par"
    else:
        verdict, level = "slower", "warn" if ratio >= SLOW_RATIO else "bad"
    return SteadyVerdict(verdict, level, window_s, load, mean, baseline_tok_s, ratio, "", _loads(loads), "", span)
