"""Byte tokenizer, chat template and the draft vocabulary mapping of the tiny trainer.

Tokens 0-255 are the UTF-8 bytes of the text; then come the special tokens below; the rest of the
vocabulary is reserved (never produced by the tokenizer, as real models keep reserved ids).  Nothing is
downloaded and every machine tokenizes the same way.

Chat template::

    <|bos|> (<|system|> | <|user|> | <|assistant|>) content-bytes <|eot|> ...

The loss mask covers each assistant message's content and its ``<|eot|>`` (only the last assistant
message with ``train_only_last_turn``), as SpecForge masks everything but the assistant's replies.

The draft vocabulary follows SpecForge's rule (reference §5): the ``draft_vocab_size`` most frequent
loss-masked tokens of the training data (ties to the lower id; ids never seen fill up a short list),
sorted; ``d2t[i] = used[i] - i`` (an offset) and ``t2d`` a mask over the target vocabulary.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import torch

NAME = "specdeck-bytes"
PAD, BOS, EOT, SYSTEM, USER, ASSISTANT = 256, 257, 258, 259, 260, 261
ROLE_TOKEN = {"system": SYSTEM, "user": USER, "assistant": ASSISTANT}
MIN_VOCAB = 262


@dataclass(frozen=True)
class Sample:
    ids: tuple[int, ...]
    loss_mask: tuple[int, ...]

    @property
    def loss_tokens(self) -> int:
        return sum(self.loss_mask)


def encode_chat(messages: Iterable[tuple[str, str]], max_length: int, *, only_last_turn: bool = False) -> Sample:
    """Token ids and loss mask of a conversation of (role, content) pairs, cut to ``max_length`` tokens."""
    msgs = list(messages)
    last_assistant = max((i for i, (r, _) in enumerate(msgs) if r == "assistant"), default=-1)
    ids = [BOS]
    mask = [0]
    for i, (role, content) in enumerate(msgs):
        body = list(content.encode("utf-8", "surrogatepass")) + [EOT]
        learn = role == "assistant" and (not only_last_turn or i == last_assistant)
        ids.append(ROLE_TOKEN[role])
        mask.append(0)
        ids.extend(body)
        mask.extend([1 if learn else 0] * len(body))
        if len(ids) >= max_length:
            break
    return Sample(tuple(ids[:max_length]), tuple(mask[:max_length]))


def decode(ids: Iterable[int]) -> str:
    """Text of token ids (special tokens by name, reserved ids as ``<|reserved_N|>``)."""
    names = {PAD: "<|pad|>", BOS: "<|bos|>", EOT: "<|eot|>", SYSTEM: "<|system|>", USER: "<|user|>",
             ASSISTANT: "<|assistant|>"}
    out: list[str] = []
    raw = bytearray()
    for i in ids:
        if i < 256:
            raw.append(i)
            continue
        if raw:
            out.append(raw.decode("utf-8", "replace"))
            raw.clear()
        out.append(names.get(i, f"<|reserved_{i}|>"))
    if raw:
        out.append(raw.decode("utf-8", "replace"))
    return "".join(out)


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
