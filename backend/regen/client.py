"""OpenAI-compatible chat completions to one server (or a router in front of many).

One :class:`ServerClient` per server URL holds one aiohttp session, i.e. one keep-alive
connection pool sized to that server's concurrency cap.  :meth:`ServerClient.chat` never raises
for a failed request: it returns an :class:`Outcome` that says whether the answer can be used, is
worth asking again (``transient``: the server is away or overloaded) or never will be
(``permanent``: the server refused this request).

Classification
    success     HTTP 200 with a choice whose message has text (finish_reason ``stop``/``length``)
    transient   connection refused / reset / closed, a timeout, HTTP 5xx, HTTP 429, an answer
                the server aborted (SGLang answers ``finish_reason: "abort"`` to requests running
                while it shuts down), and a stream that ends (even with ``[DONE]``) before its
                choice (index 0: the job asks for one) has a finish_reason
    permanent   any other 4xx (``context_length`` when the message says the prompt is too long),
                a 200 whose body is not a chat completion, or a request whose text cannot be sent
                as UTF-8 (``bad_text``: asking again would not change it)

Streaming and timeouts
    A streamed request (``"stream": true`` with ``stream_options.include_usage``) has two timeouts
    that fit generation: ``first_byte_timeout`` from sending the request to the first byte of the
    answer's body (queueing and prefill), and ``chunk_timeout`` between two chunks after that, so
    a stalled server is noticed within ``chunk_timeout`` however long the answer is.  Not
    streamed, the first byte comes with the whole answer, so only ``first_byte_timeout`` applies
    (the job sizes it from max_tokens).  A server that answers a streamed request with one JSON
    body is read as such.

Speculative figures
    The job asks with ``"return_spec_tokens_details": true``: SGLang 0.5.23 then adds the request's
    ``sglext.spec_tokens_details`` at the response's level (streamed: a chunk of its own with no
    choices), whose ``spec_verify_ct`` (draft+verify steps) and ``spec_accept_length``
    (completion tokens / steps) give :attr:`Outcome.spec_verify_ct` and :attr:`Outcome.spec_tokens`.
    A ``meta_info`` in the choice (``return_meta_info``) is read too.  Servers without them (no
    speculation, older versions, other OpenAI servers, a router that drops the field) leave both None.
"""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from backend.regen.config import ServerURLError, normalize_url

__all__ = ["PERMANENT", "SUCCESS", "TRANSIENT", "Outcome", "ServerClient", "ServerURLError", "backoff",
           "classify_http", "normalize_url", "parse_completion"]

SUCCESS, TRANSIENT, PERMANENT = "success", "transient", "permanent"
_CONTEXT = re.compile(r"context length|context window|maximum context|too long|longer than|exceeds? the (max|model)"
                      r"|max_model_len|input length", re.I)
PROBE_PATHS = ("/v1/models", "/health")


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
    spec_verify_ct: int | None = None  # speculative verify steps of this answer (None: not given)
    spec_tokens: int | None = None     # the tokens those steps produced (accept_len = tokens / steps)
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


def spec_figures(obj: dict[str, Any], choice: Any = None) -> tuple[int, int] | None:
    """(tokens, verify steps) of the first choice from ``sglext.spec_tokens_details`` (a list when
    n > 1) or the choice's ``meta_info``; None when the answer has no usable figure."""
    ext = obj.get("sglext")
    det = ext.get("spec_tokens_details") if isinstance(ext, dict) else None
    if isinstance(det, list):
        det = det[0] if det else None
    if not isinstance(det, dict) and isinstance(choice, dict) and isinstance(choice.get("meta_info"), dict):
        det = choice["meta_info"]
    if not isinstance(det, dict):
        return None
    vct, alen = det.get("spec_verify_ct"), det.get("spec_accept_length")
    if isinstance(vct, bool) or not isinstance(vct, int) or vct <= 0:
        return None
    if isinstance(alen, bool) or not isinstance(alen, (int, float)) or alen < 1:
        return None
    return round(alen * vct), vct


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
    spec = spec_figures(obj, choice)
    return Outcome(SUCCESS, content=content if isinstance(content, str) else "",
                   reasoning=reasoning if isinstance(reasoning, str) else None,
                   finish_reason=finish if isinstance(finish, str) else None, status=200,
                   prompt_tokens=int(usage.get("prompt_tokens") or 0),
                   completion_tokens=int(usage.get("completion_tokens") or 0),
                   spec_tokens=spec[0] if spec else None, spec_verify_ct=spec[1] if spec else None)


