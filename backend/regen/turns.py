"""Asking one row: its user turns in order, each with the regenerated history, on one server.

A row's turns are asked in order on one server (:func:`ask_turns`), each with the history
regenerated so far: system turns kept, the original assistant turns dropped.  What is written
passes SpecForge's ``validate_regenerated_data.py``: system turns after the first user turn and
empty turns are left out, and an empty answer is an error (``empty_answer``), not a row.  The
reasoning modes are checked on every answer (``reasoning_contract``): ``disable`` wants no
``<think>`` marker, ``save`` wants the server's ``reasoning_content``.

:class:`Task` holds a row's work across attempts: a transient failure leaves it where it stopped,
so asking it again (on any server) goes on from the turn that failed.  What to do with the outcome
(write the row, fail it, ask again later, wait for the server) is the job's
(:mod:`backend.regen.job`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from backend.regen.client import PERMANENT, SUCCESS, Outcome, ServerClient
from backend.regen.config import JobConfig
from backend.regen.records import Row

GATEWAY_STATUSES = (502, 503, 504)  # answers after which the server is probed before a row is charged
_THINK = re.compile(r"</?think>", re.I)


@dataclass
class Task:
    row: Row
    history: list[dict[str, Any]] = field(default_factory=list)  # regenerated so far
    pos: int = 0               # next message of row.messages to take
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str | None = None
    retries: int = 0           # every transient failure
    strikes: int = 0           # transient failures while the server was up (bounded)
    spec_tokens: int = 0       # tokens of the answers that gave speculative figures
    spec_verify_ct: int = 0    # their verify steps (0: no answer gave any)


def request_body(cfg: JobConfig, model: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The chat completion request of one turn, as ``cfg`` asks it."""
    body: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": cfg.max_tokens,
                            "temperature": cfg.temperature, "stream": cfg.stream}
    if cfg.stream:
        body["stream_options"] = {"include_usage": True}
    if cfg.top_p is not None:
        body["top_p"] = cfg.top_p
    if cfg.reasoning == "disable":
        body["chat_template_kwargs"] = {"enable_thinking": False}
    # SGLang 0.5.23 then adds each answer's speculative figures (sglext.spec_tokens_details); others ignore it
    body["return_spec_tokens_details"] = True
    return body


async def ask_turns(task: Task, client: ServerClient, cfg: JobConfig) -> Outcome | None:
    """Ask ``task``'s remaining turns on ``client``: None when every turn is answered (the history,
    token counts and speculative figures are in ``task``), else the outcome that stopped it, with
    the turn it stopped at still to ask."""
    msgs = task.row.messages
    if task.pos == 0 and not task.history and cfg.system_prompt and not any(m.role == "system" for m in msgs):
        task.history.append({"role": "system", "content": cfg.system_prompt})
    model = cfg.model or client.model or "default"
    while task.pos < len(msgs):
        m = msgs[task.pos]
        if m.role != "user" or not m.content.strip():
            # SpecForge's validator takes system turns only before the first user turn and
            # no empty message: those are left out of what is asked and written.
            if m.role == "system" and m.content.strip() and not any(h["role"] == "user" for h in task.history):
                task.history.append(m.as_dict())
            task.pos += 1
            continue
        sent = [{"role": h["role"], "content": h["content"]} for h in task.history]
        sent.append(m.as_dict())
        out = await client.chat(request_body(cfg, model, sent))
        if out.kind != SUCCESS:
            if out.status in GATEWAY_STATUSES and not out.server_down:
                # a server starting up, or a router with no live worker: away, not failing
                ok, why = await client.probe()
                if not ok:
                    out.server_down = True
                    out.message = f"{out.message[:120]}; probe: {why}"
            return out
        if not out.content.strip():
            return Outcome(PERMANENT, "empty_answer", f"the answer has no text (finish_reason "
                           f"{out.finish_reason}); raise --max-tokens if it was cut", status=200)
        if cfg.reasoning == "disable" and _THINK.search(out.content):
            return Outcome(PERMANENT, "reasoning_contract", "reasoning disable: the answer still "
                           "holds a <think> marker", status=200)
        if cfg.reasoning == "save" and not (out.reasoning or "").strip():
            return Outcome(PERMANENT, "reasoning_contract", "reasoning save: the answer has no "
                           "reasoning_content (is the server launched with --reasoning-parser?)", status=200)
        answer: dict[str, Any] = {"role": "assistant", "content": out.content}
        if cfg.reasoning == "save":
            answer["reasoning_content"] = out.reasoning
        task.history.append(m.as_dict())
        task.history.append(answer)
        task.prompt_tokens += out.prompt_tokens
        task.completion_tokens += out.completion_tokens
        if out.spec_verify_ct and out.spec_tokens:
            task.spec_tokens += out.spec_tokens
            task.spec_verify_ct += out.spec_verify_ct
        task.finish_reason = out.finish_reason
        task.pos += 1
    return None
