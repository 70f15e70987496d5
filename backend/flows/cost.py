"""What a job cost: GPU-hours and energy per regeneration job, training run and benchmark.

A job's GPUs come from its own spec (``CUDA_VISIBLE_DEVICES``), else from the telemetry's attribution of
GPU processes to managed process trees (what the GPUs page shows); a regeneration job holds no GPU itself,
so its GPUs are those of the managed servers it sends requests to; a benchmark's are its server's (through a
router, those of every server behind it).  Its
time is the process record's start and end (a job still running counts up to now), a benchmark's the
result's own start and end.

GPU-hours = GPUs × hours.  Energy integrates the telemetry's power readings of those GPUs over the job's
time (the whole GPU's draw, shared with whatever else ran on it then): each reading stands for the time
up to halfway to its neighbours, never more than the series' resolution, so a gap in the readings stays a
gap.  Where the readings cover less than :data:`MIN_COVERAGE` of the job's GPU-time, energy is unknown.

Every figure that cannot be known is ``None`` with the reason beside it, never 0: the whole reason (a
sentence for a hover) and a few words to stand beside an ``N/A`` ("not started", "run not started here").
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence
from urllib.parse import urlsplit

MIN_COVERAGE = 0.9  # share of the job's GPU-time the power readings must cover for an energy figure

# (gpu index, since, until) -> a telemetry Series of power_w (backend.telemetry.model.Series)
PowerReader = Callable[[int, float, float], Any]


@dataclass(frozen=True)
class Cost:
    """GPU-hours and energy of one job, each with why it is unknown where it is."""

    gpu_hours: float | None
    energy_kwh: float | None
    gpus: tuple[int, ...] | None
    seconds: float | None  # the job's time counted
    running: bool  # still running: the figures count up to now
    gpus_from: str = ""  # where the GPUs came from
    gpu_hours_why: str = ""  # why gpu_hours is None
    energy_why: str = ""  # why energy_kwh is None (or how it was measured)
    short: str = ""  # why gpu_hours is None in a few words, to stand beside its N/A

    @property
    def short_why(self) -> str:
        """The few words beside an N/A GPU-hours ("not known" where no shorter reason was given)."""
        return self.short or ("" if self.gpu_hours is not None else "not known")

    def to_dict(self) -> dict[str, Any]:
        """The JSON the command line and the pages share: null where not measured."""
        return {"gpu_hours": self.gpu_hours, "energy_kwh": self.energy_kwh,
                "gpus": list(self.gpus) if self.gpus is not None else None, "seconds": self.seconds,
                "running": self.running, "gpus_from": self.gpus_from,
                "gpu_hours_why": self.gpu_hours_why or None, "energy_why": self.energy_why or None}


def unknown(why: str, short: str = "not known", *, running: bool = False, seconds: float | None = None) -> Cost:
    """Neither figure known: ``why`` the sentence for a hover, ``short`` the words beside the N/A."""
    return Cost(None, None, None, seconds, running, gpu_hours_why=why, energy_why=why, short=short)


NOT_STARTED = "not started"
NOT_HERE = "run not started here"
NO_GPUS = "GPUs not known"


def visible_devices(env: Mapping[str, str] | None) -> tuple[tuple[int, ...] | None, str]:
    """(GPU indices, why not) from a spec's ``CUDA_VISIBLE_DEVICES``: None with the reason when it is
    unset, empty, or names GPUs by UUID (which the telemetry indexes by number)."""
    raw = (env or {}).get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return None, "its spec sets no CUDA_VISIBLE_DEVICES"
    parts = [p.strip() for p in str(raw).split(",") if p.strip()]
    if not parts:
        return None, "its CUDA_VISIBLE_DEVICES is empty: it runs on no GPU"
    out: list[int] = []
    for p in parts:
        if not p.isdigit():
            return None, f"its CUDA_VISIBLE_DEVICES names {p!r}, not a GPU index"
        out.append(int(p))
    return tuple(sorted(set(out))), ""


def attributed_gpus(attribution: Any, name: str) -> tuple[int, ...] | None:
    """The GPUs the telemetry saw job ``name``'s process tree on (the GPUs page's attribution), or None."""
    for job in getattr(attribution, "jobs", ()) or ():
        if job.name == name and job.gpus:
            return tuple(sorted(job.gpus))
    return None


def job_gpus(name: str, env: Mapping[str, str] | None, attribution: Any = None) -> tuple[tuple[int, ...] | None, str]:
    """(GPUs, where from — or why unknown) of a managed process."""
    gpus, why = visible_devices(env)
    if gpus is not None:
        return gpus, "CUDA_VISIBLE_DEVICES"
    seen = attributed_gpus(attribution, name)
    if seen is not None:
        return seen, "seen on them by the GPU telemetry"
    return None, f"no GPU known: {why}, and the GPU telemetry saw none of its processes"


def energy_kwh(power: PowerReader | None, gpus: Sequence[int], start: float, end: float) -> tuple[float | None, str]:
    """(kWh, how or why not): the power readings of ``gpus`` integrated over ``[start, end]``."""
    if power is None:
        return None, "no GPU telemetry"
    span = end - start
    if span <= 0:
        return None, "the job has no duration"
    joules = covered = 0.0
    for g in gpus:
        try:
            series = power(g, start, end)
        except Exception as exc:  # a store that cannot be read: unknown, with why
            return None, f"the power readings of GPU {g} could not be read ({type(exc).__name__})"
        j, c = _integrate(tuple(series.t), tuple(series.value), float(series.resolution_s or 1.0), start, end)
        joules += j
        covered += c
    share = covered / (span * len(gpus))
    if share < MIN_COVERAGE:
        return None, (f"the GPU power readings cover only {share * 100:.0f} % of its GPU-time (they are "
                      "recorded while the dashboard runs, and kept for the telemetry history's retention)")
    # readings missing in the rest count at the mean power of the covered part
    kwh = joules / share / 3.6e6 if share < 1 else joules / 3.6e6
    return kwh, f"GPU power readings ({share * 100:.0f} % of its GPU-time covered; whole-GPU draw)"


def _integrate(ts: Sequence[float], vs: Sequence[float | None], res: float, start: float,
               end: float) -> tuple[float, float]:
    """(joules, seconds covered) of one power series over ``[start, end]``."""
    pts = sorted((t, v) for t, v in zip(ts, vs) if t is not None)
    joules = covered = 0.0
    half = res / 2.0
    for i, (t, v) in enumerate(pts):
        if v is None or v != v:
            continue
        left = t - half if i == 0 else max(t - half, (pts[i - 1][0] + t) / 2.0)
        right = t + half if i == len(pts) - 1 else min(t + half, (t + pts[i + 1][0]) / 2.0)
        lo, hi = max(left, start), min(right, end)
        if hi > lo:
            joules += float(v) * (hi - lo)
            covered += hi - lo
    return joules, covered


def span_cost(start: float | None, end: float | None, gpus: tuple[int, ...] | None, *, gpus_from: str,
              power: PowerReader | None, now: float | None = None, what: str = "it") -> Cost:
    """The cost of ``gpus`` held from ``start`` to ``end`` (None: still running, up to ``now``)."""
    now = time.time() if now is None else now
    running = end is None
    if start is None:
        return unknown(f"{what} has no recorded start time", "no start time", running=running)
    stop = now if end is None else end
    seconds = max(0.0, stop - start)
    if gpus is None:
        return unknown(gpus_from, NO_GPUS, running=running, seconds=seconds)
    hours = len(gpus) * seconds / 3600.0
    kwh, how = energy_kwh(power, gpus, start, stop)
    return Cost(hours, kwh, gpus, seconds, running, gpus_from=gpus_from,
                energy_why=how)


def process_cost(view: Any, *, attribution: Any = None, power: PowerReader | None = None,
                 now: float | None = None) -> Cost:
    """A managed process's current (or last) run: a training run, a server, a benchmark job."""
    if view is None:
        return unknown("not started from this workspace: no process record gives its time or GPUs", NOT_STARTED)
    if view.started_at is None:
        return unknown("not started yet", NOT_STARTED)
    gpus, source = job_gpus(view.name, getattr(view.spec, "env", None), attribution)
    end = None if view.live else (view.ended_at or view.state_since)
    return span_cost(view.started_at, end, gpus, gpus_from=source, power=power, now=now, what=view.name)


