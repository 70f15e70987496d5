"""The newest decode figures of a server snapshot, as the Servers page and the Overview read them."""

from __future__ import annotations

from types import SimpleNamespace

from backend.sglang.livefigures import latest, newest


def _dec(ts, acc, tput, running):
    return {"ts": ts, "accept_len": acc, "gen_throughput": tput, "running_req": running}


def test_the_current_runs_lines_and_the_newest_accept_len_logged():
    run = _dec([1.0, 2.0, 3.0], [2.5, 2.9, None], [80.0, 95.0, 101.0], [1, 2, 4])
    snap = SimpleNamespace(run_decode=run, decode=_dec([0.5], [1.0], [10.0], [1]), lifetime_accept_len=2.7)
    f = latest(snap)
    assert f.decode is run  # the current run's, not the whole log's
    assert (f.accept_len, f.lifetime_accept_len, f.gen_throughput, f.running_req) == (2.9, 2.7, 101.0, 4)


def test_the_whole_logs_lines_where_runs_are_not_told_apart_and_none_without_a_line():
    whole = _dec([0.5], [1.0], [10.0], [1])
    f = latest(SimpleNamespace(run_decode=None, decode=whole, lifetime_accept_len=None))
    assert f.decode is whole and (f.accept_len, f.gen_throughput, f.running_req) == (1.0, 10.0, 1)
    empty = latest(SimpleNamespace(run_decode=_dec([], [], [], []), decode=whole, lifetime_accept_len=None))
    assert (empty.accept_len, empty.gen_throughput, empty.running_req) == (None, None, None)
    assert newest([None, 3, None]) == 3 and newest([None], default=0) == 0
