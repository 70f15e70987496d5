"""The alert rules: each a pure function of a snapshot and the thresholds, giving its alerts.

A rule gives an alert while its condition holds and nothing once it no longer does; the engine
turns that into fired and cleared.  Rules never read a clock: ``snap.now`` is the time.
"""

from __future__ import annotations

from statistics import median
from typing import Callable, Iterable
from urllib.parse import urlencode

from backend.alerts.model import Alert, DiskState, GpuState, RegenState, ServerState, Snapshot, Thresholds

GIB = 1024 ** 3


def link(page: str, **query: object) -> str:
    """``/servers?server=glm5``: a page path with its query."""
    q = urlencode({k: str(v) for k, v in query.items() if v is not None})
    return f"/{page}" + (f"?{q}" if q else "")


def duration(s: float) -> str:
    s = max(0, int(round(s)))
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60:02d} m"
    if s >= 60:
        return f"{s // 60} m {s % 60:02d} s"
    return f"{s} s"


# -- servers ----------------------------------------------------------------------------------

def accept_stuck(snap: Snapshot, th: Thresholds) -> list[Alert]:
    """Speculation on, the server ready, and the mean of the accept_len readings of the first
    ``accept_window_s`` after ready at or below ``accept_floor``: the draft is accepting nothing.
    The mean, not every reading: a draft that accepts next to nothing still shows an odd 1.07 on a
    small batch, and one such reading must not hide the mistake."""
    out = []
    for s in snap.servers:
        if not s.spec_on or s.ready_at is None or s.state != "RUNNING":
            continue
        if snap.now - s.ready_at < th.accept_window_s:
            continue
        window = [a for t, a in s.accept if s.ready_at < t <= s.ready_at + th.accept_window_s]
        if not window:
            window = [a for t, a in s.accept if t > s.ready_at][:3]
        if not window:
            continue
        mean = sum(window) / len(window)
        if mean > th.accept_floor:
            continue
        out.append(Alert(
            "accept-stuck", s.name, "error",
            f"{s.name}: accept_len {mean:.2f} since ready (mean of {len(window)} readings): "
            "speculation accepts no draft tokens",
            "Check the speculative algorithm against the draft (an EAGLE-3 draft needs EAGLE3), the draft "
            "path and its vocabulary; relaunch from the Servers page after the preflight passes.",
            link("servers", server=s.name), s.ready_at + th.accept_window_s))
    return out


def spec_slower(snap: Snapshot, th: Thresholds) -> list[Alert]:
    """Speculation on and the median aggregate tok/s over the last ``steady_window_s`` (every
    reading at one concurrency, the window covered) below ``slower_ratio`` of the baseline
    measured at that concurrency."""
    out = []
    for s in snap.servers:
        if not s.spec_on or s.state != "RUNNING" or not s.speed:
            continue
        start = snap.now - th.steady_window_s
        window = [(t, v, c) for t, v, c in s.speed if t >= start]
        if not window or window[0][0] - start > max(10.0, th.steady_window_s * 0.1):
            continue  # the readings do not cover the window yet
        loads = {c for _, _, c in window}
        if len(loads) != 1:
            continue  # the load changed: no steady window to compare
        conc = loads.pop()
        base = s.baseline.get(conc)
        if conc < 1 or not base:
            continue
        tok_s = median(v for _, v, _ in window)
        ratio = tok_s / base
        if ratio >= th.slower_ratio:
            continue
        out.append(Alert(
            "spec-slower", s.name, "warning",
            f"{s.name}: speculation {tok_s:,.1f} tok/s vs baseline {base:,.1f} tok/s at concurrency {conc} "
            f"({ratio:.2f}×) over {duration(th.steady_window_s)}",
            "Speculation does not pay at this load: try fewer draft tokens or steps, a better draft, "
            "or serve without speculation at this concurrency (see the break-even panel).",
            link("benchmarks", server=s.name, concurrency=conc), window[0][0]))
    return out


