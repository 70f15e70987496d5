"""A drain's wait reads the server's live count (/get_load) and never takes a 0 from the /metrics gauges
(changed only at each decode log line) for an answer when a live reading is late, the first one included:
on a loaded machine that ended a drain 3 s before its request did.  A server without /get_load is read
from its gauges."""

from __future__ import annotations

from types import SimpleNamespace

from backend.flows import router_sync
from backend.sglang.routerclient import LoadUnanswered


class _Fleet:
    def router_names(self):
        return ["r"]

    def router_members(self, router):
        return ["a"]

    def config(self, name):
        return SimpleNamespace(host="127.0.0.1", port=1)

    def router_config(self, name):
        return SimpleNamespace(drain_timeout_s=30.0)


class _Sup:
    def view(self, name):
        state = "RUNNING" if name == "a" else "STOPPED"  # the router is not running: nothing to take out
        return SimpleNamespace(state=SimpleNamespace(value=state), pid=123)


def _drain(tmp_path, monkeypatch, live: list, gauges: int | None):
    """``live``: the /get_load answers in turn (a count; "late": no answer in time; None: no such endpoint,
    as when the list runs out)."""
    asked = []

    def live_load(url, timeout_s=2.0):
        asked.append("live")
        what = live.pop(0) if live else None
        if what == "late":
            raise LoadUnanswered("timed out")
        return what

    def gauge_in_flight(url, timeout_s=2.0):
        asked.append("gauges")
        return gauges

    monkeypatch.setattr(router_sync, "live_load", live_load)
    monkeypatch.setattr(router_sync, "gauge_in_flight", gauge_in_flight)
    t = [0.0]
    sleeps = []

    def sleep(s):
        sleeps.append(s)
        t[0] += s

    res = router_sync.drain(_Fleet(), _Sup(), tmp_path, "a", clock=lambda: t[0], sleep=sleep)
    return res, sleeps, asked


def test_a_failed_live_reading_is_not_taken_from_the_stale_gauges(tmp_path, monkeypatch):
    # live: 1 in flight, then two late answers, then 0; the gauges say 0 all along
    res, sleeps, asked = _drain(tmp_path, monkeypatch, [1, "late", "late", 0], gauges=0)
    assert res.in_flight == 0 and len(sleeps) == 3  # waited through the misses for the live 0
    assert "gauges" not in asked


def test_a_late_first_reading_is_waited_for_not_taken_from_the_gauges(tmp_path, monkeypatch):
    res, sleeps, asked = _drain(tmp_path, monkeypatch, ["late", "late", 1, 0], gauges=0)
    assert res.in_flight == 0 and len(sleeps) == 3 and "gauges" not in asked


def test_a_count_never_answered_ends_at_the_timeout_as_unknown(tmp_path, monkeypatch):
    res, sleeps, asked = _drain(tmp_path, monkeypatch, ["late"] * 1000, gauges=0)
    assert res.in_flight is None and 30.0 <= sum(sleeps) < 30.5 and "gauges" not in asked


def test_a_server_without_a_live_count_is_read_from_its_gauges(tmp_path, monkeypatch):
    res, sleeps, asked = _drain(tmp_path, monkeypatch, [], gauges=0)
    assert res.in_flight == 0 and sleeps == [] and asked == ["live", "gauges"]


def test_the_wait_ends_at_the_timeout_when_the_count_never_reaches_0(tmp_path, monkeypatch):
    res, sleeps, _ = _drain(tmp_path, monkeypatch, [2] * 1000, gauges=0)
    assert res.in_flight == 2 and 30.0 <= sum(sleeps) < 30.5


def test_a_count_missing_after_a_live_answer_is_not_read_from_the_gauges(tmp_path, monkeypatch):
    res, sleeps, asked = _drain(tmp_path, monkeypatch, [1, None, 1, 0], gauges=0)
    assert res.in_flight == 0 and len(sleeps) == 3 and "gauges" not in asked
