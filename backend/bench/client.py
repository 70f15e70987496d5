"""The built-in load generator: what ``sglang.bench_serving`` measures, measured the same way.

It drives ``num_prompts`` requests at a fixed concurrency through one aiohttp connection pool
and streams every answer:

- ``sglang`` backend: ``POST /generate`` with ``input_ids`` (as bench_serving's ``random-ids``
  dataset) and ``max_new_tokens`` with ``ignore_eos``; each streamed chunk carries
  ``meta_info.completion_tokens``, so a chunk of several tokens (speculative decoding) is split
  evenly into per-token gaps exactly as bench_serving's native backend does.
- ``sglang-oai-chat`` backend: ``POST /v1/chat/completions`` with a prompt of ``input_len``
  words and ``max_tokens``; the token count of each chunk comes from ``usage`` when the server
  streams it per chunk (``continuous_usage_stats``), else the final ``usage`` is shared among
  the chunks in proportion to their text.

Figures (bench_serving's ``calculate_metrics``): TTFT is the time to the first chunk with
text; TPOT = (e2e - ttft) / (output tokens - 1) for requests of more than one token; ITL is
per token; e2e from sending to the last chunk; mean, median, std, p90, p95, p99 (numpy's
linear percentiles); output tok/s = total output tokens / duration and requests/s =
completed / duration, where duration runs from the first measured request to the last answer
(the warm-up request is not counted).
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import threading
import time
from collections.abc import AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # aiohttp and numpy load when a run starts: the command line's parser needs only the names here
    import aiohttp

BACKENDS = ("sglang", "sglang-oai-chat")
DATASET = "random-ids"
# Words for chat prompts: common, one token each in most tokenizers.
_WORDS = ("the of and to in is was for on that with as by at from his an be this are or it not which "
          "have one had but were all there we when been their more no out if so up what about into than "
          "them can only other time new some could these two may first then do any like my now over such "
          "our man me even most made after also did many before must through back years where much your "
          "way well down should because each just those people how too little state good very make world "
          "still own see men work long get here between both life being under never day same another know "
          "while last might us great old year off come since against go came right used take three").split()


class ClientError(Exception):
    """The load could not be offered (bad settings, or the server refused every request)."""


@dataclass(frozen=True)
class Load:
    """What to offer: ``num_prompts`` requests, ``concurrency`` at a time."""

    concurrency: int = 1
    num_prompts: int = 100
    input_len: int = 1024
    output_len: int = 512
    backend: str = "sglang"
    seed: int = 1
    warmup_requests: int = 1
    model: str | None = None  # served model name for the chat backend (default: /v1/models' first)

    def check(self) -> None:
        for name in ("concurrency", "num_prompts", "input_len", "output_len"):
            if getattr(self, name) < 1:
                raise ClientError(f"{name.replace('_', '-')} must be at least 1, got {getattr(self, name)}")
        if self.warmup_requests < 0:
            raise ClientError(f"warmup requests must be 0 or more, got {self.warmup_requests}")
        if self.backend not in BACKENDS:
            raise ClientError(f"backend {self.backend!r}: the built-in client speaks {', '.join(BACKENDS)}")


@dataclass
class Outcome:
    """One request as the client saw it (times from ``time.perf_counter``)."""

    ok: bool = False
    prompt_len: int = 0
    output_len: int = 0
    start: float = 0.0
    ttft: float = 0.0
    latency: float = 0.0
    itl: list[float] = field(default_factory=list)
    error: str = ""


@dataclass
class ClientRun:
    load: Load
    outcomes: list[Outcome]
    duration_s: float
    started_at: float  # wall clock of the first measured request
    ended_at: float

    @property
    def completed(self) -> int:
        return sum(1 for o in self.outcomes if o.ok)

    def errors(self) -> list[str]:
        return [o.error for o in self.outcomes if not o.ok]

    def summary(self) -> dict[str, Any]:
        return summarize(self.outcomes, self.duration_s)


def make_prompts(load: Load, vocab_size: int = 32000) -> list[list[int]]:
    """``num_prompts`` random token-id prompts of exactly ``input_len`` ids (bench_serving's random-ids:
    ids drawn uniformly, away from the low ids where special tokens live)."""
    rng = random.Random(load.seed)
    lo = min(1000, max(1, vocab_size // 4))
    hi = max(lo + 1, vocab_size - 1)
    return [[rng.randint(lo, hi) for _ in range(load.input_len)] for _ in range(load.num_prompts)]


def make_text_prompts(load: Load) -> list[str]:
    rng = random.Random(load.seed)
    return [" ".join(rng.choice(_WORDS) for _ in range(load.input_len)) for _ in range(load.num_prompts)]


def _stats(values: list[float], prefix: str, out: dict[str, Any]) -> None:
    import numpy as np

    v = np.asarray(values if values else [0.0], dtype=float) * 1000.0
    out[f"mean_{prefix}_ms"] = float(np.mean(v))
    out[f"median_{prefix}_ms"] = float(np.median(v))
    out[f"std_{prefix}_ms"] = float(np.std(v))
    for q in (90, 95, 99):
        out[f"p{q}_{prefix}_ms"] = float(np.percentile(v, q))


def summarize(outcomes: list[Outcome], duration_s: float) -> dict[str, Any]:
    """bench_serving's figures (same names as its JSONL keys) from the requests' outcomes."""
    ok = [o for o in outcomes if o.ok]
    dur = max(duration_s, 1e-9)
    total_in = sum(o.prompt_len for o in ok)
    total_out = sum(o.output_len for o in ok)
    tpots = [(o.latency - o.ttft) / (o.output_len - 1) for o in ok if o.output_len > 1]
    itls = [x for o in ok for x in o.itl]
    out: dict[str, Any] = {
        "duration": duration_s, "completed": len(ok), "failed": len(outcomes) - len(ok),
        "total_input_tokens": total_in, "total_output_tokens": total_out,
        "request_throughput": len(ok) / dur, "input_throughput": total_in / dur,
        "output_throughput": total_out / dur, "total_throughput": (total_in + total_out) / dur,
    }
    _stats([o.ttft for o in ok], "ttft", out)
    _stats(tpots, "tpot", out)
    _stats(itls, "itl", out)
    _stats([o.latency for o in ok], "e2e_latency", out)
    out["concurrency"] = sum(o.latency for o in ok) / dur
    return out


# --------------------------------------------------------------------------------------
# Streaming one request
# --------------------------------------------------------------------------------------
def _sse_payload(line: bytes) -> bytes | None:
    line = line.strip()
    if not line:
        return None
    if line.startswith(b"data:"):
        line = line[5:].strip()
    if line == b"[DONE]":
        return None
    return line


async def _events(session: aiohttp.ClientSession, url: str, payload: dict[str, Any],
                  out: Outcome) -> AsyncIterator[dict[str, Any]]:
    """POST ``payload`` and give its server-sent events as JSON objects.  Sets ``out.start``; an
    answer other than 200 sets ``out.error`` and gives no event; the end of the stream sets
    ``out.latency``.  (Iterate it inside ``aclosing`` so the response is let go at once.)"""
    out.start = time.perf_counter()
    async with session.post(url, json=payload) as resp:
        if resp.status != 200:
            out.error = f"HTTP {resp.status}: {(await resp.text())[:300]}"
            return
        async for raw in resp.content:
            body = _sse_payload(raw)
            if body is not None:
                yield json.loads(body)
        out.latency = time.perf_counter() - out.start


async def _generate(session: aiohttp.ClientSession, url: str, prompt: list[int], load: Load,
                    out: Outcome) -> None:
    payload = {"input_ids": prompt, "stream": True,
               "sampling_params": {"max_new_tokens": load.output_len, "ignore_eos": True, "temperature": 0.0}}
    recent, last_len = 0.0, 0
    async with aclosing(_events(session, url, payload, out)) as events:
        async for data in events:
            if not data.get("text"):
                continue
            now = time.perf_counter()
            n = int((data.get("meta_info") or {}).get("completion_tokens", last_len + 1))
            if out.ttft == 0.0:
                out.ttft = now - out.start
            else:
                new = n - last_len
                if new <= 0:
                    continue
                out.itl.extend([(now - recent) / new] * new)
            recent = now
            last_len = n
    if out.error:
        return
    out.output_len = last_len
    out.ok = True


async def _chat(session: aiohttp.ClientSession, url: str, prompt: str, load: Load, model: str,
                out: Outcome) -> None:
    payload = {"model": model, "messages": [{"role": "user", "content": prompt}], "stream": True,
               "max_tokens": load.output_len, "temperature": 0.0, "ignore_eos": True,
               "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    chunks: list[tuple[float, int, int | None]] = []  # (time, chars, completion tokens so far if told)
    total: int | None = None
    async with aclosing(_events(session, url, payload, out)) as events:
        async for data in events:
            usage = data.get("usage") or None
            told = int(usage["completion_tokens"]) if usage and "completion_tokens" in usage else None
            if told is not None:
                total = told
            if usage and usage.get("prompt_tokens"):
                out.prompt_len = int(usage["prompt_tokens"])  # the server's count of the templated prompt
            choices = data.get("choices") or []
            text = ((choices[0].get("delta") or {}).get("content") or "") if choices else ""
            if text:
                chunks.append((time.perf_counter(), len(text), told))
    if out.error:
        return
    if not chunks:
        out.error = "the stream carried no text"
        return
    counts = _chunk_tokens(chunks, total)
    out.ttft = chunks[0][0] - out.start
    for (t0, _, _), (t1, _, _), n in zip(chunks, chunks[1:], counts[1:]):
        if n > 0:
            out.itl.extend([(t1 - t0) / n] * n)
    out.output_len = sum(counts)
    out.ok = True


def _chunk_tokens(chunks: list[tuple[float, int, int | None]], total: int | None) -> list[int]:
    """Tokens of each text chunk: the difference of per-chunk usage where the server streams it,
    else ``total`` shared in proportion to the chunks' text (largest remainders), else one each."""
    if all(c[2] is not None for c in chunks):
        counts, prev = [], 0
        for _, _, told in chunks:
            counts.append(max(0, int(told) - prev))
            prev = int(told)
        return counts
    if total is None or total < len(chunks):
        return [1] * len(chunks)
    chars = sum(c[1] for c in chunks)
    # every chunk holds at least one token; the rest follows the text
    extra = total - len(chunks)
    shares = [extra * c[1] / chars for c in chunks]
    counts = [1 + math.floor(s) for s in shares]
    order = sorted(range(len(chunks)), key=lambda i: shares[i] - math.floor(shares[i]), reverse=True)
    for i in order[: total - sum(counts)]:
        counts[i] += 1
    return counts


