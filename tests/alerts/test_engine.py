"""The engine over the state store: firing, clearing, history, acknowledgement and mutes, and the
notifications it sends (a fake notifier records them)."""

from __future__ import annotations

import pytest

from backend.alerts.engine import ENGINE_ONLY, AlertEngine
from backend.alerts.model import DiskState, ServerState, Snapshot
from backend.alerts.notify import Delivery, Notifier, RateLimit
from state import Store
from state.alerts import AlertStore, UnknownAlert

T0 = 1_800_000_000.0
GIB = 1024 ** 3


class Recorder(Notifier):
    def __init__(self, **kw):
        super().__init__("http://127.0.0.1:9/hook", **kw)
        self.sent = []

    def send(self, msg, *, key=None, limited=True):
        if limited and not self.limit.allow(key):
            return []
        self.sent.append(msg)
        return [Delivery("webhook test", True, "HTTP 200")]


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "state.db") as s:
        yield s


def _down(now):
    return Snapshot(now, servers=(ServerState("glm5", "FATAL", exit_code=1),))


def _low_disk(now, free_gb=3.0):
    return Snapshot(now, disks=(DiskState("/o", int(free_gb * GIB), int(100 * GIB)),))


def test_fire_once_update_and_clear_kept_in_history(store):
    rec = Recorder()
    eng = AlertEngine(store, notifier=rec, clock=lambda: T0)
    r1 = eng.evaluate(_down(T0))
    assert [a.key for a in r1.fired] == ["server-down:glm5"] and len(rec.sent) == 1
    assert "[ERROR]" in rec.sent[0].text and "/servers?server=glm5" in rec.sent[0].text
    # still firing: no new row, no second notification
    r2 = eng.evaluate(_down(T0 + 15))
    assert r2.fired == [] and len(rec.sent) == 1
    assert len(eng.alerts.active()) == 1
    # condition gone: cleared, still in the history
    r3 = eng.evaluate(Snapshot(T0 + 30))
    assert [a.key for a in r3.cleared] == ["server-down:glm5"] and r3.cleared[0].cleared_at == T0 + 30
    assert eng.alerts.active() == []
    hist = eng.alerts.history()
    assert len(hist) == 1 and hist[0].fired_at == T0 and hist[0].notified_at == T0
    # fires again later: a second row
    eng.evaluate(_down(T0 + 100))
    assert [h.fired_at for h in eng.alerts.history()] == [T0 + 100, T0]


def test_history_survives_reopening_the_store(tmp_path):
    with Store(tmp_path / "state.db") as s:
        AlertEngine(s, notifier=Recorder()).evaluate(_down(T0))
    with Store(tmp_path / "state.db") as s:
        recs = AlertStore(s).active()
        assert [(r.rule, r.subject, r.severity) for r in recs] == [("server-down", "glm5", "error")]


def test_worse_severity_notifies_again(store):
    rec = Recorder(limit=RateLimit(repeat_s=0))
    eng = AlertEngine(store, notifier=rec)
    eng.evaluate(_low_disk(T0, 3.0))
    assert rec.sent[-1].severity == "warning"
    eng.evaluate(_low_disk(T0 + 10, 0.5))
    assert len(rec.sent) == 2 and rec.sent[-1].severity == "error"
    assert eng.alerts.active()[0].severity == "error"


def test_ack_hides_and_silences(store):
    rec = Recorder(limit=RateLimit(repeat_s=0))
    eng = AlertEngine(store, notifier=rec, clock=lambda: T0)
    fired = eng.evaluate(_low_disk(T0, 3.0)).fired[0]
    assert [r.id for r in eng.visible()] == [fired.id]
    acked = eng.alerts.ack(fired.id, "alice", now=T0 + 5)
    assert acked.acked_by == "alice" and acked.acked_at == T0 + 5
    assert eng.visible() == []
    eng.evaluate(_low_disk(T0 + 10, 0.5))  # worse, but acknowledged: no notification
    assert len(rec.sent) == 1
    with pytest.raises(UnknownAlert, match="no alert #999"):
        eng.alerts.ack(999, "alice")


def test_mute_a_rule_until_a_time(store):
    rec = Recorder(limit=RateLimit(repeat_s=0))
    eng = AlertEngine(store, notifier=rec, clock=lambda: T0)
    eng.alerts.mute("server-down", T0 + 3600, "bob", now=T0)
    eng.evaluate(_down(T0))
    assert rec.sent == [] and eng.visible(T0) == []
    assert len(eng.alerts.active()) == 1  # recorded, only hidden
    assert eng.visible(T0 + 3601)  # the mute ran out
    # a key mute covers that subject only
    eng.alerts.mute("disk-full:/other", T0 + 3600, "bob", now=T0)
    eng.evaluate(Snapshot(T0 + 1, servers=_down(T0).servers, disks=_low_disk(T0).disks))
    assert [m.text.split("\n")[0] for m in rec.sent] == ["[WARNING] 3.0 GiB free in /o (of 100.0 GiB)"]
    assert eng.alerts.unmute("server-down") and not eng.alerts.unmute("server-down")


def test_rate_limit_per_key_and_per_hour(store):
    now = [T0]
    limit = RateLimit(max_per_hour=2, repeat_s=600, clock=lambda: now[0])
    assert limit.allow("a") and not limit.allow("a")  # the same key within repeat_s
    assert limit.allow("b") and not limit.allow("c")  # two in this hour already
    assert limit.dropped == 2
    now[0] += 3600
    assert limit.allow("a") and limit.allow("c")
    # the engine: a flapping alert notifies once per repeat_s
    rec = Recorder(limit=RateLimit(repeat_s=600, clock=lambda: now[0]))
    eng = AlertEngine(store, notifier=rec)
    for i in range(4):
        eng.evaluate(_down(now[0]))
        eng.evaluate(Snapshot(now[0] + 1))
        now[0] += 60
    assert len(rec.sent) == 1 and len(eng.alerts.history()) == 4


def test_notices_for_the_sidebar_link_to_the_page(store):
    eng = AlertEngine(store, notifier=Recorder())
    eng.evaluate(Snapshot(T0, servers=_down(T0).servers, disks=_low_disk(T0).disks))
    notices = eng.notices(ENGINE_ONLY, now=T0)
    assert [n.code for n in notices] == ["server-down", "disk-full"]  # errors first
    assert notices[0].title.endswith("([open](/servers?server=glm5))")
    assert eng.notices(("gpu-memory",), now=T0) == []
