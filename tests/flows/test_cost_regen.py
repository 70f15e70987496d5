"""A regeneration's cost: the answer tokens written during its run and tokens per kWh (a resumed run's
earlier tokens left out, N/A with why where the energy or the tokens are not known), in the JSON the
command line shares, and the Regeneration page's cost line (AppTest) with GPU-hours, energy and its method,
and tokens per kWh."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from streamlit.testing.v1 import AppTest

from backend.flows import cost
from backend.regen.follow import History
from backend.telemetry import energy
from tests.helpers import close_runtime
from tests.regen.regen_fixtures import append, snap
from tests.regen.test_regen_page_jobs import _ticker, _wait
from tests.simws import make_models, page_workspace
from ui.regen import cost as regen_cost

REPO = Path(__file__).resolve().parents[2]
WATTS = {0: 350.0, 1: 250.0}


def synthetic(watts=WATTS, counter=True):
    """Readings of GPUs at constant power: 1 s power readings and, unless ``counter`` is False, the energy
    counter rising with them."""

    def power(gpu, since, until):
        ts = tuple(float(t) for t in range(int(since) - 1, int(until) + 2))
        return SimpleNamespace(t=ts, value=(watts[gpu],) * len(ts), resolution_s=1.0)

    def count(gpu, since, until):
        ts = [float(t) for t in range(int(since) - 1, int(until) + 2)]
        return energy.from_readings(ts, [watts[gpu] * 1000.0 * (t - 1e9) for t in ts], max_gap_s=5.0)

    return cost.Readings(power, count if counter else None)


class Fleet:
    def __init__(self, gpus=(0, 1)):
        self._gpus = list(gpus)

    def names(self):
        return ["sim"]

    def config(self, name):
        return SimpleNamespace(host="127.0.0.1", port=1, gpus=self._gpus)


def history(points):
    h = History()
    for t, toks in points:
        h.add({"t": t, "started_at": None, "completion_tokens": toks})
    return h


def view(start, end):
    return SimpleNamespace(name="regen-a", started_at=start, ended_at=end, state_since=end, live=end is None,
                           spec=SimpleNamespace(env={}))


SERVERS = {"servers": {"http://127.0.0.1:1": {"name": "sim"}}}


def test_tokens_per_kwh_counts_the_tokens_of_this_start_over_its_energy():
    start, end = 2_000_000.0, 2_003_600.0  # one hour on two GPUs at 350 + 250 W: 0.6 kWh
    # an earlier start wrote 10,000 tokens; this one reads them again at once, then writes 60,000 more
    h = history([(start - 500, 10_000), (start + 1, 0), (start + 5, 10_000), (start + 1800, 40_000),
                 (end - 1, 70_000)])
    c = cost.regen_cost(view(start, end), {**SERVERS, "completion_tokens": 70_000, "started_at": start - 900},
                        Fleet(), power=synthetic(), history=h)
    assert c.gpu_hours == pytest.approx(2.0) and c.energy_kwh == pytest.approx(0.6, rel=1e-3)
    assert c.energy_method == "energy counter"
    assert c.tokens == 60_000 and c.tokens_per_kwh == pytest.approx(100_000, rel=1e-3)
    d = c.to_dict()
    assert d["tokens_per_kwh"] == pytest.approx(100_000, rel=1e-3) and d["tokens_per_kwh_why"] is None
    assert d["energy_method"] == "energy counter"


def test_tokens_per_kwh_is_na_with_why_without_the_energy_or_the_tokens():
    start, end = 2_000_000.0, 2_003_600.0
    # a run never resumed: its latest line counts its own tokens
    fresh = {**SERVERS, "completion_tokens": 30_000, "started_at": start + 0.5}
    c = cost.regen_cost(view(start, end), fresh, Fleet(), power=synthetic())
    assert c.tokens == 30_000 and c.tokens_per_kwh == pytest.approx(50_000, rel=1e-3)
    # resumed, and no history read: the latest line alone cannot tell this start's tokens
    resumed = {**fresh, "started_at": start - 900}
    c = cost.regen_cost(view(start, end), resumed, Fleet(), power=synthetic())
    assert c.tokens is None and c.tokens_per_kwh is None and "resumed" in c.tokens_why
    # no telemetry: the tokens are known, tokens per kWh is not, and says why
    c = cost.regen_cost(view(start, end), fresh, Fleet(), power=None)
    assert c.tokens == 30_000 and c.tokens_per_kwh is None
    assert c.tokens_why == "energy not measured: no GPU telemetry" and c.to_dict()["tokens_per_kwh"] is None
    # power readings only: the method says so
    c = cost.regen_cost(view(start, end), fresh, Fleet(), power=synthetic(counter=False))
    assert c.energy_method == "power samples" and c.tokens_per_kwh == pytest.approx(50_000, rel=1e-3)


@pytest.mark.timeout(120)
def test_the_regeneration_page_shows_the_jobs_gpu_hours_energy_and_tokens_per_kwh(tmp_path, monkeypatch):
    target, draft = make_models(tmp_path / "m", draft="draft")
    rt, _log = page_workspace(tmp_path, monkeypatch, "regen-cost", target, draft)
    try:
        cfg = rt.fleet.config("sim").model_copy(update={"gpus": [0, 1]})
        real = rt.fleet.config
        monkeypatch.setattr(rt.fleet, "config", lambda name: cfg if name == "sim" else real(name))
        monkeypatch.setattr(regen_cost, "readings", lambda rt_: synthetic())
        out = tmp_path / "outputs" / "regen" / "costed.jsonl"
        out.parent.mkdir(parents=True, exist_ok=True)
        rt.start_job(_ticker("regen-costed", rt.workspace.logs_dir), {"kind": "regen", "out": str(out)},
                     actor="t", source="test")
        _wait(rt, "regen-costed", {"RUNNING"})
        time.sleep(1.0)
        rt.stop("regen-costed", actor="t", source="test")
        v = _wait(rt, "regen-costed", {"EXITED", "STOPPED", "FATAL"})
        start, end = v.started_at, v.ended_at or v.state_since
        servers = {"http://127.0.0.1:1": {"name": "sim", "state": "up"}}
        # an earlier start left 1,000 tokens; this start wrote 4,000 more
        append(out.with_name("costed.progress.jsonl"),
               snap(start - 100, 10, completion_tokens=1000, started_at=start - 200, servers=servers, state="stopping"),
               snap(start + 0.01, 0, completion_tokens=0, started_at=start - 200, servers=servers, state="starting"),
               snap(end - 0.01, 50, completion_tokens=5000, started_at=start - 200, servers=servers, state="stopping"))
        at = AppTest.from_file(str(REPO / "app.py"), default_timeout=60)
        at.run()
        at.switch_page("app_pages/regeneration.py")
        at.run()
        assert not at.exception, at.exception
        line = next(c for c in at.caption if c.value.startswith("Cost: "))
        seconds = end - start
        kwh = sum(WATTS.values()) * seconds / 3.6e6
        assert line.value == (f"Cost: **{2 * seconds / 3600:,.2f}** GPU-h · **{regen_cost.kwh_text(kwh)}** "
                              f"(energy counter) · **{4000 / kwh:,.0f}** tokens/kWh")
        assert "its servers' GPUs (sim)" in line.proto.help and "NVML energy counter" in line.proto.help
        assert "4,000 answer tokens written in its time" in line.proto.help
    finally:
        close_runtime(tmp_path)