# --------------------------------------------------------------------------------------
# The run
# --------------------------------------------------------------------------------------
async def _served_model(session: aiohttp.ClientSession, base: str) -> str:
    import aiohttp

    try:
        async with session.get(base + "/v1/models") as resp:
            if resp.status == 200:
                data = (await resp.json(content_type=None)).get("data") or []
                if data and data[0].get("id"):
                    return str(data[0]["id"])
    except (aiohttp.ClientError, ValueError, AttributeError):
        pass
    return "default"


async def run_load_async(base_url: str, load: Load, *, api_key: str | None = None,
                         progress: Callable[[int, int], None] | None = None,
                         vocab_size: int = 32000, request_timeout_s: float = 6 * 3600,
                         stop: threading.Event | None = None) -> ClientRun:
    """Offer ``load`` to the server at ``base_url``; ``progress(done, total)`` after each request.
    Setting ``stop`` (during the warm-up too) cancels the requests in flight and raises
    :class:`ClientError`."""
    load.check()
    state = {"done": 0}
    task = asyncio.ensure_future(_offer(base_url, load, api_key, progress, vocab_size, request_timeout_s, state))
    if stop is None:
        return await task

    async def watch() -> None:
        while not stop.is_set():
            await asyncio.sleep(0.1)
        task.cancel()

    watcher = asyncio.ensure_future(watch())
    try:
        return await task
    except asyncio.CancelledError:
        if not stop.is_set():
            raise
        raise ClientError(f"stopped after {state['done']} of {load.num_prompts} requests") from None
    finally:
        watcher.cancel()


