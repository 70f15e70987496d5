"""Asking one row's turns (backend.regen.turns), in process against a scripted client."""

from __future__ import annotations

import asyncio

from backend.regen.client import PERMANENT, SUCCESS, TRANSIENT, Outcome
from backend.regen.config import JobConfig, ServerSpec
from backend.regen.records import Message, Row
from backend.regen.turns import Task, ask_turns, request_body


class Scripted:
    """Answers each chat with the next outcome; records the bodies it was sent."""

    def __init__(self, *outcomes: Outcome, probe: tuple[bool, str] = (True, "ok"), model: str | None = "m1"):
        self.outcomes = list(outcomes)
        self.sent: list[dict] = []
        self.probes = 0
        self.probe_answer = probe
        self.model = model

    async def chat(self, body):
        self.sent.append(body)
        return self.outcomes.pop(0)

    async def probe(self):
        self.probes += 1
        return self.probe_answer


def ok(text: str, **kw) -> Outcome:
    return Outcome(SUCCESS, content=text, finish_reason="stop", prompt_tokens=3, completion_tokens=5, **kw)


def row(*turns: tuple[str, str]) -> Row:
    return Row(id="r1", dataset="d", messages=tuple(Message(r, c) for r, c in turns), record={})


def cfg(**kw) -> JobConfig:
    return JobConfig(out="/tmp/unused.jsonl", servers=[ServerSpec("http://127.0.0.1:9")], inputs=["x"], **kw)


def test_turns_are_asked_in_order_with_the_regenerated_history():
    task = Task(row(("system", "be brief"), ("user", "q1"), ("assistant", "old"), ("system", "late"),
                    ("user", " "), ("user", "q2")))
    client = Scripted(ok("a1", spec_tokens=8, spec_verify_ct=4), ok("a2"))
    assert asyncio.run(ask_turns(task, client, cfg())) is None
    assert [b["messages"] for b in client.sent] == [
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "q1"}],
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "q1"},
         {"role": "assistant", "content": "a1"}, {"role": "user", "content": "q2"}]]
    assert task.history[-1] == {"role": "assistant", "content": "a2"}
    assert (task.prompt_tokens, task.completion_tokens, task.spec_tokens, task.spec_verify_ct) == (6, 10, 8, 4)
    assert client.sent[0]["model"] == "m1"


def test_a_failed_turn_leaves_the_task_at_that_turn_and_a_gateway_answer_is_probed():
    task = Task(row(("user", "q1"), ("user", "q2")))
    gateway = Outcome(TRANSIENT, "http_503", "503 no worker", status=503)
    client = Scripted(ok("a1"), gateway, probe=(False, "connection refused"))
    out = asyncio.run(ask_turns(task, client, cfg()))
    assert out is gateway and out.server_down and out.message.endswith("probe: connection refused")
    assert task.pos == 1 and client.probes == 1
    client.outcomes.append(ok("a2"))
    assert asyncio.run(ask_turns(task, client, cfg())) is None
    assert client.sent[-1]["messages"][-1] == {"role": "user", "content": "q2"} and task.pos == 2


def test_an_empty_answer_and_the_reasoning_contracts_are_permanent():
    for config, answer, cls in [(cfg(), ok("  "), "empty_answer"),
                                (cfg(reasoning="disable"), ok("<think>x</think> y"), "reasoning_contract"),
                                (cfg(reasoning="save"), ok("y"), "reasoning_contract")]:
        out = asyncio.run(ask_turns(Task(row(("user", "q"))), Scripted(answer), config))
        assert (out.kind, out.error_class) == (PERMANENT, cls)


def test_the_request_body_follows_the_config():
    body = request_body(cfg(stream=True, top_p=0.9, reasoning="disable", system_prompt="s"), "m", [])
    assert body["stream_options"] == {"include_usage": True} and body["top_p"] == 0.9
    assert body["chat_template_kwargs"] == {"enable_thinking": False} and body["return_spec_tokens_details"]
    plain = request_body(cfg(stream=False), "m", [])
    assert "stream_options" not in plain and "top_p" not in plain and "chat_template_kwargs" not in plain
