"""One simulated generation request: its tokens, text, stop conditions and log-probabilities.

Text is made of real tokens of the simulated tokenizer (backend/sim/tokenizer.py), so the
token ids streamed, the text and the counts agree with what a client's tokenizer sees. Stop
strings end a request the way SGLang does: the text stops before the matched string, the
finish reason is "stop" with the string as ``matched``; while a request runs, a tail that may
still grow into a stop string is held back from the visible text.
"""

from __future__ import annotations

import math
import queue
import random
import time
from dataclasses import dataclass, field
from typing import Any

from backend.sim.tokenizer import SimTokenizer, TokenPiece


@dataclass
class TokenLogprob:
    id: int
    logprob: float
    top: list[tuple[int, float]]  # (token id, logprob), best first


@dataclass
class Request:
    rid: str
    prompt: str
    prompt_tokens: int
    max_new: int
    natural_len: int
    rng: random.Random
    p: float
    tokenizer: SimTokenizer | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: frozenset[int] = frozenset()
    top_logprobs: int | None = None   # None: no log-probabilities asked for
    index: int = 0                    # choice index for n > 1
    created: float = field(default_factory=time.monotonic)
    cached_tokens: int = 0
    generated: int = 0
    output_ids: list[int] = field(default_factory=list)
    text_parts: list[str] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    first_token_at: float | None = None
    last_token_at: float | None = None
    finished_at: float | None = None
    # the same moments on the simulated clock (Engine.clock_s: the modelled GPU time, idle excluded)
    v_created: float = 0.0
    v_first_token: float | None = None
    v_finished: float | None = None
    finish_reason: str | None = None
    matched_stop: str | int | None = None
    stop_at: int | None = None        # char offset where a matched stop string begins
    verify_ct: int = 0
    accepted_drafts: int = 0
    proposed_drafts: int = 0
    num_retractions: int = 0
    accept_hist: dict[int, int] = field(default_factory=dict)
    events: "queue.Queue[tuple[str, Any]]" = field(default_factory=queue.Queue)
    cancelled: bool = False
    native_logprobs: Any = None       # /generate's log-probability options (backend/sim/logprobs.py)
    _nchars: int = 0

    @property
    def target_len(self) -> int:
        return min(self.max_new, self.natural_len)

    @property
    def full_text(self) -> str:
        return "".join(self.text_parts)

    @property
    def text(self) -> str:
        """The text a client may see now: cut before a matched stop string, and while
        running without a tail that could still become one."""
        t = self.full_text
        if self.stop_at is not None:
            return t[:self.stop_at]
        if self.finish_reason is None and self.stop:
            return t[:len(t) - _held_back(t, self.stop)]
        return t

    # -- producing tokens ------------------------------------------------------------
    def next_tokens(self, n: int) -> list[TokenPiece]:
        tok = self.tokenizer
        assert tok is not None
        out: list[TokenPiece] = []
        for _ in range(n):
            if self.generated + len(out) > 0 and tok.punct and self.rng.random() < 0.08:
                out.append(self.rng.choice(tok.punct))
            else:
                out.append(self.rng.choice(tok.words))
        return out

    def add_tokens(self, pieces: list[TokenPiece], lp_rng: random.Random | None = None) -> list[TokenPiece]:
        """Append tokens up to the first stop (string or token id); the ones kept."""
        kept: list[TokenPiece] = []
        for piece in pieces:
            before = self._nchars
            self.output_ids.append(piece.id)
            self.text_parts.append(piece.text)
            self._nchars += len(piece.text)
            self.generated += 1
            kept.append(piece)
            if self.top_logprobs is not None:
                self.logprobs.append(self._logprob(piece.id, lp_rng or self.rng))
            if piece.id in self.stop_token_ids:
                self.matched_stop = piece.id
                self.stop_at = before
                break
            if self.stop:
                hit = self._stop_in_tail(before)
                if hit is not None:
                    self.stop_at, self.matched_stop = hit
                    break
        return kept

    def _stop_in_tail(self, before: int) -> tuple[int, str] | None:
        """The earliest stop string that ends in the characters added after ``before``; only
        the last few parts are joined, so long outputs stay linear."""
        need = _longest(self.stop) + (self._nchars - before)
        tail, n = [], 0
        for part in reversed(self.text_parts):
            tail.append(part)
            n += len(part)
            if n >= need:
                break
        text = "".join(reversed(tail))
        base = self._nchars - len(text)
        hit = _find_stop(text, self.stop, max(0, before - _longest(self.stop) + 1 - base))
        return None if hit is None else (hit[0] + base, hit[1])

    @property
    def stopped(self) -> bool:
        return self.matched_stop is not None

    def _logprob(self, chosen: int, rng: random.Random) -> TokenLogprob:
        tok = self.tokenizer
        assert tok is not None
        p = rng.uniform(0.35, 0.97)
        k = max(0, int(self.top_logprobs or 0))
        top: list[tuple[int, float]] = [(chosen, math.log(p))] if k else []
        rest = 1.0 - p
        pool = [w.id for w in tok.words if w.id != chosen]
        for alt in rng.sample(pool, min(len(pool), max(0, k - 1))):
            q = rest * rng.uniform(0.2, 0.6)
            rest -= q
            top.append((alt, math.log(max(q, 1e-9))))
        top.sort(key=lambda t: -t[1])
        return TokenLogprob(chosen, math.log(p), top)


def _longest(stops: tuple[str, ...]) -> int:
    return max((len(s) for s in stops), default=0)


def _find_stop(text: str, stops: tuple[str, ...], start: int) -> tuple[int, str] | None:
    best: tuple[int, str] | None = None
    for s in stops:
        if not s:
            continue
        i = text.find(s, start)
        if i >= 0 and (best is None or i < best[0]):
            best = (i, s)
    return best


def _held_back(text: str, stops: tuple[str, ...]) -> int:
    """Length of the longest tail of ``text`` that is a proper prefix of a stop string."""
    n = 0
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), n, -1):
            if text.endswith(s[:k]):
                n = k
                break
    return n
