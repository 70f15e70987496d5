"""The alerts engine: evaluate the rules over a snapshot, keep the history, notify.

Each evaluation compares what fires now with the active rows of the store: a key newly firing
opens a row and is notified (unless muted or acknowledged, within the rate limit), a key still
firing has its severity and text brought up to date (notified again when it got worse), and an
active key that no longer fires is cleared.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from backend.alerts.model import Alert, Snapshot, Thresholds
from backend.alerts.notify import Delivery, Message, Notifier
from backend.alerts.rules import evaluate
from state.alerts import AlertRecord, AlertStore
from state.store import Store

_RANK = {"info": 0, "warning": 1, "error": 2}

# The rules whose alerts only this engine raises; the others' conditions (accept_len stuck, a
# server's fatal error, GPU memory, throttling and idleness, a stalled regeneration) the domains'
# own monitors already show in the sidebar.
ENGINE_ONLY = ("spec-slower", "server-down", "server-restart-loop", "regen-errors", "eta-deadline", "disk-full")


@dataclass(frozen=True)
class Notice:
    """An active alert as the sidebar shows it: ``title`` is markdown ending in a link to its page."""

    severity: str
    code: str
    title: str
    message: str
    link: str
    id: int


def message_text(a: Alert | AlertRecord, *, base_url: str = "", workspace: str = "") -> str:
    """``[ERROR] glm5: accept_len 1.00 ... — what to do: ... — /servers?server=glm5``."""
    where = f"{base_url.rstrip('/')}{a.link}" if base_url else a.link
    head = f"[{a.severity.upper()}]" + (f" {workspace}:" if workspace else "")
    return f"{head} {a.title}\nWhat to do: {a.action}\n{where}"


@dataclass
class Evaluation:
    """What one evaluation changed."""

    fired: list[AlertRecord] = field(default_factory=list)
    cleared: list[AlertRecord] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)


class AlertEngine:
    def __init__(self, store: Store, *, thresholds: Thresholds | None = None, notifier: Notifier | None = None,
                 clock: Callable[[], float] = time.time, base_url: str = "", workspace: str = ""):
        self.alerts = AlertStore(store)
        self.thresholds = thresholds or Thresholds()
        self.notifier = notifier or Notifier()
        self.clock = clock
        self.base_url = base_url
        self.workspace = workspace
        self._lock = threading.Lock()  # one evaluation at a time (the loop's, a test's, a command's)

    def evaluate(self, snap: Snapshot) -> Evaluation:
        with self._lock:
            return self._evaluate(snap)

    def _evaluate(self, snap: Snapshot) -> Evaluation:
        now = snap.now
        firing = {a.key: a for a in evaluate(snap, self.thresholds)}
        active = {r.key: r for r in self.alerts.active()}
        result = Evaluation()
        for key, a in firing.items():
            rec = active.get(key)
            if rec is None:
                rec = self.alerts.fire(key=key, rule=a.rule, subject=a.subject, severity=a.severity, title=a.title,
                                       action=a.action, link=a.link, since=a.since, now=now)
                result.fired.append(rec)
                result.deliveries += self._notify(rec, now)
            elif (rec.severity, rec.title, rec.action, rec.link) != (a.severity, a.title, a.action, a.link):
                worse = _RANK[a.severity] > _RANK.get(rec.severity, 0)
                self.alerts.update(rec.id, severity=a.severity, title=a.title, action=a.action, link=a.link, now=now)
                if worse:
                    result.deliveries += self._notify(self.alerts.get(rec.id), now)
        for key, rec in active.items():
            if key not in firing:
                self.alerts.clear(rec.id, now)
                result.cleared.append(self.alerts.get(rec.id))
        return result

    def _notify(self, rec: AlertRecord, now: float) -> list[Delivery]:
        if rec.acked or self.alerts.muted(rec.key, rec.rule, now) is not None:
            return []
        sent = self.notifier.send(Message(message_text(rec, base_url=self.base_url, workspace=self.workspace),
                                          rec.severity, rec.rule, rec.subject, rec.link, rec.id), key=rec.key)
        if any(d.ok for d in sent):
            self.alerts.mark_notified(rec.id, now)
        return sent

    def visible(self, now: float | None = None) -> list[AlertRecord]:
        """Active alerts that are neither acknowledged nor muted, errors first (the sidebar's list)."""
        now = self.clock() if now is None else now
        mutes = self.alerts.mutes(now)
        out = [r for r in self.alerts.active() if not r.acked and not any(m.covers(r.key, r.rule) for m in mutes)]
        return sorted(out, key=lambda r: (-_RANK.get(r.severity, 0), r.fired_at))

    def notices(self, rules: tuple[str, ...] | None = None, now: float | None = None) -> list[Notice]:
        """The visible alerts of ``rules`` (all when None) for the sidebar."""
        return [Notice(r.severity, r.rule, f"{r.title} ([open]({r.link}))", r.action, r.link, r.id)
                for r in self.visible(now) if rules is None or r.rule in rules]

    def test(self) -> list[Delivery]:
        """Send a test notification to every configured channel (not rate limited)."""
        text = (f"[TEST]{f' {self.workspace}:' if self.workspace else ''} Specdeck alerts reach this channel. "
                "Alerts fire here when a rule's condition holds (accept_len stuck, a server down, a stalled job...).")
        return self.notifier.send(Message(text, "info", "test"), limited=False)
