"""The progress-log follower, the line reader, the ETA band and the stall alert."""

from __future__ import annotations

import json

import pytest

from backend.regen import follow
from backend.regen.follow import LineReader, ProgressFollower, eta_band, hist_quantile, stall_alert
from tests.regen.regen_fixtures import append, snap

T0 = 1_764_000_000.0


def test_line_reader_returns_complete_lines_and_waits_for_a_torn_one(tmp_path):
    p = tmp_path / "f.jsonl"
    p.write_bytes(b'{"a": 1}\n{"b": 2}\n{"c": ')
    r = LineReader(p)
    assert [line for _, line in r.read()] == [b'{"a": 1}', b'{"b": 2}']
    assert r.offset == 18
    assert r.read() == []  # the torn line is not complete yet
    append(p, raw=b'3}\n')
    assert r.read() == [(18, b'{"c": 3}')]
    assert r.read() == []


def test_line_reader_reads_only_the_new_bytes(tmp_path, monkeypatch):
    p = tmp_path / "f.jsonl"
    p.write_bytes(b"x" * 100 + b"\n")
    r = LineReader(p)
    r.read()
    seeks = []
    real_open = open

    def spy(path, mode="r", *a, **k):
        f = real_open(path, mode, *a, **k)
        real_seek = f.seek
        f.seek = lambda pos, *x: (seeks.append(pos), real_seek(pos, *x))[1]
        return f

    monkeypatch.setattr("builtins.open", spy)
    append(p, raw=b"yy\n")
    assert r.read() == [(101, b"yy")]
    assert seeks == [101]


def test_line_reader_starts_over_when_the_file_shrinks_or_is_replaced(tmp_path):
    p = tmp_path / "f.jsonl"
    p.write_bytes(b"one\ntwo\n")
    r = LineReader(p)
    assert len(r.read()) == 2
    p.write_bytes(b"new\n")  # truncated and rewritten: shorter than the offset
    assert r.read() == [(0, b"new")]
    assert r.resets == 1
    q = tmp_path / "g.jsonl"
    q.write_bytes(b"aaaa\nbbbb\n")
    q.replace(p)  # another file under the same name (another inode)
    assert [line for _, line in r.read()] == [b"aaaa", b"bbbb"]
    assert r.resets == 2


def test_line_reader_budget_reads_a_long_line_whole(tmp_path):
    p = tmp_path / "f.jsonl"
    p.write_bytes(b"a" * 50 + b"\n" + b"b" * 10 + b"\n")
    r = LineReader(p)
    assert r.read(max_bytes=20) == [(0, b"a" * 50)]
    assert r.read(max_bytes=20) == [(51, b"b" * 10)]


def test_follower_latest_snapshot_counts_and_history(tmp_path):
    out = tmp_path / "run.jsonl"
    prog = tmp_path / "run.progress.jsonl"
    append(prog, snap(T0, 0), snap(T0 + 2, 10, failed=1, req_s=5.0, tok_s=400.0))
    f = ProgressFollower(out).poll()
    assert f.latest["done"] == 10 and f.latest["failed"] == 1
    assert f.history.t == [T0, T0 + 2]
    assert f.history.values["req_s"] == [None, 5.0]
    append(prog, raw=b'{"t": 1764000004.0, "state": "run')  # torn: not taken yet
    f.poll()
    assert f.latest["done"] == 10 and len(f.history) == 2
    append(prog, raw=b'ning", "done": 20, "failed": 1}\n')
    f.poll()
    assert f.latest["done"] == 20 and len(f.history) == 3
    assert f.last_completion_t == T0 + 4


def test_follower_reports_bad_lines_and_goes_on(tmp_path):
    prog = tmp_path / "run.progress.jsonl"
    append(prog, snap(T0, 1), raw=b"not json\n")
    append(prog, snap(T0 + 2, 2))
    f = ProgressFollower(tmp_path / "run.jsonl").poll()
    assert f.latest["done"] == 2
    assert f.bad_lines == 1
    assert "run.progress.jsonl at byte" in f.last_bad


def test_follower_starts_over_after_truncation(tmp_path):
    prog = tmp_path / "run.progress.jsonl"
    append(prog, snap(T0, 5), snap(T0 + 2, 6), snap(T0 + 4, 7))
    f = ProgressFollower(tmp_path / "run.jsonl").poll()
    assert len(f.history) == 3
    prog.write_bytes(json.dumps(snap(T0 + 10, 1)).encode() + b"\n")  # a new run on the same path
    f.poll()
    assert f.latest["done"] == 1
    assert f.history.t == [T0 + 10]


def test_large_log_is_sampled_on_first_read_and_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(follow, "SAMPLE_ABOVE_BYTES", 10_000)
    prog = tmp_path / "run.progress.jsonl"
    n = 5000
    with open(prog, "wb") as fh:
        for i in range(n):
            fh.write((json.dumps(snap(T0 + 2 * i, i, total=n)) + "\n").encode())
    f = ProgressFollower(tmp_path / "run.jsonl", max_points=200).poll()
    assert f.latest["done"] == n - 1  # the last line is the current state
    assert 150 <= len(f.history) <= 400
    assert f.history.t == sorted(f.history.t)
    assert f.history.t[0] == T0
    for i in range(n, n + 600):  # appended afterwards: still bounded
        append(prog, snap(T0 + 2 * i, i, total=n + 600))
    f.poll()
    assert f.latest["done"] == n + 599
    assert len(f.history) <= 400
    assert f.history.t[-1] == T0 + 2 * (n + 599)


