"""The job against a streaming OpenAI-compatible stand-in on 127.0.0.1 (in the test's own loop):
answers read chunk by chunk with a first-byte and a between-chunks timeout, text that is not
valid Unicode (in a prompt, in an answer), OpenAI's developer role and content parts, identical
rows without ids, and servers that never answer at start."""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from pathlib import Path

import pytest
from aiohttp import web

from backend.regen.client import PERMANENT, ServerClient
from backend.regen.config import JobConfig, ServerSpec
from backend.regen.job import EXIT_FAILED, EXIT_STOPPED, Job
from backend.regen.output import RunFiles, validate
from tests.helpers import free_port
from tests.regen.jobkit import progress_lines, read_jsonl, sibling

pytestmark = pytest.mark.timeout(60)

LONE = "\ud800"


class LowJitter:
    def uniform(self, a: float, b: float) -> float:
        return a + (b - a) * 0.01


class Streamer:
    """Streams ``answer to: <last user text>`` in three chunks, then a finish chunk, usage, [DONE];
    what a request's last user text holds changes that (see chat())."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.seen: dict[str, int] = defaultdict(int)
        self.all_503 = False
        self.url = ""

    async def chat(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        raw.decode("utf-8")  # a request that is not UTF-8 fails the test here
        body = json.loads(raw)
        if self.all_503:
            return web.json_response({"error": "No available workers"}, status=503)
        self.bodies.append(body)
        last = body["messages"][-1]["content"]
        self.seen[last] += 1
        n = self.seen[last]
        if "slow-first-byte" in last:
            await asyncio.sleep(2.0)
        resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await resp.prepare(request)

        async def send(obj) -> None:
            await resp.write(b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n")

        def chunk(delta=None, finish=None, usage=None) -> dict:
            choices = [] if delta is None and finish is None else [
                {"index": 0, "delta": delta or {}, "finish_reason": finish}]
            return {"id": "c", "object": "chat.completion.chunk", "choices": choices, "usage": usage}

        if "error-chunk" in last:
            await send({"error": {"message": "This model's maximum context length is 8192 tokens", "code": 400}})
            return resp
        answer = f"answer to: {last}" + (f" {LONE}" if "surrogate-answer" in last else "")
        await send(chunk({"role": "assistant", "content": ""}))
        thirds = [answer[: len(answer) // 3], answer[len(answer) // 3: 2 * len(answer) // 3],
                  answer[2 * len(answer) // 3:]]
        for i, piece in enumerate(thirds):
            await send(chunk({"content": piece}))
            if i == 0 and ("stall-always" in last or ("stall-once" in last and n == 1)):
                await asyncio.sleep(3.0)  # longer than the test's chunk timeout
        if not ("no-finish-always" in last or ("no-finish-once" in last and n == 1)):
            await send(chunk({}, finish="stop"))
        if (body.get("stream_options") or {}).get("include_usage"):
            await send(chunk(usage={"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}))
        await send(b"[DONE]")
        return resp

    async def models(self, request: web.Request) -> web.Response:
        if self.all_503:
            return web.json_response({"error": "No available workers"}, status=503)
        return web.json_response({"object": "list", "data": [{"id": "stand-in", "object": "model"}]})


async def _serve(stand: Streamer, fn):
    app = web.Application()
    app.router.add_post("/v1/chat/completions", stand.chat)
    app.router.add_get("/v1/models", stand.models)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    stand.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
    try:
        return await fn()
    finally:
        await runner.cleanup()


def _write(path: Path, records: list) -> None:
    with open(path, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")  # ensure_ascii: a lone surrogate is the escape \ud800


def _user(text) -> dict:
    return {"role": "user", "content": text}


def _run(stand: Streamer, **kw) -> int:
    async def go():
        return await Job(JobConfig(servers=[ServerSpec(stand.url)], stream=True, **kw), rng=LowJitter()).run()

    return asyncio.run(_serve(stand, go))


def test_streamed_answers_unicode_openai_shapes_and_identical_rows(tmp_path):
    inp = tmp_path / "in.jsonl"
    _write(inp, [
        {"id": "plain", "conversations": [_user("hello")]},
        {"id": "bad-prompt", "conversations": [_user(f"broken{LONE}text")]},
        {"id": "bad-answer", "conversations": [_user("surrogate-answer please")]},
        {"id": "openai", "messages": [{"role": "developer", "content": "Be brief."},
                                      {"role": "user", "content": [{"type": "text", "text": "part one"},
                                                                   {"type": "text", "text": "part two"}]}]},
        {"prompt": "the same prompt"}, {"prompt": "the same prompt"}, {"prompt": "the same prompt"},
    ])
    stand = Streamer()
    out = tmp_path / "o.jsonl"
    assert _run(stand, out=out, inputs=[str(inp)], concurrency=2) == 0

    raw = out.read_bytes()
    raw.decode("utf-8")
    rows = {r["id"]: r for r in read_jsonl(out)}
    same = sorted(i for i in rows if i.startswith("h-"))
    assert len(same) == 3 and same[1:] == [same[0] + "-2", same[0] + "-3"]
    assert set(rows) == {"plain", "bad-answer", "openai", *same}
    assert rows["plain"]["conversations"] == [_user("hello"), {"role": "assistant", "content": "answer to: hello"}]
    assert rows["plain"]["regen"]["completion_tokens"] == 7 and rows["plain"]["regen"]["prompt_tokens"] == 11
    assert rows["bad-answer"]["conversations"][1]["content"] == "answer to: surrogate-answer please \ufffd"
    assert rows["bad-answer"]["regen"]["replaced_chars"] == 1
    assert rows["openai"]["conversations"][:2] == [{"role": "system", "content": "Be brief."},
                                                   _user("part one\npart two")]

    skipped = read_jsonl(sibling(out, "_skipped.jsonl"))
    assert len(skipped) == 1 and skipped[0]["id"] == "bad-prompt"
    want = "in.jsonl:2: conversations[0].content: a lone surrogate U+D800 at character 7"
    assert skipped[0]["error"].startswith(want) and skipped[0]["reason"] == skipped[0]["error"]
    assert skipped[0]["conversations"][0]["content"] == "broken\ufffdtext"
    sibling(out, "_skipped.jsonl").read_bytes().decode("utf-8")
    assert not any("broken" in b["messages"][-1]["content"] for b in stand.bodies)  # never sent, never retried

    assert all(b["stream"] is True and b["stream_options"] == {"include_usage": True} for b in stand.bodies)
    assert stand.bodies[[b["messages"][-1]["content"] for b in stand.bodies].index("part one\npart two")][
        "messages"][0] == {"role": "system", "content": "Be brief."}
    last = progress_lines(out)[-1]
    assert (last["state"], last["done"], last["skipped"], last["failed"]) == ("done", 6, 1, 0)
    assert last["replaced_chars"] == 2  # the answer's and the skipped row's copy of the prompt
    assert "2 repeated row(s) without an id asked" in last["message"]
    assert any("2 row(s) without an id have the same turns" in (p.get("message") or "") for p in progress_lines(out))
    assert validate(RunFiles.of(out)).ok


def test_a_stalled_stream_and_a_slow_first_byte_are_timeouts_noticed_in_their_windows(tmp_path):
    inp = tmp_path / "in.jsonl"
    _write(inp, [{"id": "once", "conversations": [_user("stall-once")]},
                 {"id": "always", "conversations": [_user("stall-always")]},
                 {"id": "first", "conversations": [_user("slow-first-byte")]},
                 {"id": "err", "conversations": [_user("error-chunk")]},
                 {"id": "ok", "conversations": [_user("fine")]}])
    stand = Streamer()
    out = tmp_path / "o.jsonl"
    t0 = time.monotonic()
    assert _run(stand, out=out, inputs=[str(inp)], first_byte_timeout=0.5, chunk_timeout=0.3, max_attempts=2) == 0
    assert time.monotonic() - t0 < 15
    rows = {r["id"]: r for r in read_jsonl(out)}
    assert set(rows) == {"once", "ok"} and rows["once"]["regen"]["retries"] == 1
    errs = {e["id"]: e for e in read_jsonl(sibling(out, "_error.jsonl"))}
    assert errs["always"]["error"] == ("gave up after 2 attempts: the answer stalled: no chunk for 0.3 s "
                                       "(chunk timeout) after 2 chunks")
    assert errs["first"]["error"] == "gave up after 2 attempts: no answer within the first-byte timeout (0.5 s)"
    assert errs["err"]["regen"]["class"] == "context_length" and stand.seen["error-chunk"] == 1


def test_a_stream_that_ends_with_done_but_no_finish_reason_is_asked_again_never_kept(tmp_path):
    """[DONE] without a finish_reason on any choice: the text may be cut short (a server stopping
    between chunks), so it is asked again, and after max_attempts it is an error, never a kept row."""
    inp = tmp_path / "in.jsonl"
    _write(inp, [{"id": "once", "conversations": [_user("no-finish-once")]},
                 {"id": "always", "conversations": [_user("no-finish-always")]},
                 {"id": "ok", "conversations": [_user("fine")]}])
    stand = Streamer()
    out = tmp_path / "o.jsonl"
    assert _run(stand, out=out, inputs=[str(inp)], max_attempts=2) == 0
    rows = {r["id"]: r for r in read_jsonl(out)}
    assert set(rows) == {"once", "ok"}
    assert rows["once"]["regen"]["retries"] == 1 and rows["once"]["regen"]["finish_reason"] == "stop"
    assert rows["once"]["conversations"][-1]["content"] == "answer to: no-finish-once"
    errs = {e["id"]: e for e in read_jsonl(sibling(out, "_error.jsonl"))}
    assert set(errs) == {"always"} and stand.seen["no-finish-always"] == 2
    assert errs["always"]["regen"]["class"] == "incomplete"
    assert errs["always"]["error"] == ("gave up after 2 attempts: the answer's stream ended with [DONE] after 5 "
                                       "chunks but no finish_reason: it may be cut short")


def test_default_timeouts_fit_generation():
    cfg = JobConfig(out="o.jsonl", servers=[], max_tokens=4096)
    assert cfg.first_byte_s == 600 + 409.6  # a whole answer: 4,096 tokens at 10 tok/s on top of queueing
    cfg.max_tokens = 98304
    assert cfg.first_byte_s == 600 + 9830.4
    cfg.stream = True
    assert (cfg.first_byte_s, cfg.chunk_timeout, cfg.startup_timeout) == (600, 120, 300)
    cfg.first_byte_timeout = 30
    assert cfg.first_byte_s == 30


def test_a_request_that_cannot_be_sent_as_utf8_is_permanent_and_never_sent():
    stand = Streamer()

    async def go():
        client = ServerClient(stand.url)
        try:
            return await client.chat({"model": "m", "messages": [_user(f"x{LONE}")], "stream": True})
        finally:
            await client.close()

    out = asyncio.run(_serve(stand, go))
    assert (out.kind, out.error_class) == (PERMANENT, "bad_text") and "U+D800" in out.message
    assert stand.bodies == []


def test_servers_that_never_answer_end_the_run_after_the_startup_window(tmp_path):
    inp = tmp_path / "in.jsonl"
    _write(inp, [{"id": "a", "prompt": "q"}])
    out = tmp_path / "o.jsonl"
    refused = f"http://127.0.0.1:{free_port()}"
    unknown = "http://no-such-host.invalid:30000"
    cfg = JobConfig(out=out, servers=[ServerSpec(refused), ServerSpec(unknown)], inputs=[str(inp)],
                    startup_timeout=0.5)
    t0 = time.monotonic()
    assert asyncio.run(asyncio.wait_for(Job(cfg, rng=LowJitter()).run(), 20)) == EXIT_FAILED
    assert time.monotonic() - t0 < 10
    last = progress_lines(out)[-1]
    assert last["state"] == "failed" and last["message"].startswith("no server answered within 0.5 s of start: ")
    assert f"{refused}: connection refused" in last["message"] and f"{unknown}: " in last["message"]
    assert read_jsonl(out) == [] and last["remaining"] == 1


def test_a_server_that_answers_503_is_there_and_is_waited_for_past_the_window(tmp_path):
    """A router without a live worker answers: the run waits for it (and stops on request)."""
    inp = tmp_path / "in.jsonl"
    _write(inp, [{"id": "a", "prompt": "q"}])
    out = tmp_path / "o.jsonl"
    stand = Streamer()
    stand.all_503 = True

    async def go():
        job = Job(JobConfig(out=out, servers=[ServerSpec(stand.url)], inputs=[str(inp)], startup_timeout=0.3),
                  rng=LowJitter())
        task = asyncio.create_task(job.run())
        await asyncio.sleep(1.5)
        assert not task.done() and job.stats.state == "waiting"
        job.request_stop("test")
        return await task

    assert asyncio.run(_serve(stand, go)) == EXIT_STOPPED
