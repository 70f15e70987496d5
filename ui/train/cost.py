"""A training run's cost on the Training page: GPU-hours and energy of its current (or last) start."""

from __future__ import annotations

import streamlit as st

from backend.flows import cost as job_cost
from ui.overview_data import attribution, cost_text, power_reader


def run_cost(rt, name: str) -> job_cost.Cost:
    return job_cost.process_cost(rt.supervisor.view(name), attribution=attribution(rt), power=power_reader(rt))


def cost_caption(rt, name: str) -> None:
    """``Cost of this run: 1.25 GPU-h · 0.42 kWh``, or N/A with why on hover."""
    c = run_cost(rt, name)
    text, why = cost_text(c)
    st.caption(f"Cost of this run{' so far' if c.running else ''} (its current or last start): **{text}**",
               help=why or None)
