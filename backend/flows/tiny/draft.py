"""The EAGLE-3 draft head in torch, with SpecForge's tensor names and its test-time-training (TTT) unroll.

Modules (the names SGLang's ``LlamaForCausalLMEagle3`` loads): ``fc`` (3 × target hidden → hidden),
one decoder layer ``midlayer`` (``input_layernorm`` on the token embedding, ``hidden_norm`` on the hidden
state, attention over both concatenated: ``self_attn.{q,k,v,o}_proj``, ``post_attention_layernorm``,
``mlp.{gate,up,down}_proj``), ``norm``, ``lm_head`` over the reduced draft vocabulary, and the buffers
``d2t`` / ``t2d``.  The token embedding is the target's own, frozen and not saved (SpecForge drops it;
SGLang takes it from the target).

TTT (reference §2.5, EAGLE-3 paper): step 0 feeds ``fc(aux)`` at position i with the embedding of token
i+1 and predicts token i+2 (the target's distribution at i+1).  Step k feeds the draft's own output of
step k-1 at i with token i+1+k and predicts token i+2+k; its queries see the step-0 keys causally plus
the keys of steps 1..k at their own position, and rotary positions move on by k.  Per position k:
``ploss_k`` = soft cross-entropy against the target distribution renormalised over the draft vocabulary,
on positions whose target token is in the draft vocabulary; ``acc_k`` = share of the loss-masked tokens
whose draft argmax is the target's greedy token; ``acceptance_rate_k`` = mean of
``sum(min(p_target, p_draft))``.  The loss is ``sum(0.8**k * ploss_k)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from backend.flows.tiny.layers import MLP, Projections, RMSNorm, rope_tables

ARCHITECTURE = "LlamaForCausalLMEagle3"
PLOSS_DECAY = 0.8


@dataclass(frozen=True)
class DraftConfig:
    hidden_size: int
    target_hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    vocab_size: int
    draft_vocab_size: int
    aux_layer_ids: tuple[int, int, int]
    max_position_embeddings: int
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0

    def to_json(self, *, pad: int, bos: int, eos: int) -> dict:
        """config.json as SpecForge's draft configs spell it (reference §5)."""
        return {
            "architectures": [ARCHITECTURE], "model_type": "llama", "hidden_act": "silu",
            "hidden_size": self.hidden_size, "intermediate_size": self.intermediate_size,
            "num_attention_heads": self.num_attention_heads, "num_key_value_heads": self.num_key_value_heads,
            "num_hidden_layers": 1, "max_position_embeddings": self.max_position_embeddings,
            "rms_norm_eps": self.rms_norm_eps, "rope_theta": self.rope_theta, "initializer_range": 0.02,
            "tie_word_embeddings": False, "torch_dtype": "float32", "use_cache": True,
            "pad_token_id": pad, "bos_token_id": bos, "eos_token_id": eos,
            "vocab_size": self.vocab_size, "draft_vocab_size": self.draft_vocab_size,
            "target_hidden_size": self.target_hidden_size,
            "eagle_config": {"eagle_aux_hidden_state_layer_ids": list(self.aux_layer_ids),
                             "use_aux_hidden_state": True},
        }


class MidLayer(nn.Module):
    def __init__(self, c: DraftConfig):
        super().__init__()
        h = c.hidden_size
        self.input_layernorm = RMSNorm(h, c.rms_norm_eps)
        self.hidden_norm = RMSNorm(h, c.rms_norm_eps)
        self.self_attn = Projections(2 * h, h, c.num_attention_heads, c.num_key_value_heads)
        self.post_attention_layernorm = RMSNorm(h, c.rms_norm_eps)
        self.mlp = MLP(h, c.intermediate_size)

    def forward(self, emb, hidden, cos, sin, keys: list, values: list):
        residual = hidden
        x = torch.cat((self.input_layernorm(emb), self.hidden_norm(hidden)), dim=-1)
        a = self.self_attn
        q, k, v = a.qkv(x, cos, sin)
        keys.append(k)
        values.append(v)
        t = q.shape[2]
        scale = 1.0 / math.sqrt(a.head_dim)
        scores = torch.matmul(q, keys[0].transpose(-1, -2)) * scale
        causal = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(causal, float("-inf"))
        if len(keys) > 1:  # the keys of later TTT steps, each at the query's own position
            diag = torch.stack([(q * kj).sum(-1) for kj in keys[1:]], dim=-1) * scale
            scores = torch.cat((scores, diag), dim=-1)
        p = torch.softmax(scores.float(), dim=-1).to(q.dtype)
        o = torch.matmul(p[..., :t], values[0])
        for j, vj in enumerate(values[1:]):
            o = o + p[..., t + j].unsqueeze(-1) * vj
        h = residual + a.out(o)
        return h + self.mlp(self.post_attention_layernorm(h))


