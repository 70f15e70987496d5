"""OpenAI-compatible routes of the simulated server: /v1/chat/completions and /v1/completions.

Shapes follow SGLang 0.5.23's serving_chat / serving_completions: ``n`` choices, stop strings
with ``matched_stop``, log-probabilities (chat: ``{"content": [{token, bytes, logprob,
top_logprobs}]}``; completions: ``{text_offset, token_logprobs, tokens, top_logprobs}``),
usage counted with the tokenizer (the prompt once, completions summed over choices), and
SGLang's error answers for bad requests.  With ``"return_spec_tokens_details": true`` (0.5.23) a
speculating server adds the request's speculative figures at the response's level, as SGLang's
``SglExt``: ``{"sglext": {"spec_tokens_details": {...}}}`` (a list of them when ``n`` > 1); streamed,
in a chunk of its own with no choices, after the last choice's and before the usage chunk.
"""

from __future__ import annotations

import queue
import time
from http.server import BaseHTTPRequestHandler
from typing import Any

from backend.sim.logprobs import chat_logprobs, completion_logprobs
from backend.sim.request import Request
from backend.sim.sampling import (ApiError, Sampling, chat_sampling, check_request, completion_sampling,
                                  schema_error)

# The request handler of backend.sim.routes (which calls these routes): its sim and reply helpers.
Handler = BaseHTTPRequestHandler


def _finish(r: Request) -> str:
    return {"length": "length", "abort": "abort"}.get(r.finish_reason or "", "stop")


def _matched(r: Request) -> str | int | None:
    return r.matched_stop if r.finish_reason == "stop" else None


def _usage(reqs: list[Request]) -> dict[str, Any]:
    prompt = reqs[0].prompt_tokens
    completion = sum(r.generated for r in reqs)
    return {"prompt_tokens": prompt, "total_tokens": prompt + completion, "completion_tokens": completion,
            "prompt_tokens_details": None, "reasoning_tokens": 0}


SPEC_DETAIL_KEYS = {"spec_accept_rate": 0.0, "spec_accept_length": 0.0, "spec_cap_length": 0.0,
                    "spec_block_accept_length": 0.0, "spec_num_correct_drafts": 0, "spec_num_proposed_drafts": 0,
                    "spec_verify_ct": 0, "spec_correct_drafts_histogram": [], "spec_cap_lens_histogram": []}


def _spec_details(h: Handler, body: dict[str, Any], reqs: list[Request]) -> Any:
    """SGLang 0.5.23's ``sglext.spec_tokens_details`` (SpecTokensDetails, every field, from each
    request's meta_info), or None: not asked for, another version, or no speculation."""
    if body.get("return_spec_tokens_details") is not True or h.sim.flavor.v < (0, 5, 23) or not h.sim.plan.on:
        return None
    details = []
    for r in reqs:
        meta = h.meta(r, time.monotonic())
        if not any(k in meta for k in SPEC_DETAIL_KEYS):
            continue
        details.append({k: (meta.get(k) or default) for k, default in SPEC_DETAIL_KEYS.items()})
    if not details:
        return None
    return details if len(reqs) > 1 else details[0]


def _submit(h: Handler, prompt: str, ptoks: int, sp: Sampling, top: int | None) -> list[Request]:
    eng = h.sim.engine
    assert eng is not None
    q: "queue.Queue[tuple[str, Any]]" = queue.Queue()
    return [eng.submit(prompt, max_new_tokens=sp.max_new_tokens, ignore_eos=sp.ignore_eos, prompt_tokens=ptoks,
                       stop=sp.stop, stop_token_ids=sp.stop_token_ids, top_logprobs=top, index=i, events=q)
            for i in range(sp.n)]


def chat(h: Handler, body: dict[str, Any]) -> None:
    if h.not_ready():
        return
    sim = h.sim
    try:
        msgs = body.get("messages")
        if msgs is None:
            raise schema_error("messages", "Field required", None, "missing")
        if not isinstance(msgs, list) or not all(isinstance(m, dict) for m in msgs):
            raise schema_error("messages", "Input should be a valid list", msgs, "list_type")
        if not msgs:
            raise ApiError("Messages cannot be empty.")
        sp, top = chat_sampling(body)
        ids = sim.tokenizer.chat_ids(msgs)
        check_request(sp, len(ids), sim.context_len)
    except ApiError as e:
        return h.send_json(e.status, e.openai_body())
    reqs = _submit(h, sim.tokenizer.chat_text(msgs), len(ids), sp, top)
    _respond(h, body, reqs, chat=True)


