"""The Regeneration page's cost line: what the job shown has cost so far (or in all, once it ended).

``Cost: 0.42 GPU-h · 0.118 kWh (energy counter) · 1,950,000 tokens/kWh``, N/A with the reason on hover: the
GPU-hours of its servers' GPUs over its run, their energy (NVML's energy counter, or the power readings where
the counter is missing, as the method says), and the answer tokens written in that time per kWh.  The same
figures as the Overview's and ``regen status --json`` (``backend.flows.cost.regen_cost``).  The energy is
the whole GPUs': the servers' GPUs over the job's time, other requests they answered then included.

Computing it reads the telemetry history of every GPU over the whole run, so a figure is kept for
:data:`KEEP_S` seconds and the page's 2 s refresh reads it again at most that often.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import streamlit as st

from backend.flows import cost as job_cost
from ui import fmt

KEEP_S = 15.0
_lock = threading.Lock()
_kept: dict[tuple[str, str, float | None], tuple[float, job_cost.Cost]] = {}


def readings(rt) -> job_cost.Readings | None:
    """The dashboard's telemetry readings: power history and the energy counter."""
    return job_cost.telemetry_power(getattr(rt, "telemetry", None))


def _attribution(rt) -> Any:
    tele = getattr(rt, "telemetry", None)
    snap = tele.latest() if tele is not None else None
    return getattr(snap, "attribution", None)


def job_cost_of(rt, out: str, view: Any, snap: dict | None, history: Any = None, *,
                now: float | None = None) -> job_cost.Cost:
    """The cost of the run writing ``out`` (its process ``view``, None for a run followed from its files)."""
    now = time.time() if now is None else now
    key = (str(getattr(rt.store, "path", id(rt.store))), out, getattr(view, "started_at", None))
    with _lock:
        kept = _kept.get(key)
    if kept is not None and now - kept[0] < KEEP_S and (view is None or view.live or not kept[1].running):
        return kept[1]
    c = job_cost.regen_cost(view, snap, rt.fleet, attribution=_attribution(rt), power=readings(rt), now=now,
                            history=history)
    with _lock:
        _kept[key] = (now, c)
    return c


def kwh_text(kwh: float) -> str:
    """``12.5 kWh``, ``0.118 kWh``, and under 10 Wh in Wh (``3.40 Wh``): never a bare 0.000."""
    if kwh >= 10:
        return f"{kwh:,.1f} kWh"
    if kwh >= 0.01:
        return f"{kwh:,.3f} kWh"
    return f"{kwh * 1000:,.2f} Wh"


def cost_text(c: job_cost.Cost) -> tuple[str, str]:
    """(the line's Markdown, its hover: where each figure comes from, or why it is N/A)."""
    if c.gpu_hours is None:
        return f"{fmt.NA} ({c.short_why})", c.gpu_hours_why
    parts = [f"**{c.gpu_hours:,.2f}** GPU-h"]
    helps = [f"GPU-hours: {len(c.gpus or ())} GPU(s) × {fmt.duration(c.seconds)}; the GPUs: {c.gpus_from}"]
    if c.energy_kwh is not None:
        parts.append(f"**{kwh_text(c.energy_kwh)}** ({c.energy_method})")
        helps.append(f"energy: {c.energy_why}")
    else:
        parts.append(f"energy {fmt.NA}")
        helps.append(f"energy N/A: {c.energy_why or 'no reading'}")
    if c.tokens_per_kwh is not None:
        parts.append(f"**{c.tokens_per_kwh:,.0f}** tokens/kWh")
        helps.append(f"tokens per kWh: {fmt.count(c.tokens)} answer tokens written in its time over its energy")
    else:
        parts.append(f"tokens/kWh {fmt.NA}")
        helps.append(f"tokens per kWh N/A: {c.tokens_why or 'not known'}")
    return " · ".join(parts), "; ".join(helps)


def cost_line(rt, out: str, view: Any, snap: dict | None, history: Any = None) -> None:
    """One caption under the job's figures."""
    c = job_cost_of(rt, out, view, snap, history)
    text, why = cost_text(c)
    lead = "Cost so far" if c.running else "Cost"
    st.caption(fmt.data_markdown(f"{lead}: {text}"), help=why or None)
