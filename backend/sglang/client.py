"""A small HTTP client for a running SGLang server (urllib, short timeouts).

Every answer is a :class:`Reading` stamped with the time it was taken, so a page
can show its age; a failed request is a Reading with ``ok=False`` and the
error, never an exception.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Callable, Generic, TypeVar

from prometheus_client.parser import text_string_to_metric_families

from backend.sglang.version import Capabilities, capabilities
from specdeck_types.server_info import ServerInfo

# Servers are reached directly: an http_proxy set for the cluster must not
# route 127.0.0.1 or the box's own address through a proxy.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))

T = TypeVar("T")


@dataclass(frozen=True)
class Reading(Generic[T]):
    value: T | None
    at: float  # time.time() when the answer arrived (or the request failed)
    ok: bool
    status: int | None = None
    error: str | None = None
    latency_s: float | None = None

    def age(self, now: float | None = None) -> float:
        return (time.time() if now is None else now) - self.at


@dataclass(frozen=True)
class MetricSample:
    name: str  # without the "sglang:" prefix
    labels: dict
    value: float


@dataclass(frozen=True)
class Metrics:
    """``/metrics`` samples with ``sglang:`` names; lookups take the short name."""

    samples: tuple[MetricSample, ...] = ()
    help: dict = field(default_factory=dict)

    def values(self, name: str) -> list[float]:
        return [s.value for s in self.samples if s.name == name]

    def get(self, name: str, agg: str = "first") -> float | None:
        """One value for a metric across label sets: ``first``, ``sum``, ``max`` or ``mean``."""
        vals = self.values(name)
        if not vals:
            return None
        if agg == "sum":
            return sum(vals)
        if agg == "max":
            return max(vals)
        if agg == "mean":
            return sum(vals) / len(vals)
        return vals[0]

    @property
    def names(self) -> list[str]:
        return sorted({s.name for s in self.samples})


def parse_metrics(text: str) -> Metrics:
    """Parse Prometheus text; keep ``sglang:`` metrics (names without the prefix)."""
    samples: list[MetricSample] = []
    helps: dict[str, str] = {}
    for fam in text_string_to_metric_families(text):
        if not fam.name.startswith("sglang:"):
            continue
        helps[fam.name[7:]] = fam.documentation
        for s in fam.samples:
            if s.name.startswith("sglang:"):
                samples.append(MetricSample(s.name[7:], dict(s.labels), float(s.value)))
    return Metrics(tuple(samples), helps)


class SglangClient:
    def __init__(self, base_url: str, caps: Capabilities | None = None, *, timeout_s: float = 2.0,
                 api_key: str | None = None, clock: Callable[[], float] = time.time):
        self.base_url = base_url.rstrip("/")
        self.caps = caps or capabilities(None)
        self.timeout_s = timeout_s
        self.api_key = api_key
        self.clock = clock

    def _get(self, path: str, timeout_s: float | None = None) -> tuple[int | None, bytes | None, str | None, float]:
        req = urllib.request.Request(self.base_url + path, method="GET")
        if self.api_key:
            req.add_header("Authorization", f"Bearer {self.api_key}")
        t0 = time.perf_counter()
        try:
            with _OPENER.open(req, timeout=timeout_s or self.timeout_s) as resp:
                return resp.status, resp.read(), None, time.perf_counter() - t0
        except urllib.error.HTTPError as exc:
            body = b""
            try:
                body = exc.read()
            except Exception:
                pass
            return exc.code, body, f"HTTP {exc.code}", time.perf_counter() - t0
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            return None, None, f"{type(exc).__name__}: {reason}", time.perf_counter() - t0

    def health(self) -> Reading[int]:
        """Status code of ``/health`` (200 = ready; 503 while starting on 0.5.3+)."""
        status, _, err, lat = self._get("/health", timeout_s=max(self.timeout_s, 5.0))
        return Reading(status, self.clock(), status == 200, status, None if status == 200 else err, lat)

    def metrics(self) -> Reading[Metrics]:
        status, body, err, lat = self._get("/metrics")
        now = self.clock()
        if status != 200 or body is None:
            return Reading(None, now, False, status, err or f"HTTP {status}", lat)
        try:
            return Reading(parse_metrics(body.decode("utf-8", "replace")), now, True, status, None, lat)
        except ValueError as exc:
            return Reading(None, now, False, status, f"/metrics is not Prometheus text: {exc}", lat)

    def server_info(self) -> Reading[ServerInfo]:
        """``/server_info`` (0.5.10+) or ``/get_server_info``; falls back to the other on 404."""
        first = self.caps.server_info_path
        other = "/get_server_info" if first == "/server_info" else "/server_info"
        status, body, err, lat = self._get(first)
        if status == 404:
            status, body, err, lat = self._get(other)
        now = self.clock()
        if status != 200 or body is None:
            return Reading(None, now, False, status, err or f"HTTP {status}", lat)
        try:
            return Reading(ServerInfo.from_json(json.loads(body)), now, True, status, None, lat)
        except (ValueError, TypeError) as exc:
            return Reading(None, now, False, status, f"server info: {exc}", lat)
