"""A long log on the Training page: read in the background without drawing the page again at each slice, the
same records as a direct read, kept out of the collector's full collections, and drawn from at most
MAX_POINTS points a trace (each bucket's lowest and highest kept)."""

from __future__ import annotations

import gc
import threading
import weakref

import numpy as np
import pytest

from backend.train import gcpin
from backend.train.logparse import _CLOCK, _clock, parse_line
from backend.train.reader import TrainLogReader
from tests.train.page_kit import workspace  # noqa: F401  (a fixture)


def _log(path, steps: int) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"Auto-calculated total_steps: {steps} (num_epochs=1 * steps_per_epoch={steps})\n")
        f.write(f"Training Epoch 0:   0%|          | 0/{steps} [00:00<?, ?it/s]")
        for n in range(1, steps + 1):
            f.write(f"\rTraining Epoch 0:  50%|#####     | {n}/{steps} [00:{n % 60:02d}<01:00,  1.00s/it, "
                    f"loss={5 - n * 1e-3:.3f}, acc=0.40, acceptance_rate=0.30, time=1.00s, grad_norm=0.50]")
            if n % 50 == 0:
                f.write("\n" + "".join(f"Eval - Step {n} [{n + 1}/2], position {i},  Acc: 0.50\n" for i in range(3)))


def _regex_clock(text: str) -> float | None:
    m = _CLOCK.match(text)
    if not m or not text.isascii():
        return None
    secs = 0
    for p in m.groups():
        if p is not None:
            secs = secs * 60 + int(p)
    return float(secs)


@pytest.mark.parametrize("text", ["09:28", "1:02:03", "0", "123456:00", "1234567:00", "01::02", "", "?", "a:b",
                                  "1:2:3:4", "١٢:٣٤", " 09:28 ", "09:28s"])
def test_the_clocks_plain_form_reads_as_the_pattern_does(text):
    assert _clock(text) == _regex_clock(text)


def test_a_bar_with_spaces_around_its_postfix_reads_the_same():
    tight = parse_line("Training Epoch 0:  50%|#####     | 5/10 [00:05<00:05,  1.00s/it, loss=1.25, acc=0.50, "
                       "time=1.00s]")[0]
    loose = parse_line("Training Epoch 0:  50%|#####     | 5/10 [ 00:05 < 00:05 ,   1.00s/it ,  loss=1.25 , acc=0.50,"
                       " time=1.00s ]")[0]
    assert tight.metrics == loose.metrics == {"loss": 1.25, "acc": 0.5, "step_time_s": 1.0}
    assert tight.elapsed_s == loose.elapsed_s == 5.0 and tight.info == loose.info
    bad = parse_line("Training Epoch 0:  50%|#####     | 5/10 [00:05<00:05,  1.00s/it, loss= nan , acc=0.50]")[0]
    assert bad.metrics == {"acc": 0.5} and len(bad.rejected) == 1 and "loss" in bad.rejected[0]


def test_a_poll_while_the_log_is_read_answers_at_once_and_the_end_equals_a_direct_read(tmp_path, monkeypatch):
    import ui.train.data as data

    log = tmp_path / "train.log"
    _log(log, 3000)
    monkeypatch.setattr(data, "POLL_BYTES", 4096)
    monkeypatch.setattr(data, "SLICE_BYTES", 4096)
    monkeypatch.setattr(data, "POLL_S", 0.0)
    start = data.LogFollower._start_catching_up
    monkeypatch.setattr(data.LogFollower, "_start_catching_up", lambda self: None)
    f = data.LogFollower(log)
    first = f.poll()
    assert first.catching_up and first.records
    with f._lock:  # the background read is held at its first slice: a poll must not wait for it
        start(f)
        t = f._catching_up
        assert t.is_alive()
        answers: list = []
        page = threading.Thread(target=lambda: answers.append(f.poll()), daemon=True)
        page.start()
        page.join(10)
        assert answers, "a poll waited for the background read"
        during = answers[0]
    assert during.version == first.version and during.records is first.records  # nothing built again
    assert during.catching_up and during.size == first.size
    t.join(60)
    done = f.poll()
    assert not done.catching_up and done.version > first.version
    direct = TrainLogReader(log).read_all()
    assert [r.to_dict() for r in done.records] == [r.to_dict() for r in direct]


def test_what_was_read_is_pinned_and_a_later_pin_collects(monkeypatch):
    class Node:
        pass

    monkeypatch.setattr(gcpin, "_enabled", False)
    frozen = gc.get_freeze_count()
    assert not gcpin.pin(now=1000.0) and gc.get_freeze_count() == frozen  # not enabled: nothing is pinned
    monkeypatch.setattr(gcpin, "_last_clean", None)
    monkeypatch.setattr(gcpin, "_enabled", True)
    try:
        a = Node()
        a.me = a  # a cycle: only a collection frees it
        ref = weakref.ref(a)
        assert gcpin.pin(now=1000.0)  # the first pin collects, then pins
        assert gc.get_freeze_count() > 0
        del a
        gc.collect()
        assert ref() is not None  # pinned: the full collection did not look at it
        assert not gcpin.pin(now=1000.0 + gcpin.CLEAN_S - 1)
        assert ref() is not None
        assert gcpin.pin(now=1000.0 + gcpin.CLEAN_S)  # taken back, collected, pinned again
        assert ref() is None
    finally:
        gc.unfreeze()


