"""The Servers page's verdict against the baseline: only over a steady window at the baseline's load."""

from __future__ import annotations

from backend.sglang.monitor import steady_verdict

NOW = 1_000_000.0


def _series(points):
    """(seconds before NOW, gen throughput, running) -> the decode series' parallel lists."""
    ts = [NOW - ago for ago, _g, _r in points]
    return ts, [g for _a, g, _r in points], [r for _a, _g, r in points]


def _steady(tok_s: float, running: int = 1, seconds: int = 20):
    return _series([(ago, tok_s, running) for ago in range(seconds, -1, -1)])


def test_89_7_against_90_is_on_par_not_a_slower_verdict():
    v = steady_verdict(*_steady(89.7), 90.0, 1, now=NOW)
    assert v.verdict == "on par" and v.level == "par"
    assert v.badge == "on par · 20 s at 1 req"
    assert "on par over the last 20 s at 1 request in flight (the baseline's load): 89.7 vs 90.0 tok/s, 1.00×, " \
           "within ±3 %" == v.sentence


def test_faster_and_slower_outside_the_band_are_coloured_by_the_ratio():
    fast = steady_verdict(*_steady(103.5), 90.0, 1, now=NOW)
    assert (fast.verdict, fast.level, fast.badge) == ("faster", "good", "faster 1.15× · 20 s at 1 req")
    amber = steady_verdict(*_steady(84.0), 90.0, 1, now=NOW)
    assert (amber.verdict, amber.level) == ("slower", "warn") and f"{amber.ratio:.2f}" == "0.93"
    red = steady_verdict(*_steady(66.4), 90.0, 1, now=NOW)
    assert (red.verdict, red.level) == ("slower", "bad")


def test_another_load_in_the_window_gives_no_verdict_and_says_which():
    # the swings of the old badge: 4 requests (0.38× per request) then 1 again (1.14×)
    pts = [(ago, 136.5, 4) for ago in range(20, 10, -1)] + [(ago, 102.6, 1) for ago in range(10, -1, -1)]
    v = steady_verdict(*_series(pts), 90.0, 1, now=NOW)
    assert v.verdict == "none" and v.level == "none" and v.ratio is None
    assert v.badge == "no verdict: load differs"
    assert v.sentence == ("no verdict: load differs from the baseline's (baseline: 1 request in flight; the last "
                          "20 s: 1-4 requests in flight)")


def test_a_measured_baseline_at_concurrency_16_needs_16_in_flight():
    v = steady_verdict(*_steady(744.0, running=16), 620.0, 16, now=NOW)
    assert v.verdict == "faster" and v.badge == "faster 1.20× · 20 s at 16 req"
    v = steady_verdict(*_steady(744.0, running=12), 620.0, 16, now=NOW)
    assert v.verdict == "none" and "the last 20 s: 12 requests in flight" in v.reason


def test_the_badge_states_the_seconds_its_lines_cover():
    v = steady_verdict(*_steady(95.0, seconds=16), 90.0, 1, now=NOW)
    assert v.verdict == "faster" and v.badge == "faster 1.06× · 16 s at 1 req"
    assert v.sentence.startswith("faster over the last 16 s at 1 request in flight")


def test_too_short_idle_or_no_baseline_give_no_verdict():
    short = steady_verdict(*_steady(95.0, seconds=8), 90.0, 1, now=NOW)
    assert short.verdict == "none" and short.badge == "no verdict: steady 8 of 20 s"
    old = _series([(ago, 95.0, 1) for ago in range(300, 250, -1)])  # lines from five minutes ago only
    idle = steady_verdict(*old, 90.0, 1, now=NOW)
    assert idle.verdict == "none" and idle.badge == "no verdict: idle"
    assert steady_verdict(*_steady(95.0), None, 1, now=NOW).badge == "no verdict: no baseline"


def test_missing_values_in_the_series_are_skipped_not_counted_as_zero():
    ts, g, r = _steady(90.0)
    g[5] = None
    r[7] = None
    v = steady_verdict(ts, g, r, 90.0, 1, now=NOW)
    assert v.verdict == "on par" and v.tok_s == 90.0
