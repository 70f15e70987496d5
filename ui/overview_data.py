"""The Overview page's data: what each tile shows, read from the same snapshots and computed by the same
functions as the page it links to (no Streamlit here).

- Regeneration: each running job's progress follower (``backend.regen.follow``), rows done of those to ask,
  rate and ETA band, and its state as the Regeneration page words it.
- Servers: each server's latest decode line, the baseline chosen as the Servers page chooses it
  (``backend.bench.baseline.StoredBaselines.choose``), ``backend.sglang.livefigures`` for the figures
  and ``backend.sglang.monitor.steady_verdict`` for the verdict over a steady window at the baseline's load,
  worded as the Servers page words it (its badge and sentence), a missing verdict said plainly.
- Cost: ``backend.flows.cost`` over the jobs' process records, their GPUs and the power readings; a run
  followed from its progress log has no process record, so its cost is N/A with that reason.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from backend.flows import cost as job_cost
from backend.regen import control as regen_control
from backend.regen.follow import progress_follower
from backend.sglang import livefigures
from backend.sglang.monitor import PAR_TOLERANCE, SLOW_RATIO, STEADY_WINDOW_S, steady_verdict
from specdeck_types.eta import Eta
from ui import fmt

# -- regeneration ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RegenTile:
    name: str
    out: str
    state: str  # the snapshot's state word (running, paused, ...), or the process's when it ended first
    ended: bool
    asked: int | None  # done + failed: skipped rows are never asked, so they are not progress
    to_ask: int | None  # total - skipped
    done: int | None
    failed: int | None
    rate: float | None  # rows/s
    tok_s: float | None
    eta: Eta | None  # None once ended
    snapshot_t: float | None
    cost: job_cost.Cost

    @property
    def fraction(self) -> float | None:
        if not self.to_ask or self.asked is None:
            return None
        return min(1.0, self.asked / self.to_ask)


def _num(v: Any) -> int | None:
    return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def power_reader(rt) -> job_cost.PowerReader | None:
    """The dashboard sampler's readings: its energy counter first, its power history where the counter falls
    short (the Regeneration page and the command line read the same)."""
    return job_cost.telemetry_power(getattr(rt, "telemetry", None))


def attribution(rt) -> Any:
    snap = rt.telemetry.latest() if getattr(rt, "telemetry", None) is not None else None
    return getattr(snap, "attribution", None)


FOLLOWED_STALE_S = 600.0  # a run without a process here counts as running while its log moved this recently


def regen_jobs(rt) -> list[tuple[Any, Any]]:
    """(job, process view) of every regeneration the Regeneration page lists, oldest first: the jobs started
    from this workspace, then runs known only by their progress logs under its outputs (a run started from
    a terminal), each as a job-like ``(name, meta)`` with no process view."""
    from ui.regen.live import known_runs  # the Regeneration page's own list

    jobs = {job.meta["out"]: job for job in rt.jobs() if job.meta.get("kind") == "regen" and job.meta.get("out")}
    out = []
    for path, name in known_runs(rt).items():
        job = jobs.get(path)
        if job is not None:
            out.append((job, rt.supervisor.view(job.name)))
        else:
            out.append((SimpleNamespace(name=name, meta={"kind": "regen", "out": path}), None))
    return out


def regen_tile(rt, job, view, *, now: float | None = None, power=None, attr=None) -> RegenTile:
    now = time.time() if now is None else now
    out = job.meta["out"]
    f = progress_follower(out).poll()
    snap = f.latest or {}
    state = str(snap.get("state") or "")
    if view is None:  # followed by its files: running while its log says so and moves
        ended = not snap or state not in regen_control.LIVE_STATES or now - float(snap.get("t") or 0) > FOLLOWED_STALE_S
        if snap and ended and state in regen_control.LIVE_STATES:
            state = "no news"
    else:
        ended = not view.live or (bool(snap) and state not in regen_control.LIVE_STATES)
        if not view.live and (not state or state in regen_control.LIVE_STATES):
            state = fmt.view_badge(view).label.lower()  # the process ended before its last snapshot said so
    total, skipped = _num(snap.get("total")), _num(snap.get("skipped"))
    done, failed = _num(snap.get("done")), _num(snap.get("failed"))
    asked = None if done is None and failed is None else (done or 0) + (failed or 0)
    to_ask = None if total is None else max(0, total - (skipped or 0))
    rate = snap.get("req_s") if isinstance(snap.get("req_s"), (int, float)) else None
    tok = snap.get("tok_s") if isinstance(snap.get("tok_s"), (int, float)) else None
    c = job_cost.regen_cost(view, snap, rt.fleet, attribution=attr, power=power, now=now)
    return RegenTile(job.name, out, state or "starting", ended, asked, to_ask, done, failed,
                     None if ended else rate, None if ended else tok, None if ended else f.eta(),
                     snap.get("t"), c)


def regen_tiles(rt, *, now: float | None = None) -> tuple[list[RegenTile], RegenTile | None]:
    """(the running runs' tiles, the newest ended run's tile when none runs)."""
    power, attr = power_reader(rt), attribution(rt)
    tiles = [regen_tile(rt, j, v, now=now, power=power, attr=attr) for j, v in regen_jobs(rt)]
    running = [t for t in tiles if not t.ended]
    if running or not tiles:
        return running, None
    return [], max(tiles, key=lambda t: t.snapshot_t or 0.0)


def eta_text(eta: Eta | None) -> str:
    """``ETA 1 h 50 m-2 h 20 m (point 2 h 05 m)``: the band with its point inside."""
    if eta is None:
        return "no ETA (ended)"
    if eta.point_s == 0:
        return "ETA done"
    band = eta.range_text()
    if not eta.known or not band:
        return "ETA N/A"
    return f"ETA {band} (point {fmt.duration(eta.point_s)})"


# -- servers -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerTile:
    name: str
    badge: fmt.Badge
    live: bool  # a process runs (relaunch, not start)
    algorithm: str | None
    accept_len: float | None
    lifetime: float | None
    accept_level: str  # the accept_len's level against its lifetime (livefigures.accept_vs_lifetime)
    tok_s: float | None  # the figure the verdict is about
    tok_s_label: str  # "per-request tok/s" or "aggregate tok/s"
    baseline_tok_s: float | None
    baseline_text: str
    verdict: Any  # backend.sglang.monitor.SteadyVerdict
    refreshed_at: float | None
    running_req: int | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)


def server_tile(rt, name: str, stored, *, now: float | None = None) -> ServerTile:
    """The Servers page's key figures of server ``name``: the same baseline choice and the same verdict.

    ``stored``: a ``backend.bench.baseline.StoredBaselines`` of the workspace's store."""
    now = time.time() if now is None else now
    fleet = rt.fleet
    snap = fleet.snapshot(name)
    view = rt.supervisor.view(name)
    cfg = fleet.config(name)
    newest = livefigures.latest(snap)
    dec, acc, life, tput, running = newest.decode, newest.accept_len, newest.lifetime_accept_len, \
        newest.gen_throughput, newest.running_req
    choice = stored.choose(name, cfg.model_path, cfg.served_model_name, running, cfg.baseline_tok_s)
    measured = livefigures.measured_figures(tput, running, choice) if choice.stored else None
    speed = livefigures.speed_figures(tput, running, None if measured else snap.baseline_tok_s)
    if measured is not None:  # a baseline measured at a concurrency: the aggregate at that load
        verdict = steady_verdict(dec["ts"], dec["gen_throughput"], dec["running_req"], choice.tok_s,
                                 choice.concurrency, now=now)
        tok, label = tput, "aggregate tok/s"
        base, base_text = choice.tok_s, choice.label
    else:  # the configured single-stream baseline: one request in flight
        verdict = steady_verdict(dec["ts"], dec["gen_throughput"], dec["running_req"], snap.baseline_tok_s, 1,
                                 now=now)
        tok, label = speed.per_request, "per-request tok/s"
        base = snap.baseline_tok_s
        base_text = (f"configured single-stream baseline {fmt.tok_s(base)}" if base
                     else "no baseline: set baseline_tok_s or measure one")
    badge = fmt.server_badge(view, snap.status, health_at=snap.health.at if snap.health is not None else None)
    delta = livefigures.accept_vs_lifetime(acc, life)
    notes = []
    if snap.alert is not None:
        notes.append(snap.alert.title)
    return ServerTile(name, badge, view is not None and view.live, cfg.speculative.algorithm, acc, life,
                      delta.level, tok, label, base, base_text, verdict, snap.refreshed_at, running, tuple(notes))