def host_port(url: str) -> tuple[str, int | None]:
    """A server address as (host, port), the local names of this machine read as 127.0.0.1: two
    spellings of one server compare equal."""
    u = urlsplit(url if "://" in url else f"http://{url}")
    host = (u.hostname or "").lower()
    if host in ("localhost", "0.0.0.0", "::1", "::"):
        host = "127.0.0.1"
    try:
        port = u.port
    except ValueError:  # a port that is not a number or out of range: no server of the workspace has it
        port = None
    return host, port


def servers_of(snapshot_servers: Mapping[str, Any] | None, fleet: Any) -> list[str]:
    """The managed servers a regeneration snapshot's ``servers`` (URL -> figures) names, by name or address."""
    names = list(fleet.names()) if fleet is not None else []
    found: list[str] = []
    for url, s in (snapshot_servers or {}).items():
        name = s.get("name") if isinstance(s, dict) else None
        match = name if name in names else None
        if match is None:
            want = host_port(str(url))
            for n in names:
                cfg = fleet.config(n)
                if host_port(f"http://{cfg.host}:{cfg.port}") == want:
                    match = n
                    break
        if match is not None and match not in found:
            found.append(match)
    return found


def server_gpus(fleet: Any, name: str) -> tuple[tuple[int, ...] | None, str]:
    """A managed server's GPUs (its config's ``gpus``, the CUDA_VISIBLE_DEVICES it is launched with)."""
    try:
        cfg = fleet.config(name)
    except Exception:  # a server removed from the workspace since
        return None, f"server {name} is not in the workspace any more"
    if cfg.gpus:
        return tuple(sorted(set(cfg.gpus))), f"server {name}'s gpus"
    return None, (f"server {name}'s config sets no gpus (the CUDA_VISIBLE_DEVICES it is launched with), so "
                  "which GPUs it holds is not known")


