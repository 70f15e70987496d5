"""A small client of a Ray cluster's dashboard REST API (Ray 2.60), with the standard library only.

Specdeck never imports ray: it talks to the dashboard as ``ray job`` does, over HTTP.

- Jobs: ``POST /api/jobs/`` (submit), ``GET /api/jobs/{id}`` (info), ``GET /api/jobs/`` (list),
  ``GET /api/jobs/{id}/logs`` (the whole driver log), ``POST /api/jobs/{id}/stop``,
  ``DELETE /api/jobs/{id}`` (terminal jobs only).
- ``GET /api/version``; the state API's ``GET /api/v0/logs/file?node_id=..&filename=job-driver-<id>.log&lines=N``
  (the last N lines of a job's driver log) and ``GET /api/v0/nodes`` (nodes and their resources).

A token (``Authorization: Bearer``) is sent when given; Ray answers 401 without one and 403 with a
wrong one when the cluster runs with ``RAY_AUTH_MODE=token``.  Every failure is a
:class:`RayApiError` whose text names the URL, the HTTP status and Ray's own words.
"""

from __future__ import annotations

import http.client
import json
import socket
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

_MAX_BODY = 64 * 1024 * 1024  # a driver log read whole is capped here


class RayApiError(Exception):
    """The dashboard could not be reached or refused a request; ``str(e)`` is for the user."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status

    @property
    def unreachable(self) -> bool:
        return self.status is None

    @property
    def auth(self) -> bool:
        return self.status in (401, 403)


# Ray's job states and which are final.
TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})


@dataclass(frozen=True)
class JobInfo:
    """What ``GET /api/jobs/{id}`` says about one job (the fields Specdeck reads)."""

    submission_id: str
    status: str
    message: str = ""
    error_type: str | None = None
    start_time: float | None = None  # seconds (Ray gives milliseconds)
    end_time: float | None = None
    driver_exit_code: int | None = None
    driver_node_id: str | None = None
    driver_agent_http_address: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    entrypoint: str = ""

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    @property
    def node_host(self) -> str | None:
        """The driver's node address (the host of ``driver_agent_http_address``)."""
        addr = self.driver_agent_http_address
        if not addr:
            return None
        host = urllib.parse.urlsplit(addr if "://" in addr else f"http://{addr}").hostname
        return host or None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "JobInfo":
        def secs(v: Any) -> float | None:
            return float(v) / 1000.0 if isinstance(v, (int, float)) and v > 0 else None

        code = d.get("driver_exit_code")
        return cls(
            submission_id=str(d.get("submission_id") or d.get("job_id") or ""),
            status=str(d.get("status") or "UNKNOWN"),
            message=str(d.get("message") or ""),
            error_type=d.get("error_type") or None,
            start_time=secs(d.get("start_time")),
            end_time=secs(d.get("end_time")),
            driver_exit_code=int(code) if isinstance(code, int) else None,
            driver_node_id=d.get("driver_node_id") or None,
            driver_agent_http_address=d.get("driver_agent_http_address") or None,
            metadata={str(k): str(v) for k, v in (d.get("metadata") or {}).items()},
            entrypoint=str(d.get("entrypoint") or ""),
        )