def test_history_marks_each_resume(tmp_path):
    prog = tmp_path / "run.progress.jsonl"
    append(prog, snap(T0, 1, started_at=T0), snap(T0 + 2, 2, started_at=T0),
           snap(T0 + 100, 2, started_at=T0 + 99), snap(T0 + 102, 3, started_at=T0 + 99))
    f = ProgressFollower(tmp_path / "run.jsonl").poll()
    assert f.history.run_starts() == [T0 + 99]
    assert f.history.completed_points() == [(T0 + 100, 2), (T0 + 102, 3)]


# -- ETA -------------------------------------------------------------------------------------


def test_hist_quantile_interpolates_inside_bins():
    # 10 rows in 0-100, 10 rows in 100-200: the median is the edge, p25 the middle of bin 1
    assert hist_quantile([0, 100, 200], [10, 10], 0.5) == 100
    assert hist_quantile([0, 100, 200], [10, 10], 0.25) == 50
    assert hist_quantile([0, 100], [0], 0.5) is None


def test_eta_band_from_the_rate_spread():
    # 10 windows of 60 s; rates 1.0 rows/s in five of them, 2.0 in the other five
    pts, done = [(T0, 0)], 0
    for k in range(10):
        done += 60 if k % 2 == 0 else 120
        pts.append((T0 + 60 * (k + 1), done))
    eta = eta_band(900, pts, now=T0 + 600)
    # rate over the 600 s: 900 rows / 600 s = 1.5 rows/s -> 600 s; p90 rate 2.0 -> 450 s; p10 1.0 -> 900 s
    assert eta.point_s == pytest.approx(600)
    assert eta.low_s == pytest.approx(450)
    assert eta.high_s == pytest.approx(900)


def test_eta_band_from_answer_lengths_before_the_rate_has_history():
    # one window only: 100 rows/s; answers p10 = 10, p90 = 90 tokens of a uniform 0-100 histogram
    eta = eta_band(1000, [(T0, 0), (T0 + 10, 1000)], now=T0 + 10, tok_s=1000.0,
                   length_hist=([0, 100], [50]))
    assert eta.point_s == pytest.approx(10)
    assert eta.low_s == pytest.approx(10)  # 1000 x 10 / 1000 = 10, not below the point
    assert eta.high_s == pytest.approx(90)  # 1000 x 90 / 1000


def test_eta_unknown_without_rate_and_zero_when_done():
    assert not eta_band(10, [], now=T0).known
    assert eta_band(None, [], now=T0).basis.startswith("the number")
    assert eta_band(0, [], now=T0).point_s == 0


# -- stall -----------------------------------------------------------------------------------


def test_stall_alert_only_while_running_and_after_the_threshold():
    assert stall_alert("j", running=True, last_completion_t=T0, started_t=T0 - 50, now=T0 + 599,
                       after_s=600) is None
    a = stall_alert("j", running=True, last_completion_t=T0, started_t=T0 - 50, now=T0 + 601, after_s=600)
    assert a is not None and a.severity == "warning" and a.code == "regen-stalled"
    assert a.title == "j: no row completed for 10 min"
    assert stall_alert("j", running=False, last_completion_t=T0, started_t=None, now=T0 + 9999) is None
    # nothing completed yet: counted from the start
    assert stall_alert("j", running=True, last_completion_t=None, started_t=T0, now=T0 + 700, after_s=600)


def test_follower_stall_uses_the_time_of_the_last_completion(tmp_path):
    prog = tmp_path / "run.progress.jsonl"
    append(prog, snap(T0, 0), snap(T0 + 2, 5), snap(T0 + 4, 5), snap(T0 + 300, 5, message="waiting for x"))
    f = ProgressFollower(tmp_path / "run.jsonl", clock=lambda: T0 + 300).poll()
    assert f.last_completion_t == T0 + 2
    assert f.stall("j", running=True, after_s=290, now=T0 + 300) is not None
    assert f.stall("j", running=True, after_s=290, now=T0 + 300).causes[0] == "waiting for x"
    assert f.stall("j", running=True, after_s=400, now=T0 + 300) is None
    append(prog, snap(T0 + 302, 5, state="paused"))
    f.poll()
    assert f.stall("j", running=True, after_s=1, now=T0 + 900) is None  # paused is not stalled


def test_eta_band_measures_the_rate_over_windows_of_a_minute_not_per_snapshot():
    # a snapshot every 2 s at 0.25 rows/s: each holds 0 or 1 new row, yet the rate never varies
    pts = [(T0 + 2 * k, k // 2) for k in range(900)]  # 30 min
    eta = eta_band(3600, pts, now=T0 + 1798)
    assert eta.point_s == pytest.approx(14400, rel=0.01)  # 3,600 rows at 0.25 rows/s
    assert eta.low_s == pytest.approx(14400, rel=0.05)
    assert eta.high_s == pytest.approx(14400, rel=0.05)
