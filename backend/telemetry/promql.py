"""Prometheus's HTTP API over plain urllib: ``/api/v1/query``, ``/api/v1/query_range`` and
``/api/v1/targets``, and pure parsers of their answers.

Every problem becomes a :class:`PromError` that names the URL and what was wrong (HTTP 400
``bad_data`` with Prometheus's own message, a timeout, a refused connection, an answer that is not
the documented JSON).  A sample value that is not a finite number (``NaN``, ``+Inf``) is kept as
``None`` with its reason: N/A, never 0.
"""

from __future__ import annotations

import http.client
import json
import math
import re
import socket
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Mapping


class PromError(Exception):
    """A Prometheus request that gave no usable answer.

    ``kind``: ``bad_data`` / ``execution`` / ... (Prometheus's ``errorType``), ``http`` (another
    HTTP status without Prometheus's error body), ``timeout``, ``unreachable`` or ``bad_answer``
    (the body is not the API's JSON)."""

    def __init__(self, kind: str, message: str, *, url: str = "", status: int | None = None):
        self.kind, self.message, self.url, self.status = kind, message, url, status
        where = f"{url}: " if url else ""
        code = f"HTTP {status} " if status is not None else ""
        super().__init__(f"{where}{code}{kind}: {message}")


@dataclass(frozen=True)
class PromSeries:
    """One series of an answer: its labels (``__name__`` included where Prometheus kept it) and its
    points ``(t, value)``; a value that is not a finite number is ``None`` and ``why`` says so."""

    labels: Mapping[str, str]
    points: tuple[tuple[float, float | None], ...]
    why: Mapping[float, str] = field(default_factory=dict)  # t -> reason of a None value

    @property
    def name(self) -> str:
        return self.labels.get("__name__", "")

    @property
    def last(self) -> tuple[float, float | None] | None:
        return self.points[-1] if self.points else None


@dataclass(frozen=True)
class Target:
    """One active scrape target (``/api/v1/targets``)."""

    scrape_url: str
    labels: Mapping[str, str]
    pool: str
    health: str  # "up" | "down" | "unknown"
    last_error: str
    last_scrape: float | None  # epoch seconds of the last scrape attempt; None: never scraped
    interval_s: float | None

    @property
    def instance(self) -> str:
        return self.labels.get("instance", "")


def parse_value(raw: Any) -> tuple[float | None, str | None]:
    """A sample value as Prometheus writes it (a string): ``(value, None)``, or ``(None, why)``
    for NaN, infinities and anything that is not a number."""
    try:
        v = float(raw)
    except (TypeError, ValueError):
        return None, f"not a number: {str(raw)[:40]!r}"
    if math.isnan(v):
        return None, "the exporter reported NaN"
    if math.isinf(v):
        return None, f"the exporter reported {'+' if v > 0 else '-'}Inf"
    return v, None


def _point(raw: Any, where: str) -> tuple[float, float | None, str | None]:
    if not isinstance(raw, list) or len(raw) != 2 or not isinstance(raw[0], (int, float)) or isinstance(raw[0], bool):
        raise PromError("bad_answer", f"{where}: expected [time, \"value\"], got {str(raw)[:80]}")
    v, why = parse_value(raw[1])
    return float(raw[0]), v, why


def _labels(raw: Any, where: str) -> dict[str, str]:
    if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        raise PromError("bad_answer", f"{where}.metric: expected an object of string labels, got {str(raw)[:80]}")
    return raw


def _body_json(body: bytes | str, what: str) -> dict:
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        text = body[:80] if isinstance(body, str) else body[:80].decode("utf-8", "replace")
        raise PromError("bad_answer", f"{what}: not JSON ({exc.__class__.__name__}): {text!r}") from None
    if not isinstance(doc, dict):
        raise PromError("bad_answer", f"{what}: expected a JSON object, got {type(doc).__name__}")
    if doc.get("status") == "error":
        raise PromError(str(doc.get("errorType") or "error"), str(doc.get("error") or "no message"))
    if doc.get("status") != "success":
        raise PromError("bad_answer", f"{what}: status is {doc.get('status')!r}, expected 'success'")
    return doc


def parse_query_answer(body: bytes | str, what: str = "query") -> list[PromSeries]:
    """The series of a ``query`` or ``query_range`` answer (vector, matrix or scalar)."""
    doc = _body_json(body, what)
    data = doc.get("data")
    if not isinstance(data, dict):
        raise PromError("bad_answer", f"{what}: data: expected an object, got {str(data)[:80]}")
    kind, result = data.get("resultType"), data.get("result")
    if kind == "scalar":
        t, v, why = _point(result, f"{what}: data.result")
        return [PromSeries({}, ((t, v),), {t: why} if why else {})]
    if kind not in ("vector", "matrix"):
        raise PromError("bad_answer", f"{what}: data.resultType: {kind!r} is not vector, matrix or scalar")
    if not isinstance(result, list):
        raise PromError("bad_answer", f"{what}: data.result: expected a list, got {type(result).__name__}")
    out = []
    for i, item in enumerate(result):
        where = f"{what}: data.result[{i}]"
        if not isinstance(item, dict):
            raise PromError("bad_answer", f"{where}: expected an object, got {str(item)[:80]}")
        labels = _labels(item.get("metric", {}), where)
        raws = [item.get("value")] if kind == "vector" else item.get("values")
        if not isinstance(raws, list):
            raise PromError("bad_answer", f"{where}.values: expected a list, got {str(raws)[:80]}")
        points, why = [], {}
        for j, raw in enumerate(raws):
            t, v, reason = _point(raw, f"{where}.{'value' if kind == 'vector' else f'values[{j}]'}")
            points.append((t, v))
            if reason:
                why[t] = reason
        out.append(PromSeries(labels, tuple(points), why))
    return out