async def _offer(base_url: str, load: Load, api_key: str | None, progress: Callable[[int, int], None] | None,
                 vocab_size: int, request_timeout_s: float, state: dict[str, int]) -> ClientRun:
    import aiohttp

    base = base_url.rstrip("/")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    chat = load.backend == "sglang-oai-chat"
    prompts: list[Any] = make_text_prompts(load) if chat else make_prompts(load, vocab_size)
    # One pool, as many connections as requests in flight; no proxy (trust_env off).
    connector = aiohttp.TCPConnector(limit=load.concurrency, limit_per_host=load.concurrency, ttl_dns_cache=300)
    timeout = aiohttp.ClientTimeout(total=request_timeout_s, sock_connect=30)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, headers=headers,
                                     trust_env=False) as session:
        model = (load.model or await _served_model(session, base)) if chat else ""
        url = base + ("/v1/chat/completions" if chat else "/generate")

        async def one(prompt: Any, out: Outcome) -> Outcome:
            out.prompt_len = len(prompt) if not chat else load.input_len  # chat: the server's count, if told
            try:
                if chat:
                    await _chat(session, url, prompt, load, model, out)
                else:
                    await _generate(session, url, prompt, load, out)
            except (aiohttp.ClientError, asyncio.TimeoutError, ValueError, KeyError, TypeError) as exc:
                out.ok = False
                out.error = f"{type(exc).__name__}: {exc}"
            return out

        warm = [await one(prompts[i % len(prompts)], Outcome()) for i in range(load.warmup_requests)]
        if warm and not any(o.ok for o in warm):
            raise ClientError(f"the warm-up request to {url} failed: {warm[0].error}")

        outcomes = [Outcome() for _ in prompts]
        next_i = 0

        async def worker() -> None:
            nonlocal next_i
            while next_i < len(prompts):
                i = next_i
                next_i += 1
                await one(prompts[i], outcomes[i])
                state["done"] += 1
                if progress is not None:
                    progress(state["done"], len(prompts))

        wall0 = time.time()
        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(min(load.concurrency, len(prompts)))))
        duration = time.perf_counter() - t0
    run = ClientRun(load, outcomes, duration, wall0, wall0 + duration)
    if run.completed == 0:
        raise ClientError(f"every request to {url} failed; the first: {run.errors()[0]}")
    return run


def run_load(base_url: str, load: Load, **kw: Any) -> ClientRun:
    """Blocking form of :func:`run_load_async` (its own event loop)."""
    return asyncio.run(run_load_async(base_url, load, **kw))
