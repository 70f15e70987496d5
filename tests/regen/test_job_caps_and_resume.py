"""The job's per-server cap across several servers, and what a resume asks again and counts (never
a failed row; rows found done are not live completions), against small OpenAI-compatible
stand-ins on 127.0.0.1 run in the test's own loop."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path

import pytest
from aiohttp import web

from backend.regen.job import Job
from backend.regen.config import JobConfig, ServerSpec
from backend.regen.output import RunFiles, encode, error_record, scan, success_record
from tests.regen.jobkit import progress_lines, read_jsonl, sibling

pytestmark = pytest.mark.timeout(120)


class LowJitter:
    def uniform(self, a: float, b: float) -> float:
        return a + (b - a) * 0.01


class Answering:
    """Answers every question at once, or holds each one until ``release`` is set (``hold``);
    a question containing "too-long" gets SGLang's 400 for a prompt over the context length."""

    def __init__(self, hold: bool = False) -> None:
        self.hold = hold
        self.release = asyncio.Event()
        self.asked: Counter[str] = Counter()
        self.now = 0
        self.most = 0
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def chat(self, request: web.Request) -> web.Response:
        body = await request.json()
        q = body["messages"][-1]["content"]
        self.asked[q] += 1
        self.now += 1
        self.most = max(self.most, self.now)
        try:
            if self.hold:
                await self.release.wait()
            if "too-long" in q:
                return web.json_response({"object": "error", "message": "This model's maximum context length is "
                                          "8192 tokens.", "code": 400}, status=400)
            return web.json_response({"id": "x", "object": "chat.completion", "model": body["model"],
                                      "choices": [{"index": 0, "message": {"role": "assistant",
                                                                           "content": f"answer to: {q}"},
                                                   "finish_reason": "stop"}],
                                      "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})
        finally:
            self.now -= 1

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "stand-in", "object": "model"}]})

    async def start(self) -> "Answering":
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_get("/v1/models", self.models)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        return self

    async def stop(self) -> None:
        self.release.set()
        if self._runner is not None:
            await self._runner.cleanup()


def _rows(path: Path, questions: list[tuple[str, str]]) -> None:
    with open(path, "w") as f:
        for rid, q in questions:
            f.write(json.dumps({"id": rid, "conversations": [{"role": "user", "content": q}]}) + "\n")


def test_a_server_at_its_cap_takes_no_more_rows_while_another_has_room(tmp_path):
    """Two servers with a cap of 2 each; the first holds every question until released.  It must
    get exactly 2 rows: a third would sit in its client's queue while the other server is free."""
    inp = tmp_path / "in.jsonl"
    _rows(inp, [(f"r{i}", f"q{i}") for i in range(12)])
    out = tmp_path / "out.jsonl"
    seen_in_flight: dict[str, int] = {}

    async def go():
        slow, fast = await Answering(hold=True).start(), await Answering().start()
        try:
            cfg = JobConfig(out=out, servers=[ServerSpec(slow.url), ServerSpec(fast.url)], inputs=[str(inp)],
                            concurrency=2, max_attempts=3)
            job = Job(cfg, rng=LowJitter())
            run = asyncio.create_task(job.run())

            async def watch():
                # every row is handed out and the fast server is idle: only the held ones are left
                while True:
                    for s in job.servers:
                        seen_in_flight[s.url] = max(seen_in_flight.get(s.url, 0), s.stats.in_flight)
                    busy = {s.url: s.stats.in_flight for s in job.servers}
                    if job.exhausted and busy.get(fast.url) == 0 and not job.retry:
                        slow.release.set()
                        return
                    if run.done():
                        return
                    await asyncio.sleep(0.005)

            await asyncio.gather(run, watch())
            return run.result(), slow, fast
        finally:
            await slow.stop()
            await fast.stop()

    code, slow, fast = asyncio.run(go())
    assert code == 0
    assert sum(slow.asked.values()) == 2 and sum(fast.asked.values()) == 10
    assert slow.most == 2 and fast.most <= 2
    assert seen_in_flight[slow.url] == 2 and seen_in_flight[fast.url] <= 2
    assert sorted(r["id"] for r in read_jsonl(out)) == sorted(f"r{i}" for i in range(12))
    servers = progress_lines(out)[-1]["servers"]
    assert (servers[slow.url]["done"], servers[fast.url]["done"]) == (2, 10)


def test_one_server_never_has_more_than_its_cap_in_flight(tmp_path):
    inp = tmp_path / "in.jsonl"
    _rows(inp, [(f"r{i}", f"q{i}") for i in range(9)])
    out = tmp_path / "out.jsonl"

    async def go():
        held = await Answering(hold=True).start()
        try:
            job = Job(JobConfig(out=out, servers=[ServerSpec(held.url)], inputs=[str(inp)], concurrency=3),
                      rng=LowJitter())
            run = asyncio.create_task(job.run())
            most = 0
            while not run.done():
                if job.servers:
                    most = max(most, job.servers[0].stats.in_flight)
                if held.now == 3:  # the server holds three: the job has handed out all it may
                    held.release.set()
                await asyncio.sleep(0.005)
            return await run, most
        finally:
            await held.stop()

    code, most = asyncio.run(go())
    assert code == 0 and most == 3
    assert len(read_jsonl(out)) == 9


