"""The HTTP client of an ``sglang-router`` (0.3.x): its workers, their health and load, and the
``/workers`` API that adds and removes them.

Plain ``urllib`` (the dashboard's environment has no sglang-router).  ``POST /workers`` answers 202
with a ``worker_id`` while the add runs in the background; ``DELETE /workers/{id}`` answers 202; a
delete while an add is pending does not cancel the add (the reconciler removes such a worker when it
shows up).  Every unexpected answer raises :class:`RouterError` naming the router, the request and
what came back.
"""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

TIMEOUT_S = 3.0


class RouterError(Exception):
    """The router did not answer, or answered something else than its API says."""


@dataclass(frozen=True)
class Worker:
    id: str
    url: str
    healthy: bool
    load: int | None  # requests the router has in flight to it (None: not reported)
    model_id: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "url": self.url, "healthy": self.healthy, "load": self.load,
                "model_id": self.model_id}


def _norm(url: str) -> str:
    return url.rstrip("/")


class RouterClient:
    def __init__(self, url: str, *, key: str | None = None, timeout_s: float = TIMEOUT_S):
        self.url = _norm(url)
        self.key = key
        self.timeout_s = timeout_s

    def _request(self, method: str, path: str, body: dict | None = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.key:
            req.add_header("Authorization", f"Bearer {self.key}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                status, raw = r.status, r.read()
        except urllib.error.HTTPError as exc:
            status, raw = exc.code, exc.read()
        except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException) as exc:
            reason = getattr(exc, "reason", exc)
            raise RouterError(f"router {self.url}: {method} {path}: no answer ({reason})") from None
        try:
            payload = json.loads(raw) if raw.strip() else None
        except ValueError:
            payload = raw.decode("utf-8", "replace")[:200]
        return status, payload

    def _expect(self, method: str, path: str, ok: tuple[int, ...], body: dict | None = None) -> Any:
        status, payload = self._request(method, path, body)
        if status in (401, 403):
            raise RouterError(f"router {self.url}: {method} {path}: HTTP {status}: the control-plane key was "
                              f"{'refused' if self.key else 'not given'} (control_plane_key_file)")
        if status not in ok:
            raise RouterError(f"router {self.url}: {method} {path}: HTTP {status}: {str(payload)[:200]}")
        return payload

    def live(self) -> bool:
        try:
            return self._request("GET", "/liveness")[0] == 200
        except RouterError:
            return False

    def workers(self) -> list[Worker]:
        payload = self._expect("GET", "/workers", (200,))
        items = payload.get("workers") if isinstance(payload, dict) else None
        if not isinstance(items, list):
            raise RouterError(f"router {self.url}: GET /workers: no 'workers' list in {str(payload)[:200]}")
        out = []
        for w in items:
            if not isinstance(w, dict) or not isinstance(w.get("url"), str):
                raise RouterError(f"router {self.url}: GET /workers: a worker without a url: {str(w)[:200]}")
            load = w.get("load")
            out.append(Worker(id=str(w.get("id") or ""), url=_norm(w["url"]), healthy=bool(w.get("is_healthy")),
                              load=int(load) if isinstance(load, (int, float)) and load >= 0 else None,
                              model_id=str(w.get("model_id") or "")))
        return out

    def add(self, url: str) -> str:
        """Queue ``url`` as a worker; its worker id."""
        payload = self._expect("POST", "/workers", (200, 201, 202), {"url": _norm(url)})
        wid = payload.get("worker_id") if isinstance(payload, dict) else None
        if not wid:
            raise RouterError(f"router {self.url}: POST /workers: no worker_id in {str(payload)[:200]}")
        return str(wid)

    def remove(self, worker_id: str) -> None:
        self._expect("DELETE", f"/workers/{worker_id}", (200, 202, 204, 404))

    def job(self, worker_id: str) -> dict[str, Any] | None:
        """``GET /workers/{id}``: the worker, or its pending add's ``job_status``; None when unknown."""
        status, payload = self._request("GET", f"/workers/{worker_id}")
        if status == 404:
            return None
        if status != 200 or not isinstance(payload, dict):
            raise RouterError(f"router {self.url}: GET /workers/{worker_id}: HTTP {status}: {str(payload)[:200]}")
        return payload


class LoadUnanswered(Exception):
    """``/get_load`` gave no answer in time (a busy server, a loaded machine): its count is unknown now."""


def live_load(server_url: str, timeout_s: float = 2.0) -> int | None:
    """A server's live count of requests running or queued: ``GET /get_load`` (``num_reqs`` summed over its
    data-parallel ranks).  None when it has no such endpoint (404, 405, 501) or answers without a count (an
    older SGLang); 0 when nothing listens there (refused: no request can be in flight); :class:`LoadUnanswered`
    when it did not answer in time, broke off or answered with another error (a busy server's 503)."""
    try:
        with urllib.request.urlopen(_norm(server_url) + "/get_load", timeout=timeout_s) as r:
            load = json.loads(r.read())
    except urllib.error.HTTPError as exc:
        if exc.code in (404, 405, 501):  # no such endpoint here
            return None
        raise LoadUnanswered(f"HTTP {exc.code}") from exc  # a busy or failing server: its count is unknown
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, ConnectionRefusedError):
            return 0
        raise LoadUnanswered(str(exc.reason)) from exc
    except ConnectionRefusedError:
        return 0
    except (OSError, http.client.HTTPException) as exc:
        raise LoadUnanswered(str(exc)) from exc
    except ValueError:
        return None
    items = load if isinstance(load, list) else [load]
    counts = [int(x["num_reqs"]) for x in items if isinstance(x, dict) and isinstance(x.get("num_reqs"), int)]
    return sum(counts) if counts else None


def gauge_in_flight(server_url: str, timeout_s: float = 2.0) -> int | None:
    """``sglang:num_running_reqs`` + ``sglang:num_queue_reqs`` from a server's ``/metrics`` (updated at each
    decode log line, so stale when idle); None when it cannot tell."""
    base = _norm(server_url)
    try:
        with urllib.request.urlopen(base + "/metrics", timeout=timeout_s) as r:
            text = r.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError, ValueError, http.client.HTTPException):
        return None
    total, seen = 0.0, False
    for line in text.splitlines():
        if line.startswith(("sglang:num_running_reqs", "sglang:num_queue_reqs")):
            try:
                total += float(line.rsplit(None, 1)[1])
                seen = True
            except (IndexError, ValueError):
                continue
    return int(total) if seen else None