class Eagle3Draft(nn.Module):
    def __init__(self, c: DraftConfig):
        super().__init__()
        self.config = c
        self.fc = nn.Linear(len(c.aux_layer_ids) * c.target_hidden_size, c.hidden_size, bias=False)
        self.midlayer = MidLayer(c)
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.lm_head = nn.Linear(c.hidden_size, c.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(c.draft_vocab_size, dtype=torch.int64))
        self.register_buffer("t2d", torch.ones(c.vocab_size, dtype=torch.bool))

    def init_weights(self, seed: int) -> None:
        """Normal(0, 0.02) linear weights (the initializer_range SpecForge's configs give), norms at 1."""
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, nn.Linear):
                    m.weight.copy_(torch.randn(m.weight.shape, generator=g) * 0.02)
                elif isinstance(m, RMSNorm):
                    m.weight.fill_(1.0)

    def set_vocab(self, d2t: torch.Tensor, t2d: torch.Tensor) -> None:
        self.d2t.copy_(d2t)
        self.t2d.copy_(t2d)


@dataclass
class StepStats:
    """Sums of one TTT position over a batch (or several): enough to average exactly across batches."""

    ploss_sum: float = 0.0
    target_positions: float = 0.0  # positions whose target token is in the draft vocabulary
    correct: float = 0.0
    loss_tokens: float = 0.0
    accept_sum: float = 0.0

    def add(self, o: "StepStats") -> None:
        for f in ("ploss_sum", "target_positions", "correct", "loss_tokens", "accept_sum"):
            setattr(self, f, getattr(self, f) + getattr(o, f))

    @property
    def ploss(self) -> float:
        return self.ploss_sum / self.target_positions if self.target_positions else 0.0

    @property
    def acc(self) -> float:
        return self.correct / self.loss_tokens if self.loss_tokens else 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accept_sum / self.target_positions if self.target_positions else 0.0


def _shift(x: torch.Tensor, k: int) -> torch.Tensor:
    """``x`` moved k positions to the left along dim 1, zeros coming in at the end."""
    if k == 0:
        return x
    pad = torch.zeros_like(x[:, :k])
    return torch.cat((x[:, k:], pad), dim=1) if k < x.shape[1] else torch.zeros_like(x)


def ttt_forward(draft: Eagle3Draft, embed: nn.Embedding, aux: torch.Tensor, target_logits: torch.Tensor,
                ids: torch.Tensor, loss_mask: torch.Tensor, ttt_length: int) -> tuple[torch.Tensor, list[StepStats]]:
    """The weighted TTT loss (a tensor to backpropagate) and each position's sums."""
    c = draft.config
    t = ids.shape[1]
    draft_ids = torch.arange(c.draft_vocab_size, device=ids.device) + draft.d2t
    head_dim = c.hidden_size // c.num_attention_heads
    cos_all, sin_all = rope_tables(head_dim, t + ttt_length, c.rope_theta, ids.device)
    hidden = draft.fc(aux.to(draft.fc.weight.dtype))
    keys: list = []
    values: list = []
    total = torch.zeros((), device=ids.device)
    rows: list[torch.Tensor] = []
    for k in range(ttt_length):
        tgt = _shift(target_logits, 1 + k)
        mask = _shift(loss_mask, 2 + k)
        with torch.no_grad():
            target_p = torch.softmax(tgt[..., draft_ids].float(), dim=-1)
            in_vocab = draft.t2d[tgt.argmax(-1)].float()
            pos_mask = mask * in_vocab
        emb = embed(_shift(ids, 1 + k)).to(hidden.dtype)
        hidden = draft.midlayer(emb, hidden, cos_all[k:k + t], sin_all[k:k + t], keys, values)
        logits = draft.lm_head(draft.norm(hidden)).float()
        logp = F.log_softmax(logits, dim=-1)
        n_pos = pos_mask.sum()
        ploss_sum = (-(target_p * logp).sum(-1) * pos_mask).sum()
        total = total + (PLOSS_DECAY ** k) * ploss_sum / n_pos.clamp_min(1.0)
        with torch.no_grad():
            correct = ((logits.argmax(-1) == target_p.argmax(-1)).float() * pos_mask).sum()
            accept = (torch.minimum(target_p, logp.exp()).sum(-1) * pos_mask).sum()
            rows.append(torch.stack((ploss_sum.detach(), n_pos, correct, mask.sum(), accept)))
    table = torch.stack(rows).cpu().tolist()  # one device sync per batch
    return total, [StepStats(*r) for r in table]