STEADY_SHORT = re.compile(r"^steady (\d+) of (\d+) s$")  # SteadyVerdict.short while the window fills
VERDICT_RULE = (f"A verdict is given only after {STEADY_WINDOW_S:.0f} s of decode lines all at the baseline's load "
                f"(requests in flight): within ±{PAR_TOLERANCE * 100:.0f} % on par, above faster (green), below "
                f"slower (amber; red under {SLOW_RATIO:.2f}×).")


def verdict_words(v) -> str:
    """The verdict in a few words (``backend.sglang.monitor.SteadyVerdict``): the Servers page's badge
    (``faster 2.13× · 20 s at 1 req``); where there is none yet, why in plain words."""
    if v.verdict != "none":
        return v.badge
    steady = STEADY_SHORT.match(v.short or "")
    if steady:
        return f"no verdict yet: {steady[1]} of {steady[2]} s steady"
    return {"idle": "no verdict: idle, no request running",
            "load differs": "no verdict: the load differs",
            "no baseline": "no verdict: no baseline"}.get(v.short, v.badge)


def verdict_help(v, baseline_text: str) -> str:
    """The hover of the tile's verdict: the Servers page's sentence, the rule, and which baseline."""
    return (f"Verdict: {v.sentence}. {VERDICT_RULE} Baseline: {baseline_text}. The same figures and verdict as the "
            "Servers page.")


