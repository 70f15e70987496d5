"""The Training page's curve controls and the follower behind them: log scale, outlier clipping, the
relative-time axis, the CSV of the full curves, a run of another folder overlaid by path (in the URL), the
min/max decimation that draws a long curve, and a long log followed by byte offset (appends read alone, and
nothing read or built again when nothing was appended)."""

from __future__ import annotations

import csv
import io
import math

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from tests.train.page_kit import REPO, chart_titles, figure, follow, gen2_log, page, trace, workspace  # noqa: F401

SPIKE = "\rTraining Epoch 0:  55%|#         | 11/20 [00:11<00:09,  1.00s/it, loss=90.00, acc=0.30, time=1.00s]"


def _page_with(log_text: str, workspace) -> AppTest:  # noqa: F811
    log = workspace / "train.log"
    log.write_text(log_text, encoding="utf-8")
    return follow(page(AppTest.from_file(str(REPO / "app.py"), default_timeout=60)), log)


def _query(at: AppTest, key: str):
    v = at.query_params.get(key)
    return v[0] if isinstance(v, list) and len(v) == 1 else v


@pytest.mark.timeout(180)
def test_log_scale_relative_axis_and_outliers_go_into_the_charts_and_the_url(workspace):  # noqa: F811
    # one spike (loss 90 at step 11) among losses of 3-5
    text = gen2_log()
    cut = text.index("\rTraining Epoch 0:  55%")
    at = _page_with(text[:cut] + SPIKE + text[cut:], workspace)
    loss = figure(at, "Loss")
    assert loss["layout"]["yaxis"].get("type") in (None, "-", "linear")
    assert max(y for t in loss["data"] for y in t["y"] if y is not None) >= 90  # the spike is drawn
    at.slider(key="train-smooth").set_value(0.0).run()

    at.toggle(key="train-log-y").set_value(True).run()
    assert not at.exception, at.exception
    assert figure(at, "Loss")["layout"]["yaxis"]["type"] == "log"
    assert figure(at, "acc_i per TTT position")["layout"]["yaxis"].get("type") != "log"  # 0..1 stays linear
    assert _query(at, "log") == "True"

    at.toggle(key="train-log-y").set_value(False).run()
    at.toggle(key="train-clip").set_value(True).run()
    lo, hi = figure(at, "Loss")["layout"]["yaxis"]["range"]
    assert hi < 90 and lo < 3.1  # the spike is left out of the range, the curve is not
    assert max(y for y in trace(figure(at, "Loss"), "loss")["y"] if y is not None) >= 90  # and still drawn
    assert _query(at, "clip") == "True" and _query(at, "log") is None

    at.segmented_control(key="train-x").set_value("relative").run()
    assert not at.exception, at.exception
    fig = figure(at, "Loss")
    xs = [x for x in trace(fig, "loss")["x"] if x is not None]
    assert xs[0] == pytest.approx(0.0) and 0 < xs[-1] < 0.01  # hours: 20 steps at 1 s each
    assert xs == sorted(xs)
    assert fig["layout"]["xaxis"]["title"]["text"] == "hours since the run's first point"
    assert _query(at, "x") == "relative"


@pytest.mark.timeout(180)
def test_the_controls_come_from_a_link(workspace):  # noqa: F811
    log = workspace / "train.log"
    log.write_text(gen2_log(), encoding="utf-8")
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=60).run()
    at.switch_page("app_pages/training.py")
    at.query_params.update({"x": "wall time", "log": "True", "smooth": "0.8", "clip": "maybe"})
    at.run()
    at = follow(at, log)
    assert at.segmented_control(key="train-x").value == "wall time"
    assert at.toggle(key="train-log-y").value is True
    assert at.slider(key="train-smooth").value == pytest.approx(0.8)
    assert "clip=maybe" in "\n".join(str(c.value) for c in at.caption)  # not a choice: ignored with a note
    assert figure(at, "Loss")["layout"]["yaxis"]["type"] == "log"


@pytest.mark.timeout(180)
def test_a_log_of_another_folder_is_overlaid_by_path_and_kept_in_the_url(workspace):  # noqa: F811
    other = workspace / "other-ws" / "logs"
    other.mkdir(parents=True)
    (other / "run-b.log").write_text(gen2_log(steps=10), encoding="utf-8")
    (other / "server.log").write_text("INFO: Uvicorn running on http://127.0.0.1:30000\n", encoding="utf-8")
    at = _page_with(gen2_log(), workspace)
    at.text_input(key="train-overlay-path-text").input(str(workspace / "other-ws"))
    next(b for b in at.button if b.label == "Overlay").click()
    at.run()
    assert not at.exception, at.exception
    assert at.multiselect(key="train-overlay").value == ["run-b · other-ws"]  # the server log is no training log
    fig = figure(at, "Loss")
    assert len(trace(fig, "run-b · other-ws")["y"]) == 10 and len(trace(fig, "train.log")["y"]) == 20
    assert _query(at, "overlay_path") == str(workspace / "other-ws")
    # taken off the overlay: the path leaves the URL
    at.multiselect(key="train-overlay").set_value([]).run()
    assert _query(at, "overlay_path") is None
    assert "run-b · other-ws" not in {t.get("name") for t in figure(at, "Loss")["data"]}