def test_a_resume_does_not_ask_rows_already_failed(tmp_path):
    """A run leaves one row in OUT_error.jsonl and is cut short (the rows of its last batch never
    reached the output); the resume asks the lost rows again, never the failed one."""
    inp = tmp_path / "in.jsonl"
    _rows(inp, [("ok0", "plain 0"), ("long", "too-long prompt"), ("ok1", "plain 1"), ("ok2", "plain 2"),
                ("ok3", "plain 3")])
    out = tmp_path / "out.jsonl"

    async def run_once():
        srv = await Answering().start()
        try:
            cfg = JobConfig(out=out, servers=[ServerSpec(srv.url)], inputs=[str(inp)], concurrency=2)
            return await Job(cfg, rng=LowJitter()).run(), srv
        finally:
            await srv.stop()

    code, first = asyncio.run(run_once())
    assert code == 0 and first.asked["too-long prompt"] == 1
    errors = read_jsonl(sibling(out, "_error.jsonl"))
    assert [(e["id"], e["regen"]["class"]) for e in errors] == [("long", "context_length")]
    # what a kill leaves: the last rows of the output were still in memory
    lines = out.read_bytes().splitlines(keepends=True)
    assert len(lines) == 4
    out.write_bytes(b"".join(lines[:2]))
    lost = {json.loads(line)["id"] for line in lines[2:]}

    code, again = asyncio.run(run_once())
    assert code == 0
    assert again.asked["too-long prompt"] == 0
    assert {q.replace("plain ", "ok") for q in again.asked} == lost
    assert [e["id"] for e in read_jsonl(sibling(out, "_error.jsonl"))] == ["long"]
    assert sorted(r["id"] for r in read_jsonl(out)) == ["ok0", "ok1", "ok2", "ok3"]
    snap = progress_lines(out)[-1]
    assert (snap["state"], snap["done"], snap["failed"], snap["remaining"], snap["total"]) == ("done", 4, 1, 0, 5)


def test_rows_found_done_at_a_resume_are_not_counted_in_the_live_rate(tmp_path):
    """200 rows already in the output and 1 lost: the rate after the resume is one row's, however
    quick the run, never the 200 read back (an ETA from it would be far too short)."""
    inp = tmp_path / "in.jsonl"
    _rows(inp, [(f"r{i}", f"q{i}") for i in range(201)])
    out = tmp_path / "out.jsonl"

    async def run_once():
        srv = await Answering().start()
        try:
            cfg = JobConfig(out=out, servers=[ServerSpec(srv.url)], inputs=[str(inp)], concurrency=8)
            return await Job(cfg, rng=LowJitter()).run(), srv
        finally:
            await srv.stop()

    assert asyncio.run(run_once())[0] == 0
    lines = out.read_bytes().splitlines(keepends=True)
    out.write_bytes(b"".join(lines[:-1]))
    code, srv = asyncio.run(run_once())
    assert code == 0 and sum(srv.asked.values()) == 1
    snap = progress_lines(out)[-1]
    assert (snap["state"], snap["done"], snap["total"]) == ("done", 201, 201)
    # one row completed live; the rate is over at least 1 s (and at most the 30 s window)
    assert snap["req_s"] <= 1.0 and snap["tok_s"] <= 5.0
    assert snap["servers"][srv.url]["req_s"] <= 1.0
    assert snap["completion_tokens"] == 201 * 5


def test_a_row_in_the_output_and_the_error_file_counts_as_done(tmp_path):
    """An error requeued by hand and then regenerated: the resume counts it done, not failed, and
    asks nothing."""
    files = RunFiles.of(tmp_path / "out.jsonl")
    regen = {"server": "http://s:1", "prompt_tokens": 3, "completion_tokens": 5, "finish_reason": "stop",
             "dataset": "in", "t": 1.0, "retries": 0}
    files.error.write_bytes(encode(error_record("r0", {}, "HTTP 503", {"class": "http_503", "dataset": "in"})))
    files.out.write_bytes(encode(success_record("r0", {}, [{"role": "user", "content": "q0"},
                                                          {"role": "assistant", "content": "a"}], regen)))
    ex = scan(files)
    assert set(ex.done) == {"r0"} and ex.failed == {}
    assert ex.seen("r0")

    inp = tmp_path / "in.jsonl"
    _rows(inp, [("r0", "q0")])

    async def go():
        srv = await Answering().start()
        try:
            cfg = JobConfig(out=files.out, servers=[ServerSpec(srv.url)], inputs=[str(inp)])
            return await Job(cfg, rng=LowJitter()).run(), srv
        finally:
            await srv.stop()

    code, srv = asyncio.run(go())
    assert code == 0 and sum(srv.asked.values()) == 0
    snap = progress_lines(files.out)[-1]
    assert (snap["done"], snap["failed"], snap["remaining"]) == (1, 0, 0)