def regen_cost(view: Any, snapshot: Mapping[str, Any] | None, fleet: Any, *, attribution: Any = None,
               power: PowerReader | None = None, now: float | None = None) -> Cost:
    """A regeneration job: the GPUs of the managed servers it sends requests to, over its run."""
    if view is None:
        return unknown("this run was started outside this workspace's dashboard and command line (it is followed "
                       "from its progress log), so no process record gives its start, its end or its GPUs", NOT_HERE)
    if view.started_at is None:
        return unknown("not started yet", NOT_STARTED)
    names = servers_of((snapshot or {}).get("servers"), fleet)
    end = None if view.live else (view.ended_at or view.state_since)
    if not names:
        return span_cost(view.started_at, end, None, power=power, now=now, what=view.name,
                         gpus_from="it sends requests to no managed server of this workspace, so its GPUs are "
                                   "not known")
    gpus: set[int] = set()
    for n in names:
        g, why = server_gpus(fleet, n)
        if g is None:
            return span_cost(view.started_at, end, None, gpus_from=why, power=power, now=now, what=view.name)
        gpus.update(g)
    return span_cost(view.started_at, end, tuple(sorted(gpus)), power=power, now=now, what=view.name,
                     gpus_from="its servers' GPUs (" + ", ".join(names) + ")")


def bench_cost(result: Any, fleet: Any, *, power: PowerReader | None = None) -> Cost:
    """A benchmark result from its start to its end: measured through one of the workspace's routers, the
    GPUs of every server behind it; else its server's GPUs (the workspace's server of that name; else its
    tensor parallelism, without energy).  The command line and the pages both read this."""
    start, end = result.started_at, result.ended_at
    if start is None or end is None:
        return unknown("the result records no start and end time, so its duration is not known",
                       "no start or end time")
    seconds = max(0.0, end - start)
    server = result.server
    names = list(fleet.names()) if fleet is not None else []
    routers = list(getattr(fleet, "router_names", list)()) if fleet is not None else []
    if server in routers and server not in names:
        members = list(fleet.router_members(server))
        if not members:
            return unknown(f"no GPU known: router {server} has no server behind it in this workspace", NO_GPUS,
                           seconds=seconds)
        gpus: set[int] = set()
        for m in members:
            got, why = server_gpus(fleet, m)
            if got is None:
                return span_cost(start, end, None, power=power, now=end, gpus_from=f"through router {server}: {why}")
            gpus.update(got)
        return span_cost(start, end, tuple(sorted(gpus)), power=power, now=end,
                         gpus_from=f"the GPUs of the servers behind router {server} ({', '.join(members)})")
    why = ""
    if server in names:
        gpus_, why = server_gpus(fleet, server)
        if gpus_ is not None:
            return span_cost(start, end, gpus_, gpus_from=why, power=power, now=end)
    tp = result.config.tp
    if tp:
        return Cost(tp * seconds / 3600.0, None, None, seconds, False, gpus_from=f"tensor parallelism {tp}",
                    energy_why="which GPUs it ran on is not known, so no power readings can be chosen")
    if why:
        where = why
    elif server:
        where = f"server {server} is not in this workspace"
    else:
        where = "no server recorded"
    return unknown(f"no GPU known: {where}, and the result records no tensor parallelism", NO_GPUS,
                   seconds=seconds)


def stored_power(store: Any) -> PowerReader:
    """A PowerReader of the power history the dashboard's telemetry keeps in the state ``store`` (its
    per-minute buckets, each reading its bucket's mean): what the command line reads without a sampler."""
    from types import SimpleNamespace

    from state.telemetry import TelemetryStore

    history = TelemetryStore(store)

    def read(gpu: int, since: float, until: float) -> Any:
        # a bucket that starts before ``since`` may still cover part of it
        rows = [b for b in history.read("gpu", gpu, "power_w", since - 3600.0, until) if b.t0 + b.width_s > since]
        return SimpleNamespace(t=tuple(b.t0 + b.width_s / 2 for b in rows), value=tuple(b.vmean for b in rows),
                               resolution_s=max((b.width_s for b in rows), default=60.0))

    return read


def total(costs: Iterable[Cost]) -> tuple[float | None, float | None, int]:
    """(GPU-hours, kWh, jobs counted): sums over the jobs whose figure is known (None when none is)."""
    costs = list(costs)
    hours = [c.gpu_hours for c in costs if c.gpu_hours is not None]
    kwh = [c.energy_kwh for c in costs if c.energy_kwh is not None]
    return (sum(hours) if hours else None, sum(kwh) if kwh else None, len(hours))