# -- GPUs --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GpuCell:
    index: int
    util: float | None  # percent
    mem_used: int | None
    mem_total: int | None
    power_w: float | None
    jobs: str  # who holds it
    lost: bool = False

    @property
    def mem_pct(self) -> float | None:
        if self.mem_used is None or not self.mem_total:
            return None
        return 100.0 * self.mem_used / self.mem_total


def gpu_cells(rt) -> tuple[list[GpuCell], str | None, float | None]:
    """(one cell per GPU, why there are none, when sampled)."""
    tele = getattr(rt, "telemetry", None)
    snap = tele.latest() if tele is not None else None
    if snap is None:
        return [], "no GPU sample yet", None
    if not snap.gpus:
        return [], (snap.state.message or str(snap.state.status.value)), snap.t
    attr = snap.attribution
    cells = [GpuCell(g.index, g.util_gpu, g.mem_used, g.mem_total, g.power_w,
                     attr.who(g.index) if attr is not None else "not attributed", g.lost) for g in snap.gpus]
    return cells, None, snap.t


# -- cost --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CostLine:
    what: str  # Regeneration / Training / Benchmarks
    gpu_hours: float | None
    energy_kwh: float | None
    counted: int  # jobs whose GPU-hours are known
    jobs: int  # jobs in all
    why: str  # why some (or all) are unknown: the hover
    short: str = ""  # why none is known, in a few words beside the N/A ("run not started here")
    energy_counted: int = 0  # jobs whose energy is known