class _Stream:
    """What the chunks of a streamed chat completion add up to."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.finish: str | None = None
        self.usage: dict[str, Any] = {}
        self.done = False          # [DONE] was read
        self.error: Outcome | None = None
        self.chunks = 0
        self.spec: tuple[int, int] | None = None

    def line(self, raw: bytes) -> None:
        if not raw.startswith(b"data:"):
            return  # an SSE comment, event name or blank line
        payload = raw[5:].strip()
        if payload == b"[DONE]":
            self.done = True
            return
        try:
            obj = json.loads(payload)
        except ValueError:
            text = _short(payload.decode("utf-8", "replace"))
            self.error = Outcome(PERMANENT, "bad_response", f"not a chat completion chunk: {text}", status=200)
            return
        if not isinstance(obj, dict):
            return
        if obj.get("error") is not None and not obj.get("choices"):
            err = obj["error"]
            code = err.get("code") if isinstance(err, dict) else None
            status = code if isinstance(code, int) and 400 <= code < 600 else 500
            self.error = classify_http(status, payload)
            return
        self.chunks += 1
        if isinstance(obj.get("usage"), dict):
            self.usage = obj["usage"]
        if "sglext" in obj:
            self.spec = spec_figures(obj) or self.spec
        for choice in obj.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            if "meta_info" in choice:
                self.spec = spec_figures({}, choice) or self.spec
            delta = choice.get("delta") or {}
            if isinstance(delta, dict):
                if isinstance(delta.get("content"), str):
                    self.content.append(delta["content"])
                if isinstance(delta.get("reasoning_content"), str):
                    self.reasoning.append(delta["reasoning_content"])
            if isinstance(choice.get("finish_reason"), str):
                self.finish = choice["finish_reason"]

    def outcome(self) -> Outcome:
        if self.error is not None:
            return self.error
        if self.finish == "abort":
            return Outcome(TRANSIENT, "aborted", "the server aborted the request (shutting down?)", status=200)
        if self.finish is None and not self.done:
            return Outcome(TRANSIENT, "connection", f"the answer's stream ended after {self.chunks} chunks without "
                           "a finish_reason (server stopped?)", status=200, server_down=True)
        if self.finish is None:  # [DONE] came but the choice never finished: the answer may be cut short
            return Outcome(TRANSIENT, "incomplete", f"the answer's stream ended with [DONE] after {self.chunks} "
                           "chunks but no finish_reason: it may be cut short", status=200)
        return Outcome(SUCCESS, content="".join(self.content),
                       reasoning="".join(self.reasoning) if self.reasoning else None,
                       finish_reason=self.finish, status=200,
                       prompt_tokens=int(self.usage.get("prompt_tokens") or 0),
                       completion_tokens=int(self.usage.get("completion_tokens") or 0),
                       spec_tokens=self.spec[0] if self.spec else None,
                       spec_verify_ct=self.spec[1] if self.spec else None)


class ServerClient:
    """One server: its URL, the name it was given, one connection pool."""

    def __init__(self, url: str, *, name: str | None = None, pool: int = 64, first_byte_timeout: float = 600.0,
                 chunk_timeout: float = 120.0, connect_timeout: float = 10.0, api_key: str | None = None) -> None:
        self.url = normalize_url(url)
        self.name = name
        self.pool = pool
        self.first_byte_timeout = first_byte_timeout
        self.chunk_timeout = chunk_timeout
        # the per-request timeouts are set by chat() itself (first byte, then between chunks)
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout, sock_read=None)
        self._probe_timeout = aiohttp.ClientTimeout(total=min(5.0, connect_timeout + 2))
        self._headers = {"content-type": "application/json"}
        if api_key:
            self._headers["authorization"] = f"Bearer {api_key}"
        self._session: aiohttp.ClientSession | None = None
        self.model: str | None = None
        self.answered = False  # an HTTP answer (any status) has come from this server at least once

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
        try:
            data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate: no server can read it, asking again is no use
            return Outcome(PERMANENT, "bad_text", f"the request holds text that is not valid Unicode "
                           f"({exc.reason}, U+{ord(exc.object[exc.start]):04X}); it cannot be sent as UTF-8")
        loop = asyncio.get_running_loop()
        phase = "first byte"
        stream: _Stream | None = None
        try:
            async with asyncio.timeout(self.first_byte_timeout) as deadline:
                async with self.session.post(self.url + "/v1/chat/completions", data=data) as resp:
                    self.answered = True
                    if resp.status != 200:
                        return classify_http(resp.status, await resp.read())
                    if not resp.content_type.startswith("text/event-stream"):
                        return parse_completion(await resp.read())
                    stream = _Stream()
                    tail = b""
                    async for chunk in resp.content.iter_any():
                        deadline.reschedule(loop.time() + self.chunk_timeout)
                        phase = "chunk"
                        *lines, tail = (tail + chunk).split(b"\n")
                        for line in lines:
                            stream.line(line.rstrip(b"\r"))
                        if stream.error is not None or stream.done:
                            break
                    if tail.strip():
                        stream.line(tail.rstrip(b"\r"))
                    return stream.outcome()
        except aiohttp.ServerTimeoutError as exc:  # the connection could not be made in time
            return Outcome(TRANSIENT, "connection", f"cannot connect ({exc or 'connect timeout'})"[:300],
                           server_down=True)
        except TimeoutError:
            if phase == "first byte":
                return Outcome(TRANSIENT, "timeout", f"no answer within the first-byte timeout "
                               f"({self.first_byte_timeout:g} s)")
            return Outcome(TRANSIENT, "timeout", f"the answer stalled: no chunk for {self.chunk_timeout:g} s "
                           f"(chunk timeout) after {stream.chunks if stream else 0} chunks")
        except aiohttp.ClientConnectorError as exc:
            return Outcome(TRANSIENT, "connection", _conn_reason(exc), server_down=True)
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError, aiohttp.ClientOSError,
                ConnectionResetError) as exc:
            return Outcome(TRANSIENT, "connection", f"connection lost ({type(exc).__name__}: {exc})"[:300],
                           server_down=True)
        except aiohttp.ClientError as exc:
            return Outcome(TRANSIENT, "connection", f"{type(exc).__name__}: {exc}"[:300], server_down=True)

    async def probe(self) -> tuple[bool, str]:
        """Whether the server answers (a status under 500 on /v1/models, else on /health), and why not."""
        for path in PROBE_PATHS:  # /health only where /v1/models is not served (404)
            try:
                async with self.session.get(self.url + path, timeout=self._probe_timeout) as resp:
                    self.answered = True
                    raw = await resp.read()
                    if path == "/v1/models" and resp.status == 404:
                        continue
                    if resp.status >= 500:
                        return False, f"HTTP {resp.status}"
                    if path == "/v1/models" and resp.status == 200 and self.model is None:
                        self.model = _first_model(raw)
                    return True, ""
            except asyncio.TimeoutError:
                return False, "probe timed out"
            except aiohttp.ClientConnectorError as exc:
                return False, _conn_reason(exc)
            except aiohttp.ClientError as exc:
                return False, type(exc).__name__
        return False, "HTTP 404 on /v1/models and /health"


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