@pytest.mark.timeout(120)
def test_a_path_outside_the_roots_is_refused_and_not_overlaid(workspace, tmp_path_factory):  # noqa: F811
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (elsewhere / "x.log").write_text(gen2_log(), encoding="utf-8")
    at = _page_with(gen2_log(), workspace)
    at.text_input(key="train-overlay-path-text").input(str(elsewhere / "x.log"))
    next(b for b in at.button if b.label == "Overlay").click()
    at.run()
    assert not at.exception, at.exception
    assert any("Not overlaid" in str(c.value) for c in at.caption)
    assert at.multiselect(key="train-overlay").value == []


def test_the_csv_holds_every_point_with_its_step_time_and_relative_time(tmp_path):
    from ui.train.data import LogFollower
    from ui.train.series import CSV_HEADER, curves, curves_csv

    log = tmp_path / "train.log"
    log.write_text("===== specdeck: r run r-1 starting at 2026-01-01 00:00:00: python -m specforge\n"
                   + gen2_log(), encoding="utf-8")
    snap = LogFollower(log).poll()
    c = curves(snap.records, snap.times)
    rows = list(csv.reader(io.StringIO(curves_csv([("r", c)]))))
    assert tuple(rows[0]) == CSV_HEADER
    loss = [r for r in rows[1:] if r[2] == "loss"]
    assert [float(r[3]) for r in loss] == list(range(1, 21))
    assert [float(r[6]) for r in loss] == pytest.approx([5.0 - 0.1 * n for n in range(1, 21)])
    rel = [float(r[5]) for r in loss]
    assert rel[0] == 0.0 and rel == sorted(rel) and rel[-1] == pytest.approx(19.0, abs=1.0)
    assert all(r[4].endswith("Z") and r[4].startswith("2026-01-01") for r in loss)
    acc0 = [r for r in rows[1:] if r[2] == "acc_0"]
    assert [(r[1], float(r[3]), float(r[6])) for r in acc0] == [("train", 10, 0.6), ("train", 20, 0.8)]
    # the full data: every point of every curve, not the points a chart draws
    assert len(rows) - 1 == sum(len(s) for s in (*c.train.values(), *c.eval.values()))


def test_decimation_keeps_spikes_gaps_and_both_ends():
    from ui.train.charts import decimate

    n = 100_000
    x = np.arange(n, dtype=float)
    y = np.sin(x / 500.0)
    y[31_337] = 50.0  # a spike
    y[60_000] = np.nan  # a restart: a gap
    dx, dy = decimate(x, y, 2000)
    assert len(dx) <= 2010
    assert 50.0 in dy.tolist() and 31_337.0 in dx.tolist()
    assert np.isnan(dy).sum() == 1 and dx[np.isnan(dy)][0] == 60_000
    assert dx[0] == 0 and dx[-1] == n - 1
    assert list(dx) == sorted(dx)
    small = decimate(x[:500], y[:500], 2000)
    assert len(small[0]) == 500


def _write_long_log(path, steps: int) -> None:
    spe = steps
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"Auto-calculated total_steps: {steps * 2} (num_epochs=2 * steps_per_epoch={spe})\n")
        f.write(f"Training Epoch 0:   0%|          | 0/{spe} [00:00<?, ?it/s]")
        f.write("".join(f"\rTraining Epoch 0:  50%|#####     | {n}/{spe} [00:01<00:01,  1.00s/it, "
                        f"loss={1 + n % 1000 / 1000:.3f}, acc=0.50, time=1.00s]" for n in range(1, steps + 1)))


def _append_steps(path, first: int, count: int, spe: int) -> int:
    text = "".join(f"\rTraining Epoch 1:  50%|#####     | {n - spe}/{spe} [00:01<00:01,  1.00s/it, "
                   f"loss={1 + n % 1000 / 1000:.3f}, acc=0.50, time=1.00s]" for n in range(first, first + count))
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)
    return len(text.encode())