def cost_line(what: str, costs: list[job_cost.Cost], *, none: str = "none yet") -> CostLine:
    """The cost of all ``what`` jobs; ``none``: the words beside the N/A where there is no job at all."""
    hours, kwh, counted = job_cost.total(costs)
    whys = sorted({c.gpu_hours_why for c in costs if c.gpu_hours is None and c.gpu_hours_why})
    ewhys = sorted({c.energy_why for c in costs if c.energy_kwh is None and c.gpu_hours is not None and c.energy_why})
    why = "; ".join(whys[:3] + [f"energy N/A: {e}" for e in ewhys[:2]])
    if not costs:
        short = none
    elif hours is None:
        shorts = list(dict.fromkeys(c.short_why for c in costs))
        short = ", ".join(shorts[:2]) + ("…" if len(shorts) > 2 else "")
    else:
        short = ""
    return CostLine(what, hours, kwh, counted, len(costs), why, short,
                    sum(1 for c in costs if c.energy_kwh is not None))


def cost_parts(line: CostLine) -> tuple[str, str]:
    """(``**0.33** GPU-h · 0.12 kWh`` or ``N/A (run not started here)``, what a hover adds: why a figure is
    N/A).  Figures known for some jobs only say how many (``1 of 2 jobs``)."""
    if line.gpu_hours is None:
        return f"{fmt.NA} ({line.short})", line.why
    text = f"**{line.gpu_hours:,.2f}** GPU-h · " + (f"{line.energy_kwh:,.2f} kWh" if line.energy_kwh is not None
                                                     else f"energy {fmt.NA}")
    if line.counted < line.jobs:
        text += f" ({line.counted} of {line.jobs} jobs)"
    elif line.energy_kwh is not None and line.energy_counted < line.counted:
        text += f" (energy of {line.energy_counted} of {line.counted})"
    return text, line.why


def regen_costs(rt, *, now: float | None = None) -> list[job_cost.Cost]:
    """Every regeneration the Regeneration page lists; a run followed from its progress log has no process
    record, so its cost is unknown, with that reason."""
    power, attr = power_reader(rt), attribution(rt)
    out = []
    for job, view in regen_jobs(rt):
        snap = progress_follower(job.meta["out"]).poll().latest if view is not None else None
        out.append(job_cost.regen_cost(view, snap, rt.fleet, attribution=attr, power=power, now=now))
    return out


def train_costs(rt, *, now: float | None = None) -> dict[str, job_cost.Cost]:
    power, attr = power_reader(rt), attribution(rt)
    return {name: job_cost.process_cost(rt.supervisor.view(name), attribution=attr, power=power, now=now)
            for name in rt.train.names()}


def bench_costs(rt, results) -> dict[int, job_cost.Cost]:
    """{result id: its cost}, as the Benchmarks page's Runs table gives them and from the same keeping of
    settled results' costs (ui.bench.cost): a new visitor's Overview does not read the power history of
    every stored result again (at 50 results, 24 h of 8 GPUs' telemetry: about 0.7 s of its first run)."""
    from ui.bench import cost as bench_cost

    return bench_cost.result_costs(rt, results)


def cost_text(c: job_cost.Cost) -> tuple[str, str]:
    """(``1.25 GPU-h · 0.42 kWh``, the hover text: where the GPUs came from and why a figure is N/A)."""
    hours = fmt.NA if c.gpu_hours is None else f"{c.gpu_hours:,.2f} GPU-h"
    kwh = fmt.NA if c.energy_kwh is None else f"{c.energy_kwh:,.2f} kWh"
    if c.gpu_hours is None:
        return f"{hours} ({c.short_why})", c.gpu_hours_why
    gpus = ", ".join(map(str, c.gpus)) if c.gpus else "?"
    helps = [f"GPUs {gpus} ({c.gpus_from})" if c.gpus is not None else c.gpus_from]
    if c.seconds is not None:
        helps.append(f"{fmt.duration(c.seconds)}{' so far' if c.running else ''}")
    helps.append(("energy N/A: " if c.energy_kwh is None else "energy from ") + (c.energy_why or "no reading"))
    return f"{hours} · {kwh if c.energy_kwh is not None else 'energy N/A'}", "; ".join(helps)
