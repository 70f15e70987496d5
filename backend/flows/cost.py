"""What a job cost: GPU-hours and energy per regeneration job, training run and benchmark.

A job's GPUs come from its own spec (``CUDA_VISIBLE_DEVICES``), else from the telemetry's attribution of
GPU processes to managed process trees (what the GPUs page shows); a regeneration job holds no GPU itself,
so its GPUs are those of the managed servers it sends requests to; a benchmark's are its server's (through a
router, those of every server behind it).  Its
time is the process record's start and end (a job still running counts up to now), a benchmark's the
result's own start and end.

GPU-hours = GPUs × hours.  Energy, GPU by GPU, is the rise of NVML's total energy counter over the job's
time (``counter(end) - counter(start)``, ``backend.telemetry.energy``: a counter that went down, a driver
reload, leaves its step out; a gap in the readings stays a gap), where the counter's readings cover at
least :data:`MIN_COVERAGE` of that GPU's time; else the telemetry's power readings integrated over it
(each reading stands for the time up to halfway to its neighbours, never more than the series'
resolution); else unknown.  ``Cost.energy_method`` names what was used: ``energy counter``, ``power
samples`` or both (GPU by GPU, in ``energy_why``).

Energy is the whole GPUs' energy over the job's time: a GPU that other jobs used at the same time is not
split between them (NVML's counter is per GPU, not per process), and ``energy_why`` names the other jobs the
telemetry sees on those GPUs.  A regeneration's GPUs are its servers': their energy over its time counts
every request they answered then.  Tokens per kWh (a regeneration): the answer tokens written during the
job's time over that energy.

Every figure that cannot be known is ``None`` with the reason beside it, never 0: the whole reason (a
sentence for a hover) and a few words to stand beside an ``N/A`` ("not started", "run not started here").
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
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
    energy_method: str = ""  # "energy counter", "power samples", "energy counter + power samples"; "" unknown
    shared_with: tuple[str, ...] = ()  # other jobs the telemetry sees on the job's GPUs (energy not split)
    tokens: int | None = None  # answer tokens written during the job's time (a regeneration)
    tokens_per_kwh: float | None = None
    tokens_why: str = ""  # why tokens_per_kwh is None

    @property
    def short_why(self) -> str:
        """The few words beside an N/A GPU-hours ("not known" where no shorter reason was given)."""
        return self.short or ("" if self.gpu_hours is not None else "not known")

    def to_dict(self) -> dict[str, Any]:
        """The JSON the command line and the pages share: null where not measured."""
        return {"gpu_hours": self.gpu_hours, "energy_kwh": self.energy_kwh,
                "gpus": list(self.gpus) if self.gpus is not None else None, "seconds": self.seconds,
                "running": self.running, "gpus_from": self.gpus_from,
                "gpu_hours_why": self.gpu_hours_why or None, "energy_why": self.energy_why or None,
                "energy_method": self.energy_method or None, "shared_with": list(self.shared_with),
                "tokens": self.tokens, "tokens_per_kwh": self.tokens_per_kwh,
                "tokens_per_kwh_why": self.tokens_why or None}


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


@dataclass(frozen=True)
class Energy:
    kwh: float | None
    how: str  # how it was measured, or why it is unknown
    method: str = ""  # "energy counter", "power samples", both joined by " + "; "" when unknown


COUNTER = "energy counter"
POWER = "power samples"


def measure_energy(power: PowerReader | None, gpus: Sequence[int], start: float, end: float) -> Energy:
    """The energy of ``gpus`` over ``[start, end]``: per GPU, the energy counter's rise where its readings
    cover enough of the time (``power.energy``, when the reader has it), else its power readings."""
    if power is None:
        return Energy(None, "no GPU telemetry")
    span = end - start
    if span <= 0:
        return Energy(None, "the job has no duration")
    counter = getattr(power, "energy", None)
    if counter is not None:  # here, not at the top: the command lines that import this module need no telemetry
        from backend.telemetry.energy import rise
    joules = 0.0
    used: dict[str, list[int]] = {COUNTER: [], POWER: []}
    notes: list[str] = []
    shares: list[float] = []
    for g in gpus:
        why_counter = ""
        if counter is not None:
            try:
                trace = counter(g, start, end)
                r = rise(trace, start, end, _shape(power, g, trace, start, end))
            except Exception as exc:  # a store that cannot be read: try the power readings
                r, why_counter = None, f"energy counter of GPU {g} could not be read ({type(exc).__name__})"
            if r is not None:
                share = r.covered_s / span
                if r.resets:
                    notes.append(f"GPU {g}'s counter went down {r.resets}× (a driver reload or reset): "
                                 "those steps are left out")
                if share >= MIN_COVERAGE:
                    joules += r.joules / share if share < 1 else r.joules
                    used[COUNTER].append(g)
                    shares.append(min(share, 1.0))
                    continue
                why_counter = f"energy counter of GPU {g}: " + (
                    f"its readings cover only {share * 100:.0f} % of the job's time" if share > 0
                    else (trace.why or "no readings over the job's time"))
        try:
            series = power(g, start, end)
        except Exception as exc:  # a store that cannot be read: unknown, with why
            return Energy(None, f"the power readings of GPU {g} could not be read ({type(exc).__name__})"
                          + (f"; {why_counter}" if why_counter else ""))
        j, c = _integrate(tuple(series.t), tuple(series.value), float(series.resolution_s or 1.0), start, end)
        share = c / span
        if share < MIN_COVERAGE:
            return Energy(None, (f"the GPU power readings cover only {share * 100:.0f} % of its GPU-time (they are "
                                 "recorded while the dashboard runs, and kept for the telemetry history's retention)")
                          + (f"; {why_counter}" if why_counter else ""))
        joules += j / share if share < 1 else j
        used[POWER].append(g)
        shares.append(share)
        if why_counter and counter is not None:
            notes.append(why_counter)
    method = " + ".join(m for m in (COUNTER, POWER) if used[m])
    covered = sum(shares) / len(shares) * 100 if shares else 0.0
    if not used[POWER]:
        how = f"NVML energy counter ({covered:.0f} % of its GPU-time covered; whole-GPU energy)"
    elif not used[COUNTER]:
        how = f"GPU power readings ({covered:.0f} % of its GPU-time covered; whole-GPU draw)"
    else:
        how = (f"NVML energy counter on {_gpus(used[COUNTER])}, power readings on {_gpus(used[POWER])} "
               f"({covered:.0f} % of its GPU-time covered; whole-GPU energy)")
    if notes:
        how += "; " + "; ".join(notes)
    return Energy(joules / 3.6e6, how, method)


def _shape(power: PowerReader, gpu: int, trace: Any, start: float, end: float) -> Callable[[float, float], float | None]:
    """The power readings' energy from ``a`` to ``b`` (None where they cover less than 90 % of it), for
    placing the job's edges inside a counter step; read once, around the steps that hold the edges."""
    edge = [s for s in trace.steps if s.t1 > s.t0 and (s.t0 < start < s.t1 or s.t0 < end < s.t1)]
    if not edge:
        return lambda a, b: None
    lo, hi = min(s.t0 for s in edge), max(s.t1 for s in edge)
    try:
        series = power(gpu, lo - 5.0, hi + 5.0)  # a reading either side, for the steps' own edges
        pts = (tuple(series.t), tuple(series.value), float(series.resolution_s or 1.0))
    except Exception:  # noqa: BLE001 - no shape: the edges go by time
        return lambda a, b: None

    def shape(a: float, b: float) -> float | None:
        j, c = _integrate(pts[0], pts[1], pts[2], a, b)
        return j if b > a and c >= 0.9 * (b - a) else None

    return shape


