"""Notifications: a Slack-compatible webhook (``{"text": ...}`` POSTed as JSON) and a command
(an argv list, run without a shell, the message on its stdin and in ``SPECDECK_ALERT_*``
variables), behind a rate limit.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from dataclasses import dataclass
from typing import Callable, Sequence

log = logging.getLogger(__name__)

WEBHOOK_TIMEOUT_S = 10.0
COMMAND_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Message:
    """One notification: its text and the alert's fields (empty for a test)."""

    text: str
    severity: str = "info"
    rule: str = ""
    subject: str = ""
    link: str = ""
    alert_id: int | None = None


@dataclass(frozen=True)
class Delivery:
    """What became of one notification on one channel."""

    channel: str  # "webhook URL" or "command ARGV0"
    ok: bool
    detail: str


def webhook_payload(msg: Message) -> dict:
    """Slack's incoming-webhook body (Mattermost, Rocket.Chat and Discord's /slack read it too)."""
    return {"text": msg.text}


def send_webhook(url: str, msg: Message, *, timeout_s: float = WEBHOOK_TIMEOUT_S) -> Delivery:
    body = json.dumps(webhook_payload(msg)).encode()
    req = urllib.request.Request(url, data=body, method="POST",
                                 headers={"Content-Type": "application/json", "User-Agent": "specdeck-alerts"})
    channel = f"webhook {url}"
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 (the configured URL)
            return Delivery(channel, True, f"HTTP {resp.status}")
    except urllib.error.HTTPError as exc:
        return Delivery(channel, False, f"HTTP {exc.code} {exc.reason}")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return Delivery(channel, False, f"not sent: {reason}")


def run_command(argv: Sequence[str], msg: Message, *, timeout_s: float = COMMAND_TIMEOUT_S) -> Delivery:
    """Run ``argv`` (never through a shell) with the message on stdin and in the environment."""
    channel = f"command {argv[0]}"
    env = dict(os.environ)
    env.update({
        "SPECDECK_ALERT_TEXT": msg.text,
        "SPECDECK_ALERT_SEVERITY": msg.severity,
        "SPECDECK_ALERT_RULE": msg.rule,
        "SPECDECK_ALERT_SUBJECT": msg.subject,
        "SPECDECK_ALERT_LINK": msg.link,
        "SPECDECK_ALERT_ID": "" if msg.alert_id is None else str(msg.alert_id),
    })
    try:
        proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, env=env, start_new_session=True)
    except OSError as exc:
        return Delivery(channel, False, f"could not run: {exc.strerror or exc}")
    try:
        _, err = proc.communicate(msg.text.encode() + b"\n", timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
        return Delivery(channel, False, f"still running after {timeout_s:.0f} s: stopped")
    if proc.returncode != 0:
        last = (err or b"").decode(errors="replace").strip().splitlines()[-1:] or [""]
        return Delivery(channel, False, f"exit code {proc.returncode}" + (f": {last[0]}" if last[0] else ""))
    return Delivery(channel, True, "exit code 0")


class RateLimit:
    """At most ``max_per_hour`` notifications in any hour, and one per key per ``repeat_s``."""

    def __init__(self, max_per_hour: int = 20, repeat_s: float = 3600.0, *,
                 clock: Callable[[], float] = time.time):
        self.max_per_hour = max_per_hour
        self.repeat_s = repeat_s
        self._clock = clock
        self._sent: deque[float] = deque()
        self._by_key: dict[str, float] = {}
        self._lock = threading.Lock()
        self.dropped = 0

    def allow(self, key: str | None = None) -> bool:
        """Take a slot (True) or refuse (False, counted in ``dropped``)."""
        with self._lock:
            now = self._clock()
            while self._sent and now - self._sent[0] >= 3600.0:
                self._sent.popleft()
            last = self._by_key.get(key) if key is not None else None
            if len(self._sent) >= self.max_per_hour or (last is not None and now - last < self.repeat_s):
                self.dropped += 1
                return False
            self._sent.append(now)
            if key is not None:
                self._by_key[key] = now
            return True


class Notifier:
    """The configured channels and the rate limit they share."""

    def __init__(self, webhook: str | None = None, command: Sequence[str] = (), *,
                 limit: RateLimit | None = None, timeout_s: float = WEBHOOK_TIMEOUT_S):
        self.webhook = webhook or None
        self.command = tuple(command)
        self.limit = limit or RateLimit()
        self.timeout_s = timeout_s

    @property
    def configured(self) -> bool:
        return bool(self.webhook or self.command)

    def channels(self) -> list[str]:
        return ([f"webhook {self.webhook}"] if self.webhook else []) + \
               ([f"command {' '.join(self.command)}"] if self.command else [])

    def send(self, msg: Message, *, key: str | None = None, limited: bool = True) -> list[Delivery]:
        """Send ``msg`` to every channel; [] when nothing is configured or the rate limit refuses."""
        if not self.configured or (limited and not self.limit.allow(key)):
            return []
        out = []
        if self.webhook:
            out.append(send_webhook(self.webhook, msg, timeout_s=self.timeout_s))
        if self.command:
            out.append(run_command(self.command, msg))
        for d in out:
            if not d.ok:
                log.warning("alert notification to %s failed: %s", d.channel, d.detail)
        return out