def server_down(snap: Snapshot, th: Thresholds) -> list[Alert]:
    """A server that died (FATAL, exited non-zero) or keeps restarting (``restart_loop`` tries)."""
    out = []
    for s in snap.servers:
        looping = s.tries >= th.restart_loop and s.state in ("BACKOFF", "STARTING", "FATAL")
        died = s.state == "FATAL" or (s.state == "EXITED" and s.exit_code not in (0, None))
        if looping:
            out.append(Alert(
                "server-restart-loop", s.name, "error",
                f"{s.name}: restarting in a loop ({s.tries} tries, {s.state})"
                + (f": {s.detail}" if s.detail else ""),
                "Read the end of the server's log for the error that ends each start; fix the launch "
                "config and relaunch from the Servers page.",
                link("servers", server=s.name), snap.now))
        elif died:
            code = f" with exit code {s.exit_code}" if s.exit_code is not None else ""
            title = f"{s.name}: server down ({s.state}{code})"
            out.append(Alert(
                "server-down", s.name, "error",
                title + (f": {s.detail}" if s.detail and s.detail not in title else ""),
                "Read the server's log for why it ended, then start or relaunch it from the Servers page.",
                link("servers", server=s.name), snap.now))
    return out


# -- regeneration -----------------------------------------------------------------------------

def regen_stalled(snap: Snapshot, th: Thresholds) -> list[Alert]:
    out = []
    for r in snap.regens:
        if not r.running:
            continue
        last = r.last_completion_at if r.last_completion_at is not None else r.started_at
        if last is None or snap.now - last < th.stall_s:
            continue
        out.append(Alert(
            "regen-stalled", r.name, "warning",
            f"{r.name}: no row completed for {duration(snap.now - last)}",
            "Check that its servers answer (Servers page) and read the job's log; pause and resume, "
            "or stop it and requeue the failed rows.",
            link("regeneration", job=r.name), last + th.stall_s))
    return out


def _completed_between(points: list[tuple[float, int, int]], t0: float) -> tuple[int, int] | None:
    """(done, failed) added since ``t0``, from the reading at or just before it."""
    before = [p for p in points if p[0] <= t0]
    if not before or not points:
        return None
    _, d0, f0 = before[-1]
    _, d1, f1 = points[-1]
    return max(0, d1 - d0), max(0, f1 - f0)


def regen_errors(snap: Snapshot, th: Thresholds) -> list[Alert]:
    """The failed share of the rows completed in the last ``error_window_s`` above ``error_rate``
    and above the share before that window (a rising rate, not an old one)."""
    out = []
    for r in snap.regens:
        if not r.running or len(r.points) < 2:
            continue
        pts = list(r.points)
        recent = _completed_between(pts, snap.now - th.error_window_s)
        if recent is None:
            continue
        done, failed = recent
        if done + failed < 10:
            continue  # too few rows to call a rate
        rate = failed / (done + failed)
        start = snap.now - th.error_window_s
        earlier = [p for p in pts if p[0] <= start]
        d0, f0 = earlier[-1][1], earlier[-1][2]
        before = f0 / (d0 + f0) if d0 + f0 else 0.0
        if rate <= th.error_rate or rate <= before:
            continue
        out.append(Alert(
            "regen-errors", r.name, "warning" if rate < 0.5 else "error",
            f"{r.name}: {rate * 100:.0f}% of the last {done + failed:,} rows failed "
            f"(was {before * 100:.0f}% before)",
            "Look at the error classes on the Regeneration page (timeouts, context length, server "
            "errors); fix the cause, then requeue the failed rows.",
            link("regeneration", job=r.name), start))
    return out


def eta_deadline(snap: Snapshot, th: Thresholds) -> list[Alert]:
    """The ETA's point estimate past the job's deadline (an error once even the band's low end is)."""
    out = []
    for r in snap.regens:
        if not r.running or r.deadline is None or r.eta_point_s is None:
            continue
        point_end = snap.now + r.eta_point_s
        if point_end <= r.deadline:
            continue
        low_past = r.eta_low_s is not None and snap.now + r.eta_low_s > r.deadline
        out.append(Alert(
            "eta-deadline", r.name, "error" if low_past else "warning",
            f"{r.name}: expected to finish {duration(point_end - r.deadline)} after its deadline",
            "Add a server to the job, raise its concurrency, or move the deadline in [alerts] deadlines.",
            link("regeneration", job=r.name), snap.now))
    return out