def _gpus(gs: Sequence[int]) -> str:
    return ("GPU " if len(gs) == 1 else "GPUs ") + ", ".join(str(g) for g in gs)


def energy_kwh(power: PowerReader | None, gpus: Sequence[int], start: float, end: float) -> tuple[float | None, str]:
    """(kWh, how or why not): :func:`measure_energy` as a pair."""
    e = measure_energy(power, gpus, start, end)
    return e.kwh, e.how


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
              power: PowerReader | None, now: float | None = None, what: str = "it", attribution: Any = None,
              own: Sequence[str] = ()) -> Cost:
    """The cost of ``gpus`` held from ``start`` to ``end`` (None: still running, up to ``now``).  ``own``: the
    job's own names in the telemetry's attribution (itself, a regeneration's servers); any other job seen on
    its GPUs is named in ``shared_with`` and in ``energy_why``, since the energy is the whole GPUs'."""
    now = time.time() if now is None else now
    running = end is None
    if start is None:
        return unknown(f"{what} has no recorded start time", "no start time", running=running)
    stop = now if end is None else end
    seconds = max(0.0, stop - start)
    if gpus is None:
        return unknown(gpus_from, NO_GPUS, running=running, seconds=seconds)
    hours = len(gpus) * seconds / 3600.0
    e = measure_energy(power, gpus, start, stop)
    # the attribution is of now: it tells who shares a running job's GPUs, not who held a finished job's
    shared = shared_with(attribution, gpus, own or (what,)) if running else ()
    how = e.how
    if shared and e.kwh is not None:
        how += ("; not split with the other jobs seen on its GPUs (" + ", ".join(shared) +
                "): the figure is the whole GPUs' energy over its time")
    return Cost(hours, e.kwh, gpus, seconds, running, gpus_from=gpus_from, energy_why=how,
                energy_method=e.method if e.kwh is not None else "", shared_with=shared)