class RayJobsClient:
    """``RayJobsClient("http://127.0.0.1:8265", token="...")``: one cluster's dashboard."""

    def __init__(self, address: str, token: str | None = None, timeout_s: float = 10.0):
        self.address = address.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s

    # -- plumbing ------------------------------------------------------------

    def _request(self, method: str, path: str, body: Any = None, *, timeout_s: float | None = None,
                 raw: bool = False) -> Any:
        url = self.address + path
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout_s or self.timeout_s) as resp:
                payload = resp.read(_MAX_BODY + 1)
        except urllib.error.HTTPError as exc:
            text = _short(exc.read(4096).decode("utf-8", "replace"))
            hint = ""
            if exc.code == 401:
                hint = " (the cluster wants a token: set [cluster] token_file)"
            elif exc.code == 403:
                hint = " (the cluster refused the token in [cluster] token_file)"
            raise RayApiError(f"{method} {url}: HTTP {exc.code}{hint}: {text}", exc.code) from None
        except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError, OSError,
                http.client.HTTPException) as exc:
            reason = getattr(exc, "reason", exc)
            raise RayApiError(f"{method} {url}: the Ray dashboard does not answer: {reason}") from None
        if len(payload) > _MAX_BODY:
            raise RayApiError(f"{method} {url}: the answer is larger than {_MAX_BODY} bytes", 200)
        if raw:
            return payload
        try:
            return json.loads(payload) if payload.strip() else None
        except json.JSONDecodeError as exc:
            raise RayApiError(f"{method} {url}: the answer is not JSON ({exc}): {_short(payload.decode('utf-8', 'replace'))}",
                              200) from None

    # -- the API -------------------------------------------------------------

    def version(self) -> dict[str, Any]:
        d = self._request("GET", "/api/version")
        if not isinstance(d, dict) or "ray_version" not in d:
            raise RayApiError(f"GET {self.address}/api/version: not a Ray dashboard's answer: {_short(str(d))}", 200)
        return d

    def submit(self, submission_id: str, entrypoint: str, *, env_vars: dict[str, str] | None = None,
               metadata: dict[str, str] | None = None, num_gpus: float = 0.0, num_cpus: float = 0.0,
               resources: dict[str, float] | None = None) -> str:
        """Submit a job under ``submission_id``; returns it.  Ray answers a duplicate id with HTTP 500:
        that is reported as such (the caller picks a fresh id per run)."""
        body: dict[str, Any] = {
            "entrypoint": entrypoint,
            "submission_id": submission_id,
            "runtime_env": {"env_vars": dict(env_vars or {})},
            "metadata": dict(metadata or {}),
        }
        if num_gpus:
            body["entrypoint_num_gpus"] = num_gpus
        if num_cpus:
            body["entrypoint_num_cpus"] = num_cpus
        if resources:
            body["entrypoint_resources"] = dict(resources)
        d = self._request("POST", "/api/jobs/", body)
        if not isinstance(d, dict) or not d.get("submission_id"):
            raise RayApiError(f"POST {self.address}/api/jobs/: no submission_id in the answer: {_short(str(d))}", 200)
        return str(d["submission_id"])

    def info(self, submission_id: str) -> JobInfo | None:
        """The job, or None when the cluster does not know it (HTTP 404)."""
        try:
            d = self._request("GET", f"/api/jobs/{urllib.parse.quote(submission_id, safe='')}")
        except RayApiError as exc:
            if exc.status == 404:
                return None
            raise
        if not isinstance(d, dict):
            raise RayApiError(f"GET {self.address}/api/jobs/{submission_id}: not a job: {_short(str(d))}", 200)
        return JobInfo.from_json(d)

    def jobs(self) -> list[JobInfo]:
        d = self._request("GET", "/api/jobs/")
        if not isinstance(d, list):
            raise RayApiError(f"GET {self.address}/api/jobs/: not a list of jobs: {_short(str(d))}", 200)
        return [JobInfo.from_json(j) for j in d if isinstance(j, dict)]

    def logs(self, submission_id: str) -> str:
        """The job's whole driver log so far."""
        d = self._request("GET", f"/api/jobs/{urllib.parse.quote(submission_id, safe='')}/logs")
        if not isinstance(d, dict):
            raise RayApiError(f"GET {self.address}/api/jobs/{submission_id}/logs: no logs in the answer", 200)
        return str(d.get("logs") or "")

    def log_tail(self, submission_id: str, lines: int, node_id: str) -> str:
        """The last ``lines`` lines of the job's driver log (``job-driver-<id>.log`` on the driver's node
        ``node_id``), through the state API.  (Its ``submission_id=`` form answers HTTP 500 in Ray 2.60.)"""
        q = urllib.parse.urlencode({"node_id": node_id, "filename": f"job-driver-{submission_id}.log",
                                    "lines": int(lines)})
        data = self._request("GET", f"/api/v0/logs/file?{q}", raw=True)
        return data.decode("utf-8", "replace")

    def stop(self, submission_id: str) -> bool:
        d = self._request("POST", f"/api/jobs/{urllib.parse.quote(submission_id, safe='')}/stop")
        return bool(isinstance(d, dict) and d.get("stopped"))

    def delete(self, submission_id: str) -> bool:
        d = self._request("DELETE", f"/api/jobs/{urllib.parse.quote(submission_id, safe='')}")
        return bool(isinstance(d, dict) and d.get("deleted"))

    def usage_by_node(self) -> list[dict[str, tuple[float, float]]]:
        """Each node's resources as {name: (used, total)}, from the autoscaler's report
        (``/api/cluster_status``; the dashboard writes resource names in camelCase)."""
        d = self._request("GET", "/api/cluster_status")
        try:
            by_node = d["data"]["clusterStatus"]["loadMetricsReport"]["usageByNode"] or {}
        except (KeyError, TypeError):
            raise RayApiError(f"GET {self.address}/api/cluster_status: no usageByNode in the answer", 200) from None
        out = []
        for usage in by_node.values():
            if isinstance(usage, dict):
                out.append({str(k): (float(v[0]), float(v[1])) for k, v in usage.items()
                            if isinstance(v, list) and len(v) == 2})
        return out

    def nodes(self) -> list[dict[str, Any]]:
        """Each node: id, address, alive, resources_total (the state API's ``/api/v0/nodes``)."""
        d = self._request("GET", "/api/v0/nodes?limit=1000&detail=1")
        result = (d or {}).get("data", {}).get("result", {}) if isinstance(d, dict) else {}
        rows = result.get("result", []) if isinstance(result, dict) else result
        out = []
        for n in rows or []:
            if not isinstance(n, dict):
                continue
            out.append({
                "node_id": n.get("node_id"),
                "address": n.get("node_ip"),
                "alive": n.get("state") == "ALIVE",
                "head": bool(n.get("is_head_node")),
                "resources": {str(k): float(v) for k, v in (n.get("resources_total") or {}).items()
                              if isinstance(v, (int, float))},
            })
        return out


def _short(text: str, n: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


__all__ = ["JobInfo", "RayApiError", "RayJobsClient", "TERMINAL"]