@pytest.mark.timeout(300)
def test_appends_to_a_100k_step_log_are_read_alone_in_one_refresh(tmp_path):
    import ui.train.data as data
    import ui.train.series as series

    steps = 100_000
    log = tmp_path / "train.log"
    _write_long_log(log, steps)
    f = data.LogFollower(log)
    snap = f.poll(max_bytes=log.stat().st_size + 1)
    assert not snap.catching_up and snap.progress.step == steps
    read_before = f._reader.stats.bytes_read
    added = _append_steps(log, steps + 1, 1000, steps)
    after = f.poll()  # one refresh
    assert after.progress.step == steps + 1000
    assert after.offset == snap.offset + added and not after.catching_up
    # by byte offset: only the appended bytes were read (the last redraw, unfinished, was parsed early)
    assert f._reader.stats.bytes_read - read_before == added
    c = series.curves(after.records, after.times)
    assert c.train["loss"].steps[-1] == steps + 1000
    assert c.train["loss"].values[-1] == pytest.approx(1 + (steps + 1000) % 1000 / 1000)
    assert len(c.train["loss"]) == steps + 1000  # one point a step, none lost or read twice


def test_nothing_is_parsed_or_built_again_when_nothing_was_appended(tmp_path, monkeypatch):
    import backend.train.reader as reader
    import ui.train.data as data
    import ui.train.series as series

    log = tmp_path / "train.log"
    log.write_text(gen2_log(), encoding="utf-8")
    f = data.LogFollower(log)
    snap = f.poll()
    built = []
    c1 = f.memo(snap, "curves", lambda: built.append(1) or series.curves(snap.records, snap.times))
    parsed = []
    real = reader.parse_line
    monkeypatch.setattr(reader, "parse_line", lambda seg: parsed.append(seg) or real(seg))
    again = f.poll()
    assert parsed == [] and again.version == snap.version and again.records is snap.records
    assert f.memo(again, "curves", lambda: built.append(1) or series.curves(again.records, again.times)) is c1
    assert built == [1]
    with open(log, "a", encoding="utf-8") as fh:  # a new step: read, and the curves built once more
        fh.write("\n" + "Eval - Step 21 [22/2], position 0,  Acc: 0.90\n")
    newer = f.poll()
    assert parsed and newer.version > snap.version
    c2 = f.memo(newer, "curves", lambda: built.append(1) or series.curves(newer.records, newer.times))
    assert c2 is not c1 and built == [1, 1] and c2.train["acc_0"].values[-1] == pytest.approx(0.9)
    assert not math.isnan(c2.train["loss"].values[-1])


@pytest.mark.timeout(180)
def test_a_full_run_after_the_log_grew_draws_the_new_steps_without_running_the_page_again(workspace, monkeypatch):  # noqa: F811
    """The live part checks the log before the charts are drawn: in a full run (a click, a choice) the charts
    below it show what it found, so it does not run the whole page a second time for it."""
    import sys

    import streamlit as st

    log = workspace / "train.log"
    at = _page_with(gen2_log(steps=10), workspace)
    assert len(trace(figure(at, "Loss"), "loss")["y"]) == 10
    log.write_text(gen2_log(), encoding="utf-8")  # the run went on: 20 steps
    real, asked = st.rerun, []

    def rerun(*args, **kwargs):
        asked.append(sys._getframe(1).f_code.co_name)
        return real(*args, **kwargs)

    monkeypatch.setattr(st, "rerun", rerun)
    at.run()
    assert not at.exception, at.exception
    assert len(trace(figure(at, "Loss"), "loss")["y"]) == 20
    assert "_watch" not in asked, asked


@pytest.mark.timeout(180)
def test_a_first_drawing_sends_every_chart_at_once_and_none_through_plotly(workspace):  # noqa: F811
    """The curves are drawn by uPlot (a few milliseconds a chart): the first drawing of a choice of runs sends
    every chart in one page run, none as a plotly chart (whose 4.7 MB of code a browser loads first), and a
    change of the view (smoothing) draws the same charts again."""
    at = _page_with(gen2_log(), workspace)
    every = chart_titles(at)
    assert every[:2] == ["Loss", "Accept length: predicted and measured"], every
    assert "acc_i per TTT position" in every and "Step time" in every, every
    assert not at.get("plotly_chart")
    assert not [c.value for c in at.caption if "drawing…" in str(c.value)]
    at.slider(key="train-smooth").set_value(0.5).run()
    assert chart_titles(at) == every


@pytest.mark.parametrize("log", [False, True])
def test_ignoring_outliers_of_a_flat_curve_leaves_a_band_around_it(log):
    """A constant step time (1.0 s every step) has no spread but rounding: the clipped y range is a band
    around the value on either scale, not a range of width 0 that draws nothing."""
    from ui.train import charts as tc
    from ui.train.series import Series

    s = Series()
    for i in range(200):
        s.add(float(i), None, 1.0 + (i % 3 - 1) * 2.2e-16)  # 0.9999999999999998, 1.0, 1.0000000000000002
    fig = tc.new_figure("Step time", tc.STEP)
    tc.add_curve(fig, s, "step_time_s", tc.STEP, colour="#2563eb")
    tc.scale_y(fig, log=log, clip=True)
    lo, hi = fig.layout.yaxis.range
    value = 0.0 if log else 1.0
    assert lo < value < hi and hi - lo >= 0.1, (lo, hi)
