"""OpenAI-compatible chat completions to one server (or a router in front of many).

One :class:`ServerClient` per server URL holds one aiohttp session, i.e. one keep-alive
connection pool sized to that server's concurrency cap.  :meth:`ServerClient.chat` never raises
for a failed request: it returns an :class:`Outcome` that says whether the answer can be used, is
worth asking again (``transient``: the server is away or overloaded) or never will be
(``permanent``: the server refused this request).

Classification
    success     HTTP 200 with a choice whose message has text (finish_reason ``stop``/``length``)
    transient   connection refused / reset / closed, a timeout, HTTP 5xx, HTTP 429, and an answer
                the server aborted (SGLang answers ``finish_reason: "abort"`` to requests running
                while it shuts down)
    permanent   any other 4xx (``context_length`` when the message says the prompt is too long),
                or a 200 whose body is not a chat completion
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import aiohttp

SUCCESS, TRANSIENT, PERMANENT = "success", "transient", "permanent"
_CONTEXT = re.compile(r"context length|context window|maximum context|too long|longer than|exceeds? the (max|model)"
                      r"|max_model_len|input length", re.I)
PROBE_PATHS = ("/v1/models", "/health")


class ServerURLError(ValueError):
    """A server address that is not http(s)://host:port."""


def normalize_url(url: str) -> str:
    """``http://host:port`` without a trailing slash or ``/v1``; a bare ``host:port`` gets http://."""
    u = url.strip()
    if "://" not in u:
        u = "http://" + u
    parts = urlsplit(u)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ServerURLError(f"{url!r}: not a server address (use http://host:port)")
    try:
        parts.port
    except ValueError as exc:
        raise ServerURLError(f"{url!r}: {exc}") from None
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[:-3]
    return f"{parts.scheme}://{parts.netloc}{path}"


@dataclass
class Outcome:
    kind: str                      # SUCCESS | TRANSIENT | PERMANENT
    error_class: str | None = None  # e.g. "connection", "timeout", "http_503", "context_length"
    message: str = ""
    status: int | None = None       # the HTTP status when there was one
    content: str = ""
    reasoning: str | None = None
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    server_down: bool = False       # the server did not answer at all (connection-level failure)
    extra: dict[str, Any] = field(default_factory=dict)


