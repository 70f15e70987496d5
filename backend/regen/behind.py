"""The servers behind an ``sglang-router`` a regeneration asks, as the router counts them.

A router answers for its workers; which one served a row is not in the answer.  The router's own
Prometheus exporter counts each worker's outcomes (``smg_worker_cb_outcomes_total{worker, outcome}``)
and health (``smg_worker_health{worker}``).  When a ``--server`` is a ``[[router]]`` of the workspace,
the job knows that exporter's URL (``ServerSpec.metrics``) and reads it at each progress line, so the
progress log holds, per router, each worker's completed and failed requests and its request rate over
the last :data:`WINDOW_S` seconds (``behind`` in the snapshot).  Labels of removed workers stay in the
router's output; a worker the router no longer reports healthy is kept with ``healthy: false``.
"""

from __future__ import annotations

import re
import time
import urllib.error
import urllib.request
from collections import deque
from typing import Any

WINDOW_S = 30.0
_LINE = re.compile(r'^(smg_worker_cb_outcomes_total|smg_worker_health)\{([^}]*)\}\s+([0-9.eE+-]+|NaN)')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_router_metrics(text: str) -> dict[str, dict[str, Any]]:
    """worker URL -> {"done", "failed", "healthy"} from the router's exposition text."""
    out: dict[str, dict[str, Any]] = {}
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m:
            continue
        labels = dict(_LABEL.findall(m.group(2)))
        url = labels.get("worker")
        if not url:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        w = out.setdefault(url.rstrip("/"), {"done": 0, "failed": 0, "healthy": None})
        if m.group(1) == "smg_worker_health":
            w["healthy"] = value >= 1
        elif labels.get("outcome") == "success":
            w["done"] += int(value)
        else:
            w["failed"] += int(value)
    return out


def read_router_metrics(url: str, timeout_s: float = 2.0) -> dict[str, dict[str, Any]]:
    """The router's workers' counts from its exporter at ``url``; OSError/ValueError when unreachable."""
    with urllib.request.urlopen(url.rstrip("/") + "/metrics", timeout=timeout_s) as r:
        return parse_router_metrics(r.read().decode("utf-8", "replace"))


class Behind:
    """Rates of the workers behind one router from successive readings of its counters."""

    def __init__(self, metrics_url: str, *, window_s: float = WINDOW_S, clock=time.time) -> None:
        self.metrics_url = metrics_url
        self.window_s = window_s
        self.clock = clock
        self.samples: dict[str, deque] = {}  # url -> (t, done)
        self.latest: dict[str, dict[str, Any]] = {}
        self.error: str | None = None
        self.read_at: float | None = None
        self.task = None  # the read in flight (an asyncio task), one at a time

    def update(self, counts: dict[str, dict[str, Any]]) -> None:
        now = self.clock()
        self.read_at, self.error = now, None
        for url, c in counts.items():
            q = self.samples.setdefault(url, deque())
            q.append((now, c["done"]))
            while len(q) > 1 and q[0][0] < now - self.window_s:
                q.popleft()
            self.latest[url] = dict(c)

    def failed_read(self, why: str) -> None:
        self.error = why[:200]

    def snapshot(self) -> dict[str, Any]:
        workers = {}
        for url, c in self.latest.items():
            q = self.samples.get(url) or deque()
            rate = None
            if len(q) > 1 and q[-1][0] > q[0][0]:
                rate = round(max(0, q[-1][1] - q[0][1]) / (q[-1][0] - q[0][0]), 3)
            workers[url] = {"done": c["done"], "failed": c["failed"], "healthy": c["healthy"], "req_s": rate}
        return {"metrics": self.metrics_url, "read_at": round(self.read_at, 3) if self.read_at else None,
                "error": self.error, "workers": workers}
