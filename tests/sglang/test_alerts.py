"""The accept_len alert: pure function over (time, accept_len) points and the ready time."""

from __future__ import annotations

from backend.sglang.alerts import spec_accept_alert

READY = 1000.0


def pts(*vals, start=READY + 1, step=2.0):
    return [(start + i * step, v) for i, v in enumerate(vals)]


def test_fires_on_three_lines_at_one():
    a = spec_accept_alert(pts(1.0, 1.0, 1.02), spec_on=True, ready_ts=READY, now=READY + 6,
                          algorithm="EAGLE", draft_arch="LlamaForCausalLMEagle3")
    assert a is not None and a.severity == "error"
    assert a.since == READY + 5
    text = " ".join(a.causes)
    assert "EAGLE3" in text and "aux" in text.lower() and "LlamaForCausalLMEagle3" in text
    assert "1.05" in a.message


def test_not_before_three_lines_or_sixty_seconds():
    assert spec_accept_alert(pts(1.0, 1.0), spec_on=True, ready_ts=READY, now=READY + 30) is None
    a = spec_accept_alert(pts(1.0, 1.0), spec_on=True, ready_ts=READY, now=READY + 61)
    assert a is not None and a.since == READY + 60


def test_the_window_judges_the_mean_as_the_alerts_engine_does():
    """A draft that accepts next to nothing shows an odd line above the floor: after the window the mean
    decides, as in the alerts engine's accept-stuck rule (the page and the notification agree)."""
    from backend.alerts import rules
    from backend.alerts.model import ServerState, Snapshot, Thresholds

    noisy = pts(1.02, 1.07, 1.0, 1.03)
    a = spec_accept_alert(noisy, spec_on=True, ready_ts=READY, now=READY + 61)
    assert a is not None and a.since == READY + 60 and "averaged 1.03" in a.message and "highest 1.07" in a.message
    server = ServerState("glm5", "RUNNING", spec_on=True, ready_at=READY, accept=tuple(noisy))
    assert [x.rule for x in rules.accept_stuck(Snapshot(READY + 61, servers=(server,)), Thresholds())] == ["accept-stuck"]
    # a draft that accepts a little: quiet on both
    little = pts(1.02, 1.3, 1.1, 1.05)
    assert spec_accept_alert(little, spec_on=True, ready_ts=READY, now=READY + 61) is None
    server = ServerState("glm5", "RUNNING", spec_on=True, ready_at=READY, accept=tuple(little))
    assert rules.accept_stuck(Snapshot(READY + 61, servers=(server,)), Thresholds()) == []


def test_never_for_a_working_draft_or_without_speculation():
    good = pts(2.1, 1.9, 2.3, 2.0)
    assert spec_accept_alert(good, spec_on=True, ready_ts=READY, now=READY + 120) is None
    assert spec_accept_alert(pts(1.0, 1.0, 1.0), spec_on=False, ready_ts=READY, now=READY + 120) is None
    assert spec_accept_alert(pts(1.0, 1.0, 1.0), spec_on=True, ready_ts=None, now=READY + 120) is None
    # one good line among the first three is enough to stay quiet
    assert spec_accept_alert(pts(1.0, 1.6, 1.0), spec_on=True, ready_ts=READY, now=READY + 120) is None


def test_lines_before_ready_and_without_accept_len_are_ignored():
    before = [(READY - 5, 1.0), (READY - 3, 1.0), (READY - 1, 1.0)]
    assert spec_accept_alert(before, spec_on=True, ready_ts=READY, now=READY + 10) is None
    mixed = before + [(READY + 1, None)] + pts(1.0, 1.0, 1.0, start=READY + 2)
    assert spec_accept_alert(mixed, spec_on=True, ready_ts=READY, now=READY + 10) is not None


def test_threshold_boundary():
    assert spec_accept_alert(pts(1.05, 1.05, 1.05), spec_on=True, ready_ts=READY, now=READY + 7) is not None
    assert spec_accept_alert(pts(1.05, 1.06, 1.05), spec_on=True, ready_ts=READY, now=READY + 7) is None


def test_a_previous_runs_lines_in_the_ready_second_do_not_hide_the_alert():
    ready = 1000.0
    # the good run's last lines share the second in which the relaunch became ready
    points = [(999.0, 2.4), (1000.0, 2.3), (1000.0, 2.5), (1001.0, 1.0), (1001.0, 1.0), (1002.0, 1.0)]
    a = spec_accept_alert(points, spec_on=True, ready_ts=ready, now=1002.0, algorithm="EAGLE",
                          draft_arch="LlamaForCausalLMEagle3")
    assert a is not None and a.since == 1002.0


# -- the 60 s window, both ends (fewer than three lines, so only the window can decide) ----------------

def test_a_good_line_at_ready_plus_59_s_is_inside_the_window():
    points = [(READY + 10, 1.0), (READY + 59, 1.6)]
    assert spec_accept_alert(points, spec_on=True, ready_ts=READY, now=READY + 120) is None


def test_a_good_line_at_ready_plus_60_s_is_inside_the_window():
    points = [(READY + 10, 1.0), (READY + 60, 1.6)]
    assert spec_accept_alert(points, spec_on=True, ready_ts=READY, now=READY + 120) is None


def test_a_good_line_at_ready_plus_61_s_is_outside_the_window():
    points = [(READY + 10, 1.0), (READY + 61, 1.6)]
    a = spec_accept_alert(points, spec_on=True, ready_ts=READY, now=READY + 120)
    assert a is not None and a.since == READY + 60
    assert "1 decode line(s)" in a.message
    # the highest accept_len named is that of the lines the alert rests on, not the later good one
    assert "highest 1.00" in a.message and "1.60" not in a.message


def test_the_window_decides_only_once_60_s_have_passed():
    points = [(READY + 10, 1.0), (READY + 20, 1.02)]
    assert spec_accept_alert(points, spec_on=True, ready_ts=READY, now=READY + 59.9) is None
    a = spec_accept_alert(points, spec_on=True, ready_ts=READY, now=READY + 60)
    assert a is not None and a.since == READY + 60 and "highest 1.02" in a.message