def shared_with(attribution: Any, gpus: Sequence[int], own: Sequence[str]) -> tuple[str, ...]:
    """The other managed jobs the telemetry's attribution sees on ``gpus`` now (names, sorted)."""
    jobs_on = getattr(attribution, "jobs_on", None)
    if jobs_on is None:
        return ()
    mine = set(own)
    return tuple(sorted({j for g in gpus for j in jobs_on(g) if j not in mine}))


def process_cost(view: Any, *, attribution: Any = None, power: PowerReader | None = None,
                 now: float | None = None) -> Cost:
    """A managed process's current (or last) run: a training run, a server, a benchmark job."""
    if view is None:
        return unknown("not started from this workspace: no process record gives its time or GPUs", NOT_STARTED)
    if view.started_at is None:
        return unknown("not started yet", NOT_STARTED)
    gpus, source = job_gpus(view.name, getattr(view.spec, "env", None), attribution)
    end = None if view.live else (view.ended_at or view.state_since)
    return span_cost(view.started_at, end, gpus, gpus_from=source, power=power, now=now, what=view.name,
                     attribution=attribution)


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
               power: PowerReader | None = None, now: float | None = None, history: Any = None) -> Cost:
    """A regeneration job: the GPUs of the managed servers it sends requests to, over its run; with the answer
    tokens written in that time and tokens per kWh (``history``: the progress follower's ``History``, which a
    resumed run needs to tell this start's tokens from those written before)."""
    if view is None:
        return unknown("this run was started outside this workspace's dashboard and command line (it is followed "
                       "from its progress log), so no process record gives its start, its end or its GPUs", NOT_HERE)
    if view.started_at is None:
        return unknown("not started yet", NOT_STARTED)
    names = servers_of((snapshot or {}).get("servers"), fleet)
    end = None if view.live else (view.ended_at or view.state_since)
    if not names:
        c = span_cost(view.started_at, end, None, power=power, now=now, what=view.name,
                      gpus_from="it sends requests to no managed server of this workspace, so its GPUs are not known")
        return with_tokens(c, view.started_at, snapshot, history)
    gpus: set[int] = set()
    for n in names:
        g, why = server_gpus(fleet, n)
        if g is None:
            c = span_cost(view.started_at, end, None, gpus_from=why, power=power, now=now, what=view.name)
            return with_tokens(c, view.started_at, snapshot, history)
        gpus.update(g)
    c = span_cost(view.started_at, end, tuple(sorted(gpus)), power=power, now=now, what=view.name,
                  gpus_from="its servers' GPUs (" + ", ".join(names) + ")", attribution=attribution,
                  own=(view.name, *names))
    return with_tokens(c, view.started_at, snapshot, history)


