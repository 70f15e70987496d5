"""The job's classification of answers, retries, request bodies and requeue, against a small
OpenAI-compatible stand-in on 127.0.0.1 that answers what each test needs (a 400 for a too-long
prompt, 5xx and 429 a few times, an aborted answer, reasoning_content), in the test's own loop."""

from __future__ import annotations

import asyncio
import json
from collections import defaultdict
from pathlib import Path

import pytest
from aiohttp import web

from backend.regen.job import Job
from backend.regen.config import JobConfig, ServerSpec
from backend.regen.output import RunFiles, requeue
from backend.regen.progress import ProgressLog
from tests.regen.jobkit import progress_lines, read_jsonl, run_cli, sibling

pytestmark = pytest.mark.timeout(120)

CONTEXT_MSG = ("This model's maximum context length is 8192 tokens. However, you requested 9000 tokens "
               "(8000 in the messages, 1000 in the completion).")


class LowJitter:
    """Backoff draws near the bottom of their range, so retries do not slow the test."""

    def uniform(self, a: float, b: float) -> float:
        return a + (b - a) * 0.01


class StandIn:
    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.seen: dict[str, int] = defaultdict(int)
        self.accept_long = False
        self.url = ""
        self.unavailable = 0  # answer this many requests (any path) with 503 first
        self.outage_at: int | None = None  # ... from this chat request on
        self.calls = 0

    async def chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.calls += 1
        if self.calls == self.outage_at:
            self.unavailable = 6
        if self.unavailable:
            self.unavailable -= 1
            return web.json_response({"error": "No available workers"}, status=503)
        self.bodies.append(body)
        last = body["messages"][-1]["content"]
        self.seen[last] += 1
        n = self.seen[last]
        if "too-long" in last and not self.accept_long:
            return web.json_response({"object": "error", "message": CONTEXT_MSG, "type": "BadRequestError",
                                      "code": 400}, status=400)
        if "flaky" in last and n <= 2:
            return web.json_response({"error": {"message": "busy"}}, status=(500 if n == 1 else 429))
        if "hang" in last:
            await asyncio.sleep(1.5)
        if "always-503" in last:
            return web.json_response({"error": "Server is not ready"}, status=503)
        finish = "abort" if "abort" in last and n == 1 else "stop"
        if "empty-answer" in last:
            last = ""
        thinking = not (body.get("chat_template_kwargs") or {}).get("enable_thinking") is False
        msg = {"role": "assistant", "content": f"answer to: {last}" if last else "",
               "reasoning_content": f"thinking about {last}" if thinking else None}
        return web.json_response({"id": "x", "object": "chat.completion", "model": body["model"],
                                  "choices": [{"index": 0, "message": msg, "finish_reason": finish}],
                                  "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})

    async def models(self, request: web.Request) -> web.Response:
        if self.unavailable:
            self.unavailable -= 1
            return web.json_response({"error": "No available workers"}, status=503)
        return web.json_response({"object": "list", "data": [{"id": "stand-in-model", "object": "model"}]})


async def _with_stand_in(stand: StandIn, fn):
    app = web.Application()
    app.router.add_post("/v1/chat/completions", stand.chat)
    app.router.add_get("/v1/models", stand.models)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    stand.url = f"http://127.0.0.1:{port}"
    try:
        return await fn()
    finally:
        await runner.cleanup()


def _rows(path: Path, rows: list[tuple[str, list[dict]]]) -> None:
    with open(path, "w") as f:
        for rid, conv in rows:
            f.write(json.dumps({"id": rid, "conversations": conv, "source": "kept"}) + "\n")


def _user(text: str) -> dict:
    return {"role": "user", "content": text}


def _run(stand: StandIn, cfg_kw: dict) -> int:
    async def go():
        cfg = JobConfig(servers=[ServerSpec(stand.url)], **cfg_kw)
        return await Job(cfg, rng=LowJitter()).run()

    return asyncio.run(_with_stand_in(stand, go))


def test_permanent_errors_transient_retries_and_the_regenerated_history(tmp_path):
    inp = tmp_path / "in.jsonl"
    _rows(inp, [
        ("ok", [_user("plain")]),
        ("long", [_user("too-long prompt")]),
        ("flaky", [_user("flaky question")]),
        ("abort", [_user("abort once")]),
        ("dead", [_user("always-503")]),
        ("multi", [{"role": "system", "content": "sys"}, _user("first"), {"role": "assistant", "content": "OLD"},
                   _user("second"), {"role": "assistant", "content": "OLD2"}]),
    ])
    out = tmp_path / "out.jsonl"
    stand = StandIn()
    code = _run(stand, {"out": out, "inputs": [str(inp)], "concurrency": 2, "max_tokens": 64,
                        "temperature": 0.0, "max_attempts": 3})
    assert code == 0
    rows = {r["id"]: r for r in read_jsonl(out)}
    assert set(rows) == {"ok", "flaky", "abort", "multi"}
    assert rows["flaky"]["regen"]["retries"] == 2 and rows["abort"]["regen"]["retries"] == 1
    assert rows["ok"]["regen"]["retries"] == 0 and rows["ok"]["source"] == "kept"
    assert rows["multi"]["conversations"] == [
        {"role": "system", "content": "sys"}, _user("first"), {"role": "assistant", "content": "answer to: first"},
        _user("second"), {"role": "assistant", "content": "answer to: second"}]
    second = [b for b in stand.bodies if b["messages"][-1]["content"] == "second"][0]
    assert second["messages"][:3] == [{"role": "system", "content": "sys"}, _user("first"),
                                      {"role": "assistant", "content": "answer to: first"}]
    assert second["model"] == "stand-in-model" and second["max_tokens"] == 64 and second["temperature"] == 0.0

    errors = {r["id"]: r for r in read_jsonl(sibling(out, "_error.jsonl"))}
    assert set(errors) == {"long", "dead"}
    assert errors["long"]["status"] == "error" and errors["long"]["regen"]["class"] == "context_length"
    assert errors["long"]["regen"]["status"] == 400 and "maximum context length is 8192" in errors["long"]["error"]
    assert stand.seen["too-long prompt"] == 1  # a permanent error is not asked again
    assert errors["dead"]["regen"]["class"] == "http_503" and errors["dead"]["error"].startswith(
        "gave up after 3 attempts: HTTP 503")
    assert stand.seen["always-503"] == 3
    snap = progress_lines(out)[-1]
    assert (snap["state"], snap["done"], snap["failed"], snap["total"]) == ("done", 4, 2, 6)
    assert snap["errors"]["context_length"]["count"] == 1 and "8192" in snap["errors"]["context_length"]["example"]
    assert snap["servers"][stand.url]["retries"] == 2 + 1 + 2  # flaky, abort, and the 503s before giving up

    # requeue: refused while a job holds the run, then every failed row asked again
    log = ProgressLog(RunFiles.of(out).progress)
    try:
        r = run_cli("requeue", str(out))
        assert r.returncode == 1 and "a job is running" in r.stderr
    finally:
        log.close()
    assert requeue(RunFiles.of(out), "context_length") == 1
    assert [r["id"] for r in read_jsonl(sibling(out, "_error.jsonl"))] == ["dead"]
    r = run_cli("requeue", str(out))
    assert r.returncode == 0 and r.stdout.startswith("1 failed rows moved back")
    assert sibling(out, "_error.jsonl").read_text() == ""
    stand2 = StandIn()
    stand2.accept_long = True
    stand2.seen["always-503"] = 0
    code = _run(stand2, {"out": out, "inputs": [str(inp)], "concurrency": 2, "max_tokens": 64, "max_attempts": 3})
    assert code == 0
    assert sorted(r["id"] for r in read_jsonl(out)) == ["abort", "flaky", "long", "multi", "ok"]
    assert [b["messages"][-1]["content"] for b in stand2.bodies].count("plain") == 0  # done rows are not asked
    snap = progress_lines(out)[-1]
    assert (snap["done"], snap["failed"]) == (5, 1)


def test_reasoning_modes_system_prompt_and_sampling_parameters(tmp_path):
    inp = tmp_path / "in.jsonl"
    _rows(inp, [("a", [_user("q-a")]), ("b", [{"role": "system", "content": "own"}, _user("q-b")])])
    stand = StandIn()
    out = tmp_path / "save.jsonl"
    assert _run(stand, {"out": out, "inputs": [str(inp)], "reasoning": "save", "system_prompt": "Be exact.",
                        "top_p": 0.9, "temperature": 0.8, "max_tokens": 32}) == 0
    rows = {r["id"]: r for r in read_jsonl(out)}
    assert rows["a"]["conversations"] == [{"role": "system", "content": "Be exact."}, _user("q-a"),
                                          {"role": "assistant", "content": "answer to: q-a",
                                           "reasoning_content": "thinking about q-a"}]
    assert rows["b"]["conversations"][0] == {"role": "system", "content": "own"}
    body = stand.bodies[0]
    assert (body["top_p"], body["temperature"], body["max_tokens"]) == (0.9, 0.8, 32)
    assert "chat_template_kwargs" not in body

    stand = StandIn()
    out = tmp_path / "disable.jsonl"
    assert _run(stand, {"out": out, "inputs": [str(inp)], "reasoning": "disable"}) == 0
    assert all(b["chat_template_kwargs"] == {"enable_thinking": False} for b in stand.bodies)
    for r in read_jsonl(out):
        assert "reasoning_content" not in r["conversations"][-1]


def test_output_keeps_to_what_specforges_validator_accepts(tmp_path):
    """System turns after the first user turn and empty turns are not asked or written; an empty
    answer is an error, not a row (SpecForge's validator rejects both)."""
    inp = tmp_path / "in.jsonl"
    _rows(inp, [("empty", [_user("empty-answer")]),
                ("mixed", [_user("x1"), {"role": "assistant", "content": "old"}, {"role": "system", "content": "late"},
                           _user("  "), _user("x2")])])
    stand = StandIn()
    out = tmp_path / "o.jsonl"
    assert _run(stand, {"out": out, "inputs": [str(inp)]}) == 0
    rows = read_jsonl(out)
    assert [r["id"] for r in rows] == ["mixed"]
    assert rows[0]["conversations"] == [_user("x1"), {"role": "assistant", "content": "answer to: x1"},
                                        _user("x2"), {"role": "assistant", "content": "answer to: x2"}]
    second = [b for b in stand.bodies if b["messages"][-1]["content"] == "x2"]
    assert [[m["role"] for m in b["messages"]] for b in second] == [["user", "assistant", "user"]]
    err = read_jsonl(sibling(out, "_error.jsonl"))
    assert [(e["id"], e["regen"]["class"]) for e in err] == [("empty", "empty_answer")]


def test_servers_are_urls_or_workspace_server_names():
    import argparse
    from types import SimpleNamespace

    from backend.cli.regen import UsageError, _server

    ws = SimpleNamespace(config=SimpleNamespace(server=[{"name": "demo-llama", "host": "0.0.0.0", "port": 30001},
                                                        {"name": "other", "port": 30002}]),
                         config_path="/ws/specdeck.toml")
    cache = {"ws": ws}
    args = argparse.Namespace()
    assert _server("demo-llama", args, cache).url == "http://127.0.0.1:30001"
    assert _server("demo-llama", args, cache).name == "demo-llama"
    assert _server("other", args, cache).url == "http://127.0.0.1:30002"
    assert _server("http://10.0.0.5:8000/v1/", args, cache).url == "http://10.0.0.5:8000"
    assert _server("router.local:30000", args, cache).url == "http://router.local:30000"
    with pytest.raises(UsageError, match=r"'nope': not a URL and not a \[\[server\]\] of /ws/specdeck.toml "
                                         r"\(known: demo-llama, other\)"):
        _server("nope", args, cache)


def test_an_answer_that_never_comes_is_a_timeout_asked_again_then_an_error(tmp_path):
    inp = tmp_path / "in.jsonl"
    _rows(inp, [("slow", [_user("hang here")]), ("fine", [_user("quick")])])
    stand = StandIn()
    out = tmp_path / "o.jsonl"
    assert _run(stand, {"out": out, "inputs": [str(inp)], "first_byte_timeout": 0.3, "max_attempts": 2}) == 0
    assert [r["id"] for r in read_jsonl(out)] == ["fine"]
    err = read_jsonl(sibling(out, "_error.jsonl"))
    assert [(e["id"], e["regen"]["class"], e["regen"]["retries"]) for e in err] == [("slow", "timeout", 1)]
    assert err[0]["error"] == "gave up after 2 attempts: no answer within the first-byte timeout (0.3 s)"
    assert stand.seen["hang here"] == 2


def test_503_while_the_probe_fails_too_is_waited_for_not_charged_to_the_row(tmp_path):
    """A router without a live worker (or SGLang starting) answers 503 everywhere: the rows wait
    for it even with max_attempts = 1; the 503 of a server whose probe passes is charged (above)."""
    inp = tmp_path / "in.jsonl"
    _rows(inp, [(f"r{i}", [_user(f"q{i}")]) for i in range(4)])
    stand = StandIn()

    async def go():
        cfg = JobConfig(out=tmp_path / "o.jsonl", servers=[ServerSpec(stand.url)], inputs=[str(inp)],
                        concurrency=1, max_attempts=1)
        job = Job(cfg, rng=LowJitter())
        stand.outage_at = 2  # the second question: 503 to it and to the next 5 requests (probes included)
        return await job.run()

    assert asyncio.run(_with_stand_in(stand, go)) == 0
    out = tmp_path / "o.jsonl"
    assert sorted(r["id"] for r in read_jsonl(out)) == ["r0", "r1", "r2", "r3"]
    assert read_jsonl(sibling(out, "_error.jsonl")) == []
    assert any(l["state"] == "waiting" and "HTTP 503" in l["message"] for l in progress_lines(out))
    assert stand.unavailable == 0 and stand.calls >= 5