def test_a_series_counts_its_values_as_they_are_added():
    from ui.train.series import Series

    s = Series()
    assert len(s) == 0
    s.add(1.0, None, 2.0)
    s.add(2.0, None, 3.0)
    assert len(s) == 2
    s.gap()
    assert len(s) == 2 and len(s.values) == 3
    s.values.append(4.0)  # appended directly, as curves() does
    s.steps.append(3.0)
    s.times.append(None)
    assert len(s) == 3 and s.last() == 4.0
    assert len(Series(steps=[1.0, None], times=[None, None], values=[1.0, None])) == 1


def test_each_bucket_keeps_its_lowest_and_highest_and_the_last_point():
    from ui.train.charts import MAX_POINTS, decimate

    rng = np.random.default_rng(7)
    n = 100_000
    x = np.arange(n, dtype=float)
    y = rng.normal(size=n)
    dx, dy = decimate(x, y)
    assert len(dx) <= MAX_POINTS + 2
    buckets = max(1, MAX_POINTS // 2 - 1)
    size = -(-n // buckets)
    kept = set(dx.tolist())
    for b in range(buckets):
        part = y[b * size:(b + 1) * size]
        if len(part):
            assert b * size + int(part.argmin()) in kept and b * size + int(part.argmax()) in kept
    assert dx[-1] == n - 1 and dy[-1] == y[-1] and dx[0] == 0


def test_the_charts_of_a_long_run_draw_at_most_max_points_a_trace():
    from ui.train import charts as tc
    from ui.train.series import Curves, Series

    c = Curves()
    s = c.train["loss"] = Series()
    for n in range(50_000):
        s.add(float(n), 1_767_225_600.0 + n, 1.0 + 1.0 / (1 + n))
    fig = tc.metric_chart("Loss", [("run", c)], "loss", tc.STEP, smooth=0.6)
    assert len(fig.data) == 2 and all(len(t.x) <= tc.MAX_POINTS + 2 for t in fig.data)
    assert fig.data[1].x[-1] == 49_999.0


def test_a_first_poll_reads_more_slices_while_it_has_time(tmp_path, monkeypatch):
    import ui.train.data as data

    log = tmp_path / "train.log"
    _log(log, 2000)
    monkeypatch.setattr(data, "POLL_BYTES", 4096)
    monkeypatch.setattr(data, "POLL_S", 60.0)
    monkeypatch.setattr(data.LogFollower, "_start_catching_up", lambda self: pytest.fail("read in the background"))
    snap = data.LogFollower(log).poll()  # the whole log in one poll (the page is drawn once)
    assert not snap.catching_up and snap.progress.step == 2000
    monkeypatch.setattr(data, "POLL_S", 0.0)
    monkeypatch.setattr(data.LogFollower, "_start_catching_up", lambda self: None)
    part = data.LogFollower(log).poll()
    assert part.catching_up and 0 < part.offset <= 2 * 4096


@pytest.mark.timeout(120)
def test_a_curves_field_keeps_its_value_across_a_visit_to_another_tab(workspace):
    """Streamlit drops the state of a widget that a run does not draw: the page draws every tab on every run,
    so a user's draft steps survive a look at the checkpoints (a page that built only the open tab reset them)."""
    from streamlit.testing.v1 import AppTest

    from tests.train.page_kit import REPO, chart_titles, follow, gen2_log, open_tab, page

    log = workspace / "train.log"
    log.write_text(gen2_log(), encoding="utf-8")
    at = follow(page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60)), log, workspace / "out")
    assert "Loss" in chart_titles(at)
    at.number_input(key="train-num-steps").set_value(5).run()
    assert not at.exception, at.exception
    open_tab(at, "Checkpoints")
    assert any(f"`{workspace / 'out'}` does not exist yet" in i.value for i in at.info)
    open_tab(at, "Curves")
    assert at.number_input(key="train-num-steps").value == 5


def test_a_log_being_read_is_drawn_again_at_most_every_few_seconds_and_at_once_when_read():
    from ui.train.curves import PARTIAL_REDRAW_S, redraw_now

    assert not redraw_now(False, False, None, 100.0)  # nothing new: no page run
    assert redraw_now(True, False, None, 100.0)  # records appended to a log read to its end: at once
    assert redraw_now(True, False, 99.9, 100.0)  # the reading just ended: at once, however recent the last draw
    # still reading: what is read so far is drawn again only every PARTIAL_REDRAW_S
    assert not redraw_now(True, True, 100.0 - PARTIAL_REDRAW_S / 2, 100.0)
    assert redraw_now(True, True, 100.0 - PARTIAL_REDRAW_S, 100.0)
    assert redraw_now(True, True, None, 100.0)