_RFC3339 = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)$")


def parse_time(text: str) -> float | None:
    """Prometheus's RFC 3339 time (nanoseconds allowed) as epoch seconds; ``None`` for the zero
    time ``0001-01-01T00:00:00Z`` (never scraped) and for text that is not such a time."""
    m = _RFC3339.match(text or "")
    if not m:
        return None
    base, frac, zone = m.groups()
    if base.startswith("0001-"):
        return None
    dt = datetime.fromisoformat(base + ("+00:00" if zone == "Z" else zone))
    return dt.timestamp() + (float("0." + frac) if frac else 0.0)


def _duration_s(text: Any) -> float | None:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s|m|h)", str(text or ""))
    if not m:
        return None
    return float(m.group(1)) * {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[m.group(2)]


def parse_targets_answer(body: bytes | str) -> list[Target]:
    doc = _body_json(body, "targets")
    data = doc.get("data")
    active = data.get("activeTargets") if isinstance(data, dict) else None
    if not isinstance(active, list):
        raise PromError("bad_answer", f"targets: data.activeTargets: expected a list, got {str(active)[:80]}")
    out = []
    for i, t in enumerate(active):
        if not isinstance(t, dict):
            raise PromError("bad_answer", f"targets: data.activeTargets[{i}]: expected an object")
        labels = _labels(t.get("labels", {}), f"targets: data.activeTargets[{i}]")
        out.append(Target(
            scrape_url=str(t.get("scrapeUrl", "")), labels=labels, pool=str(t.get("scrapePool", "")),
            health=str(t.get("health", "unknown")), last_error=str(t.get("lastError", "")),
            last_scrape=parse_time(str(t.get("lastScrape", ""))), interval_s=_duration_s(t.get("scrapeInterval")),
        ))
    return out


class PromClient:
    """A Prometheus server's HTTP API at ``url`` (``http://host:9090``), optionally behind a
    bearer ``token``; each request gives up after ``timeout_s``."""

    def __init__(self, url: str, *, token: str | None = None, timeout_s: float = 5.0):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s

    def _get(self, path: str, params: Mapping[str, Any] | None = None) -> bytes:
        full = self.url + path + ("?" + urllib.parse.urlencode(params) if params else "")
        shown = self.url + path
        req = urllib.request.Request(full, headers={"Accept": "application/json"})
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:  # noqa: S310 - http(s) URL from config
                return resp.read()
        except urllib.error.HTTPError as exc:
            body = exc.read() if exc.fp is not None else b""
            try:
                doc = json.loads(body)
            except ValueError:
                doc = None
            if isinstance(doc, dict) and doc.get("status") == "error":
                raise PromError(str(doc.get("errorType") or "error"), str(doc.get("error") or "no message"),
                                url=shown, status=exc.code) from None
            raise PromError("http", f"{exc.reason}: {body[:120].decode('utf-8', 'replace')!r}", url=shown,
                            status=exc.code) from None
        except (socket.timeout, TimeoutError):
            raise PromError("timeout", f"no answer within {self.timeout_s:g} s", url=shown) from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, (socket.timeout, TimeoutError)):
                raise PromError("timeout", f"no answer within {self.timeout_s:g} s", url=shown) from None
            raise PromError("unreachable", str(exc.reason), url=shown) from None
        except (OSError, http.client.HTTPException) as exc:  # a connection reset or cut mid-answer
            raise PromError("unreachable", f"{exc.__class__.__name__}: {exc}", url=shown) from None

    def _parsed(self, path: str, params: Mapping[str, Any], what: str) -> list[PromSeries]:
        body = self._get(path, params)
        try:
            return parse_query_answer(body, what)
        except PromError as exc:
            raise PromError(exc.kind, exc.message, url=self.url + path) from None

    def query(self, expr: str, at: float | None = None) -> list[PromSeries]:
        params: dict[str, Any] = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return self._parsed("/api/v1/query", params, "query")

    def query_range(self, expr: str, start: float, end: float, step_s: float) -> list[PromSeries]:
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step_s:g}"}
        return self._parsed("/api/v1/query_range", params, "query_range")

    def targets(self) -> list[Target]:
        body = self._get("/api/v1/targets", {"state": "active"})
        try:
            return parse_targets_answer(body)
        except PromError as exc:
            raise PromError(exc.kind, exc.message, url=self.url + "/api/v1/targets") from None

    def ready(self) -> bool:
        try:
            self._get("/-/ready")
            return True
        except PromError:
            return False
