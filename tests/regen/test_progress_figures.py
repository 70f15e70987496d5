"""The figures a regeneration reports, on a fake clock: the answer-length histogram's bins, the
rate over the last window, the ETA on the terminal in minutes, the ETA over recent rows only,
the stall alert at its threshold, the retry backoff's cap, and the page's stall setting."""

from __future__ import annotations

import pytest

from backend.regen import control
from backend.regen.client import backoff
from backend.regen.follow import eta_band, stall_alert
from backend.regen.job import Job
from backend.regen.config import JobConfig, ServerSpec
from backend.regen.progress import HIST_EDGES, WINDOW_S, Stats

T0 = 1_764_000_000.0


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@pytest.mark.parametrize("tokens, bin_", [(0, 0), (1, 0), (63, 0), (64, 1), (127, 1), (128, 2), (4096, 7), (4095, 6),
                                          (65535, 10), (65536, 10), (200_000, 10)])
def test_answer_lengths_fall_in_the_bin_that_starts_at_or_below_them(tokens, bin_):
    """counts[i] holds edges[i] <= n < edges[i+1]; the last bin also holds everything above."""
    st = Stats(started_at=T0, clock=Clock())
    st.answer_tokens(tokens)
    counts = st.snapshot()["completion_tokens_hist"]["counts"]
    assert counts.index(1) == bin_ and sum(counts) == 1
    assert HIST_EDGES[bin_] <= tokens and (tokens < HIST_EDGES[bin_ + 1] or bin_ == len(counts) - 1)


def test_rates_are_over_the_last_window_not_the_whole_run():
    clock = Clock()
    st = Stats(started_at=T0, clock=clock)
    for k in range(600):  # 2 rows/s for 5 min, 10 tokens each
        clock.t = T0 + k * 0.5
        st.record_done("d", "http://s:1", 3, 10)
    clock.t = T0 + 300
    snap = st.snapshot()
    assert snap["req_s"] == pytest.approx(2.0, rel=0.02) and snap["tok_s"] == pytest.approx(20.0, rel=0.02)
    assert snap["servers"]["http://s:1"]["req_s"] == pytest.approx(2.0, rel=0.02)
    clock.t = T0 + 300 + WINDOW_S + 1  # nothing completed for longer than the window
    snap = st.snapshot()
    assert (snap["req_s"], snap["tok_s"]) == (0.0, 0.0)
    assert snap["done"] == 600


def test_the_terminal_line_gives_the_eta_in_minutes(tmp_path):
    inp = tmp_path / "in.jsonl"
    inp.write_text("")
    job = Job(JobConfig(out=tmp_path / "o.jsonl", servers=[ServerSpec("http://127.0.0.1:9")], inputs=[str(inp)]))
    clock = Clock()
    job.stats = Stats(started_at=T0, clock=clock)
    job.stats.total = 1060
    job.stats.state = "running"
    for k in range(60):  # 2 rows/s over 30 s
        clock.t = T0 + k * 0.5
        job.stats.record_done("d", "http://127.0.0.1:9", 3, 10)
    clock.t = T0 + 30
    line = job._summary()
    # 1,000 rows left at 2.0 rows/s: 500 s, 8 min
    assert line.startswith("running: 60/1,060 (60 done, 0 failed, 0 skipped), 0 in flight, 2.0 req/s")
    assert line.endswith("ETA 8 min")


def test_the_eta_goes_by_the_recent_rate_not_the_runs_average():
    # 10 rows/s for the first 10 min, then 0.1 rows/s for the last 30 min
    pts = [(T0, 0), (T0 + 600, 6000)] + [(T0 + 600 + 60 * k, 6000 + 6 * k) for k in range(1, 31)]
    eta = eta_band(180, pts, now=T0 + 2400)
    assert eta.point_s == pytest.approx(1800)  # 180 rows at 0.1 rows/s
    assert eta.low_s == pytest.approx(1800) and eta.high_s == pytest.approx(1800)


def test_the_stall_alert_starts_at_its_threshold():
    a = stall_alert("j", running=True, last_completion_t=T0, started_t=T0 - 50, now=T0 + 600, after_s=600)
    assert a is not None and a.title == "j: no row completed for 10 min"
    assert stall_alert("j", running=True, last_completion_t=T0, started_t=T0 - 50, now=T0 + 599.9,
                       after_s=600) is None


class Top:
    """The top of every backoff range."""

    def uniform(self, a: float, b: float) -> float:
        return b


@pytest.mark.parametrize("attempt, base, cap, top", [(0, 0.5, 30.0, 0.5), (3, 0.5, 30.0, 4.0), (6, 0.5, 30.0, 30.0),
                                                     (40, 0.5, 30.0, 30.0), (2, 0.25, 2.0, 1.0),
                                                     (9, 0.25, 2.0, 2.0)])
def test_backoff_doubles_up_to_its_cap(attempt, base, cap, top):
    assert backoff(attempt, Top(), base=base, cap=cap) == top


def test_the_stall_setting_of_the_start_form_is_minutes(tmp_path):
    inp = tmp_path / "in.jsonl"
    inp.write_text("")
    form = control.RunForm(out="out/x.jsonl", servers=("http://127.0.0.1:9",), inputs=(str(inp),),
                           stall_after_min=15.0)
    spec, meta = control.job_spec(form, tmp_path, tmp_path / "logs")
    assert meta["stall_after_s"] == 900.0
    assert spec.name == "regen-x" and meta["out"] == str(tmp_path / "out" / "x.jsonl")
    assert stall_alert(spec.name, running=True, last_completion_t=T0, started_t=T0, now=T0 + 14 * 60,
                       after_s=meta["stall_after_s"]) is None
    assert stall_alert(spec.name, running=True, last_completion_t=T0, started_t=T0, now=T0 + 15 * 60,
                       after_s=meta["stall_after_s"]) is not None