def completions(h: Handler, body: dict[str, Any]) -> None:
    if h.not_ready():
        return
    sim = h.sim
    try:
        p = body.get("prompt")
        if p is None:
            raise schema_error("prompt", "Field required", None, "missing")
        if isinstance(p, list) and len(p) == 1:
            p = p[0]
        if isinstance(p, list) and p and all(isinstance(i, int) for i in p):
            prompt, ptoks = sim.tokenizer.decode(p), len(p)
        elif isinstance(p, str):
            prompt, ptoks = p, len(sim.tokenizer.prompt_ids(p))
        else:
            raise schema_error("prompt", "Input should be a valid string or list of token ids", p, "string_type")
        sp, top = completion_sampling(body)
        check_request(sp, ptoks, sim.context_len)
    except ApiError as e:
        return h.send_json(e.status, e.openai_body())
    reqs = _submit(h, prompt, ptoks, sp, top)
    _respond(h, body, reqs, chat=False)


def _respond(h: Handler, body: dict[str, Any], reqs: list[Request], *, chat: bool) -> None:
    sim = h.sim
    model = body.get("model") or sim.served_name
    created = int(time.time())
    obj = "chat.completion" if chat else "text_completion"
    rid = reqs[0].rid
    with_lp = reqs[0].top_logprobs is not None
    if body.get("stream"):
        return _stream(h, body, reqs, chat=chat, model=model, created=created, rid=rid)
    h.wait_all(reqs)
    choices = []
    for r in reqs:
        if chat:
            c: dict[str, Any] = {"index": r.index, "message": {"role": "assistant", "content": r.text,
                                                                "reasoning_content": None, "tool_calls": None},
                                 "logprobs": chat_logprobs(h.sim.tokenizer, r, 0, len(r.logprobs)) if with_lp else None}
        else:
            c = {"index": r.index, "text": r.text,
                 "logprobs": completion_logprobs(h.sim.tokenizer, r, 0, len(r.logprobs), 0) if with_lp else None}
        c.update(finish_reason=_finish(r), matched_stop=_matched(r))
        choices.append(c)
    answer: dict[str, Any] = {"id": rid, "object": obj, "created": created, "model": model,
                              "choices": choices, "usage": _usage(reqs)}
    spec = _spec_details(h, body, reqs)
    if spec is not None:
        answer["sglext"] = {"spec_tokens_details": spec}
    h.send_json(200, answer)


def _stream(h: Handler, body: dict[str, Any], reqs: list[Request], *, chat: bool, model: str,
            created: int, rid: str) -> None:
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    obj = "chat.completion.chunk" if chat else "text_completion"
    with_lp = reqs[0].top_logprobs is not None
    sent_chars = [0] * len(reqs)
    sent_toks = [0] * len(reqs)

    def chunk(choice: dict[str, Any] | None, usage: Any = None) -> dict[str, Any]:
        return {"id": rid, "object": obj, "created": created, "model": model,
                "choices": [choice] if choice else [], "usage": usage}

    def delta(r: Request) -> dict[str, Any] | None:
        text = r.text
        piece = text[sent_chars[r.index]:]
        ntok = len(r.logprobs) if with_lp else 0
        if not piece and not (with_lp and ntok > sent_toks[r.index]):
            return None
        lp: Any = None
        if with_lp:
            lp = (chat_logprobs(h.sim.tokenizer, r, sent_toks[r.index], ntok) if chat else
                  completion_logprobs(h.sim.tokenizer, r, sent_toks[r.index], ntok, sent_chars[r.index]))
            sent_toks[r.index] = ntok
        sent_chars[r.index] = len(text)
        if chat:
            return {"index": r.index, "delta": {"role": None, "content": piece}, "logprobs": lp,
                    "finish_reason": None, "matched_stop": None}
        return {"index": r.index, "text": piece, "logprobs": lp, "finish_reason": None, "matched_stop": None}

    h.start_stream()
    try:
        if chat:
            for r in reqs:
                h.sse(chunk({"index": r.index, "delta": {"role": "assistant", "content": ""},
                             "logprobs": None, "finish_reason": None, "matched_stop": None}))
        for kind, r in h.events(reqs[0].events, len(reqs)):
            d = delta(r)
            if d is not None:
                h.sse(chunk(d))
            if kind != "tokens":
                last = ({"index": r.index, "delta": {}, "logprobs": None} if chat else
                        {"index": r.index, "text": "", "logprobs": None})
                last.update(finish_reason=_finish(r), matched_stop=_matched(r))
                h.sse(chunk(last))
        spec = _spec_details(h, body, reqs)
        if spec is not None:
            h.sse({**chunk(None), "sglext": {"spec_tokens_details": spec}})
        if include_usage:
            h.sse(chunk(None, _usage(reqs)))
        h.sse("[DONE]")
    except (BrokenPipeError, ConnectionResetError):
        for r in reqs:
            h.sim.engine.cancel(r)