def run_tokens(start: float, stop: float, snapshot: Mapping[str, Any] | None, history: Any = None
               ) -> tuple[int | None, str]:
    """(answer tokens written from ``start`` to ``stop``, why None).  The progress log's ``completion_tokens``
    counts every answer in the output, those of earlier starts too (a resume counts them again as it reads
    the output), so this start's tokens are the last count by ``stop`` less the last count of the earlier
    starts (before ``start``)."""
    pts: list[tuple[float, float]] = []
    if history is not None:
        ts, vs = getattr(history, "t", ()), (getattr(history, "values", {}) or {}).get("completion_tokens", ())
        pts = [(float(t), float(v)) for t, v in zip(ts, vs) if v is not None]
    if pts:
        before = [v for t, v in pts if t < start]
        upto = [v for t, v in pts if start <= t <= stop + 1.0]
        if upto:
            return max(0, int(upto[-1] - (before[-1] if before else 0.0))), ""
    snap = snapshot or {}
    toks, first = snap.get("completion_tokens"), snap.get("started_at")
    if not isinstance(toks, (int, float)):
        return None, "the progress log records no answer tokens"
    if isinstance(first, (int, float)) and first >= start - 5.0:  # the log began with this start
        return int(toks), ""
    return None, ("the run was resumed: its latest progress line counts the answers of earlier starts too, and "
                  "the progress history that tells them apart was not read")


def with_tokens(c: Cost, start: float, snapshot: Mapping[str, Any] | None, history: Any = None) -> Cost:
    """``c`` with the answer tokens of its time and tokens per kWh (None with why)."""
    if c.seconds is None:
        return replace(c, tokens_why="the job's time is not known")
    toks, why = run_tokens(start, start + c.seconds, snapshot, history)
    if toks is None:
        return replace(c, tokens_why=why)
    if c.energy_kwh is None:
        return replace(c, tokens=toks, tokens_why="energy not measured: " + (c.energy_why or "no reading"))
    if c.energy_kwh <= 0:
        return replace(c, tokens=toks, tokens_why="no energy was measured over the job's time")
    return replace(c, tokens=toks, tokens_per_kwh=toks / c.energy_kwh)


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


class Readings:
    """A :data:`PowerReader` (``reader(gpu, since, until)``: a Series of power_w) that also reads the energy
    counter: ``reader.energy(gpu, since, until)`` gives a ``backend.telemetry.energy.CounterTrace``."""

    def __init__(self, power: PowerReader, energy: Callable[[int, float, float], Any] | None = None):
        self._power = power
        if energy is not None:
            self.energy = energy

    def __call__(self, gpu: int, since: float, until: float) -> Any:
        return self._power(gpu, since, until)


def telemetry_power(tele: Any) -> Readings | None:
    """The readings of the dashboard's sampler (``backend.telemetry.sampler.Sampler``): its power history and
    its energy counter (the ring, then the stored buckets)."""
    if tele is None:
        return None
    energy = getattr(tele, "energy_trace", None)
    return Readings(lambda gpu, since, until: tele.history(gpu, "power_w", since, until), energy)


def stored_power(store: Any) -> Readings:
    """The readings the dashboard's telemetry keeps in the state ``store`` (per-minute buckets): power, each
    reading its bucket's mean, and the energy counter, each bucket's first and last reading.  What the
    command line reads without a sampler."""
    from types import SimpleNamespace

    from backend.telemetry import energy as counter
    from state.telemetry import TelemetryStore

    history = TelemetryStore(store)

    def read(gpu: int, since: float, until: float) -> Any:
        # a bucket that starts before ``since`` may still cover part of it
        rows = [b for b in history.read("gpu", gpu, "power_w", since - 3600.0, until) if b.t0 + b.width_s > since]
        return SimpleNamespace(t=tuple(b.t0 + b.width_s / 2 for b in rows), value=tuple(b.vmean for b in rows),
                               resolution_s=max((b.width_s for b in rows), default=60.0))

    def energy(gpu: int, since: float, until: float) -> Any:
        rows = [b for b in history.read("gpu", gpu, counter.FIELD, since - 3600.0, until + 60.0)
                if b.t0 + b.width_s > since - 60.0]
        width = max((b.width_s for b in rows), default=60.0)
        return counter.from_buckets(rows, max_gap_s=width + 5.0, why="no energy counter readings stored for "
                                    "this GPU over the job's time (not supported, or the dashboard was not running)")

    return Readings(read, energy)


def total(costs: Iterable[Cost]) -> tuple[float | None, float | None, int]:
    """(GPU-hours, kWh, jobs counted): sums over the jobs whose figure is known (None when none is)."""
    costs = list(costs)
    hours = [c.gpu_hours for c in costs if c.gpu_hours is not None]
    kwh = [c.energy_kwh for c in costs if c.energy_kwh is not None]
    return (sum(hours) if hours else None, sum(kwh) if kwh else None, len(hours))
