"""Tokenizer, chat template and the draft vocabulary mapping of the tiny trainer.

The tokenizer is the project's own small byte-level BPE (:mod:`backend.sim.tokenizer`, trained with the
``tokenizers`` library from fixed text with a fixed seed: nothing downloaded, the same ids everywhere),
the one the simulated SGLang server counts and streams tokens with.  Its chat template is Llama 3's::

    <|begin_of_text|> (<|start_header_id|> role <|end_header_id|> "\n\n" content <|eot_id|>) ...

The loss mask covers each assistant message's content and its ``<|eot_id|>`` (only the last assistant
message with ``train_only_last_turn``), as SpecForge masks everything but the assistant's replies.
Padding uses ``<|end_of_text|>`` (masked out).

The draft vocabulary follows SpecForge's rule (reference §5): the ``draft_vocab_size`` most frequent
loss-masked tokens of the training data (ties to the lower id; ids never seen fill up a short list),
sorted; ``d2t[i] = used[i] - i`` (an offset) and ``t2d`` a mask over the target vocabulary.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from backend.sim.tokenizer import BOS as BOS_TEXT
from backend.sim.tokenizer import END_HEADER, EOS, EOT as EOT_TEXT, SPECIAL_TOKENS, START_HEADER, SimTokenizer

NAME = "specdeck-sim-bpe"
FIRST_MERGE = len(SPECIAL_TOKENS) + 256  # ids: the special tokens, the 256 byte pieces, then merges by rank


@functools.lru_cache(maxsize=1)
def tokenizer() -> SimTokenizer:
    return SimTokenizer.builtin()


def _id(text: str) -> int:
    i = tokenizer().tok.token_to_id(text)
    assert i is not None, text
    return i


@dataclass(frozen=True)
class Specials:
    pad: int
    bos: int
    eot: int
    start_header: int
    end_header: int


@functools.lru_cache(maxsize=1)
def specials() -> Specials:
    return Specials(_id(EOS), _id(BOS_TEXT), _id(EOT_TEXT), _id(START_HEADER), _id(END_HEADER))


def vocab_size() -> int:
    """Ids the tokenizer produces (a target's vocabulary may be larger: reserved ids)."""
    return tokenizer().vocab_size


@dataclass(frozen=True)
class Sample:
    ids: tuple[int, ...]
    loss_mask: tuple[int, ...]

    @property
    def loss_tokens(self) -> int:
        return sum(self.loss_mask)


@functools.lru_cache(maxsize=8)
def _header(role: str) -> tuple[int, ...]:
    sp = specials()
    return (sp.start_header, *tokenizer().encode(role), sp.end_header, *tokenizer().encode("\n\n"))


def encode_chat(messages: Iterable[tuple[str, str]], max_length: int, *, only_last_turn: bool = False) -> Sample:
    """Token ids and loss mask of a conversation of (role, content) pairs, cut to ``max_length`` tokens."""
    msgs = list(messages)
    last_assistant = max((i for i, (r, _) in enumerate(msgs) if r == "assistant"), default=-1)
    sp = specials()
    ids = [sp.bos]
    mask = [0]
    for i, (role, content) in enumerate(msgs):
        head = _header(role)
        body = tokenizer().encode(content) + [sp.eot]
        learn = role == "assistant" and (not only_last_turn or i == last_assistant)
        ids.extend(head)
        mask.extend([0] * len(head))
        ids.extend(body)
        mask.extend([1 if learn else 0] * len(body))
        if len(ids) >= max_length:
            break
    return Sample(tuple(ids[:max_length]), tuple(mask[:max_length]))


def decode(ids: Iterable[int]) -> str:
    """Text of token ids, special tokens written out."""
    return tokenizer().tok.decode(list(ids), skip_special_tokens=False)


@dataclass(frozen=True)
class VocabMapping:
    d2t: torch.Tensor  # (draft_vocab,) int64 offsets: target id = draft id + d2t[draft id]
    t2d: torch.Tensor  # (vocab,) bool: the target id is in the draft vocabulary
    top_ratio: float  # share of the loss-masked tokens the draft vocabulary covers

    @property
    def draft_ids(self) -> torch.Tensor:
        """Target id of each draft id."""
        return torch.arange(self.d2t.numel(), dtype=torch.int64) + self.d2t


def vocab_mapping(samples: Iterable[Sample], vocab_size: int, draft_vocab_size: int) -> VocabMapping:
    if not 0 < draft_vocab_size <= vocab_size:
        raise ValueError(f"draft_vocab_size {draft_vocab_size} is not between 1 and the vocabulary ({vocab_size})")
    counts: Counter[int] = Counter()
    for s in samples:
        counts.update(t for t, m in zip(s.ids, s.loss_mask) if m)
    total = sum(counts.values())
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:draft_vocab_size]
    used = {t for t, _ in ranked}
    covered = sum(n for _, n in ranked)
    fill = (t for t in range(vocab_size) if t not in used)
    while len(used) < draft_vocab_size:
        used.add(next(fill))
    ordered = sorted(used)
    d2t = torch.tensor([t - i for i, t in enumerate(ordered)], dtype=torch.int64)
    t2d = torch.zeros(vocab_size, dtype=torch.bool)
    t2d[torch.tensor(ordered, dtype=torch.int64)] = True
    return VocabMapping(d2t, t2d, covered / total if total else 0.0)