# -- GPUs and disks ---------------------------------------------------------------------------

def gpu_memory(snap: Snapshot, th: Thresholds) -> list[Alert]:
    out = []
    for g in snap.gpus:
        if not g.mem_used or not g.mem_total:
            continue
        frac = g.mem_used / g.mem_total
        if frac <= th.gpu_mem_fraction:
            continue
        out.append(Alert(
            "gpu-memory", str(g.index), "warning",
            f"GPU {g.index} memory {frac * 100:.0f}% full ({g.mem_used / GIB:.1f} of {g.mem_total / GIB:.1f} GiB)",
            "Lower the server's mem_fraction_static or max running requests, or move a job to another GPU.",
            link("gpus", gpu=g.index), snap.now))
    return out


def gpu_throttle(snap: Snapshot, th: Thresholds) -> list[Alert]:
    out = []
    for g in snap.gpus:
        if not g.throttle:
            continue
        out.append(Alert(
            "gpu-throttle", str(g.index), "warning",
            f"GPU {g.index} throttling ({', '.join(g.throttle)})",
            "Check the GPU's temperature and power on the GPUs page; cooling or a power cap slows every job on it.",
            link("gpus", gpu=g.index), snap.now))
    return out


def gpu_idle(snap: Snapshot, th: Thresholds) -> list[Alert]:
    """A GPU held by a running job whose every reading of the last ``gpu_idle_s`` is below
    ``gpu_idle_util`` (a missing reading is not idle)."""
    out = []
    for g in snap.gpus:
        if not g.held_by:
            continue
        start = snap.now - th.gpu_idle_s
        window = [(t, u) for t, u in g.util if t >= start]
        if not window or window[0][0] - start > max(5.0, th.gpu_idle_s * 0.1):
            continue
        if any(u is None or u >= th.gpu_idle_util for _, u in window):
            continue
        out.append(Alert(
            "gpu-idle", str(g.index), "warning",
            f"GPU {g.index} idle for {duration(th.gpu_idle_s)} while {', '.join(g.held_by)} holds it",
            "The job may be stuck or waiting: read its log; stop it to free the GPU if it has no work.",
            link("gpus", gpu=g.index), window[0][0]))
    return out


def disk_full(snap: Snapshot, th: Thresholds) -> list[Alert]:
    out = []
    need = th.disk_min_free_gb * GIB
    for d in snap.disks:
        if d.free_bytes >= need:
            continue
        sev = "error" if d.free_bytes < min(need, GIB) else "warning"
        out.append(Alert(
            "disk-full", d.path, sev,
            f"{d.free_bytes / GIB:.1f} GiB free in {d.path} (of {d.total_bytes / GIB:.1f} GiB)",
            "Free space there (old checkpoints, outputs) or move outputs_dir: a full disk ends the jobs writing to it.",
            link("gpus"), snap.now))
    return out


RULES: dict[str, Callable[[Snapshot, Thresholds], list[Alert]]] = {
    "accept-stuck": accept_stuck,
    "spec-slower": spec_slower,
    "server-down": server_down,
    "regen-stalled": regen_stalled,
    "regen-errors": regen_errors,
    "eta-deadline": eta_deadline,
    "gpu-memory": gpu_memory,
    "gpu-throttle": gpu_throttle,
    "gpu-idle": gpu_idle,
    "disk-full": disk_full,
}


def evaluate(snap: Snapshot, th: Thresholds, rules: Iterable[str] | None = None) -> list[Alert]:
    """Every rule's alerts, errors first."""
    out: list[Alert] = []
    for name in (rules if rules is not None else RULES):
        out.extend(RULES[name](snap, th))
    order = {"error": 0, "warning": 1, "info": 2}
    return sorted(out, key=lambda a: (order[a.severity], a.key))


__all__ = ["RULES", "evaluate", "link", "ServerState", "RegenState", "GpuState", "DiskState"]
