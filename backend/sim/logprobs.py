"""Log-probabilities of simulated requests in the three shapes SGLang answers with: chat
(``{"content": [{token, bytes, logprob, top_logprobs}]}``), completions (``{text_offset,
token_logprobs, tokens, top_logprobs}``) and /generate's meta_info (``[logprob, token_id,
text or None]`` triples)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from backend.sim.request import Request
from backend.sim.tokenizer import SimTokenizer


def chat_logprobs(tok: SimTokenizer, r: Request, start: int, end: int) -> dict[str, Any]:
    """Chat choice log-probabilities of tokens [start, end): {"content": [...]}."""

    def item(i: int, lp: float) -> dict[str, Any]:
        t = tok.token_text(i)
        return {"token": t, "bytes": list(t.encode("utf-8")), "logprob": lp}

    content = [dict(item(e.id, e.logprob), top_logprobs=[item(i, lp) for i, lp in e.top])
               for e in r.logprobs[start:end]]
    return {"content": content}


def completion_logprobs(tok: SimTokenizer, r: Request, start: int, end: int, offset0: int) -> dict[str, Any]:
    """Completion choice log-probabilities of tokens [start, end), text offsets from ``offset0``."""
    tokens, offsets, lps, tops = [], [], [], []
    pos = offset0
    for e in r.logprobs[start:end]:
        t = tok.token_text(e.id)
        tokens.append(t)
        offsets.append(pos)
        pos += len(t)
        lps.append(e.logprob)
        tops.append({tok.token_text(i): lp for i, lp in e.top} if e.top else None)
    return {"text_offset": offsets, "token_logprobs": lps, "tokens": tokens, "top_logprobs": tops}


@dataclass
class NativeLogprobs:
    """What a /generate request asked for: top-k count, texts, and where input log-probs start."""
    top: int = 0
    with_text: bool = False
    start: int = -1                 # -1: output tokens only (SGLang's default)
    prompt_ids: tuple[int, ...] = ()


def native_logprobs(tok: SimTokenizer, r: Request, opts: NativeLogprobs) -> dict[str, Any]:
    """The meta_info keys of /generate with return_logprob, in SGLang's order."""
    def triple(lp: float | None, i: int) -> list[Any]:
        return [lp, i, tok.token_text(i) if opts.with_text else None]

    rng = random.Random(f"{r.rid}:input")
    inp: list[list[Any]] = []
    inp_top: list[Any] = []
    if opts.start >= 0:
        for pos in range(opts.start, len(opts.prompt_ids)):
            i = opts.prompt_ids[pos]
            if pos == 0:  # nothing precedes the first prompt token
                inp.append(triple(None, i))
                inp_top.append(None)
                continue
            lp = math.log(rng.uniform(0.05, 0.95))
            inp.append(triple(lp, i))
            # the model's own top choices at this position: ranked by probability
            alts = sorted((math.log(rng.uniform(0.01, 0.9)) for _ in range(opts.top)), reverse=True)
            ids = rng.sample([w.id for w in tok.words], min(opts.top, len(tok.words)))
            inp_top.append([triple(a, j) for a, j in zip(alts, ids)] or None)
    out = [triple(e.logprob, e.id) for e in r.logprobs]
    m: dict[str, Any] = {"input_token_logprobs": inp, "output_token_logprobs": out,
                         "output_token_logprobs_length": len(out)}
    if opts.top > 0:
        m["input_top_logprobs"] = inp_top
        m["output_top_logprobs"] = [[triple(lp, i) for i, lp in e.top] or None for e in r.logprobs]
    return m