def _short(text: str, n: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _error_text(body: bytes) -> str:
    try:
        obj = json.loads(body)
    except ValueError:
        return _short(body.decode("utf-8", "replace"))
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            return _short(str(err.get("message") or err.get("detail") or err))
        if isinstance(obj.get("message"), str):
            return _short(obj["message"])
        return _short(str(err))
    return _short(str(obj))


def classify_http(status: int, body: bytes) -> Outcome:
    """The outcome of a non-200 answer."""
    msg = _error_text(body)
    if status == 429 or status >= 500:
        return Outcome(TRANSIENT, f"http_{status}", f"HTTP {status}: {msg}", status=status)
    if 400 <= status < 500 and _CONTEXT.search(msg):
        return Outcome(PERMANENT, "context_length", f"HTTP {status}: {msg}", status=status)
    return Outcome(PERMANENT, f"http_{status}", f"HTTP {status}: {msg}", status=status)


def parse_completion(body: bytes) -> Outcome:
    """The outcome of a 200 answer."""
    try:
        obj = json.loads(body)
        choice = obj["choices"][0]
        message = choice["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        return Outcome(PERMANENT, "bad_response", f"not a chat completion: {_short(body.decode('utf-8', 'replace'))}",
                       status=200)
    finish = choice.get("finish_reason")
    if finish == "abort":
        return Outcome(TRANSIENT, "aborted", "the server aborted the request (shutting down?)", status=200)
    content = message.get("content")
    reasoning = message.get("reasoning_content")
    usage = obj.get("usage") or {}
    return Outcome(SUCCESS, content=content if isinstance(content, str) else "",
                   reasoning=reasoning if isinstance(reasoning, str) else None,
                   finish_reason=finish if isinstance(finish, str) else None, status=200,
                   prompt_tokens=int(usage.get("prompt_tokens") or 0),
                   completion_tokens=int(usage.get("completion_tokens") or 0))


class ServerClient:
    """One server: its URL, the name it was given, one connection pool."""

    def __init__(self, url: str, *, name: str | None = None, pool: int = 64, request_timeout: float = 3600.0,
                 connect_timeout: float = 10.0, api_key: str | None = None) -> None:
        self.url = normalize_url(url)
        self.name = name
        self.pool = pool
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout, sock_read=request_timeout)
        self._probe_timeout = aiohttp.ClientTimeout(total=min(5.0, connect_timeout + 2))
        self._headers = {"content-type": "application/json"}
        if api_key:
            self._headers["authorization"] = f"Bearer {api_key}"
        self._session: aiohttp.ClientSession | None = None
        self.model: str | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            conn = aiohttp.TCPConnector(limit=self.pool, limit_per_host=self.pool, ttl_dns_cache=300,
                                        enable_cleanup_closed=True)
            self._session = aiohttp.ClientSession(connector=conn, timeout=self._timeout, headers=self._headers,
                                                  json_serialize=json.dumps, skip_auto_headers=("User-Agent",))
        return self._session

    async def close(self) -> None:
        if self._session is not None and not self._session.closed:
            await self._session.close()

    async def chat(self, body: dict[str, Any]) -> Outcome:
        data = json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")
        try:
            async with self.session.post(self.url + "/v1/chat/completions", data=data) as resp:
                raw = await resp.read()
                if resp.status != 200:
                    return classify_http(resp.status, raw)
                return parse_completion(raw)
        except asyncio.TimeoutError:
            return Outcome(TRANSIENT, "timeout", "no answer within the request timeout")
        except aiohttp.ClientConnectorError as exc:
            return Outcome(TRANSIENT, "connection", _conn_reason(exc), server_down=True)
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, aiohttp.ClientOSError,
                ConnectionResetError) as exc:
            return Outcome(TRANSIENT, "connection", f"connection lost ({type(exc).__name__}: {exc})"[:300],
                           server_down=True)
        except aiohttp.ClientError as exc:
            return Outcome(TRANSIENT, "connection", f"{type(exc).__name__}: {exc}"[:300], server_down=True)

    async def probe(self) -> tuple[bool, str]:
        """Whether the server answers HTTP (any status under 500 on /v1/models or /health), and why not."""
        why = "no answer"
        for path in PROBE_PATHS:
            try:
                async with self.session.get(self.url + path, timeout=self._probe_timeout) as resp:
                    raw = await resp.read()
                    if resp.status < 500:
                        if path == "/v1/models" and resp.status == 200 and self.model is None:
                            self.model = _first_model(raw)
                        if path == "/v1/models" and resp.status == 404:
                            continue
                        return True, ""
                    why = f"HTTP {resp.status}"
            except asyncio.TimeoutError:
                why = "probe timed out"
            except aiohttp.ClientConnectorError as exc:
                return False, _conn_reason(exc)
            except aiohttp.ClientError as exc:
                why = f"{type(exc).__name__}"
        return False, why


def _conn_reason(exc: aiohttp.ClientConnectorError) -> str:
    err = exc.os_error
    if isinstance(err, ConnectionRefusedError):
        return "connection refused"
    text = str(err.strerror if getattr(err, "strerror", None) else err)
    return _short(text.lower() or "cannot connect", 120)


def _first_model(raw: bytes) -> str | None:
    try:
        data = json.loads(raw).get("data") or []
        mid = data[0].get("id")
        return mid if isinstance(mid, str) and mid else None
    except (ValueError, AttributeError, IndexError, TypeError):
        return None


def backoff(attempt: int, rng, *, base: float = 0.5, cap: float = 30.0) -> float:
    """Exponential backoff with full jitter: uniform in [0, min(cap, base * 2**attempt)]."""
    return rng.uniform(0.0, min(cap, base * (2 ** min(attempt, 30))))
