"""What an SGLang server says of itself at ``/server_info`` (``/get_server_info`` before 0.5.10), as one
value: the speculation settings, the live accept length and throughput, the limits.  The SGLang client
reads it from a live server; the benchmark importer from a report that embeds it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class ServerInfo:
    avg_spec_accept_length: float | None  # lifetime average, DP rank 0 (missing until a decode tick)
    last_gen_throughput: float | None
    speculative_algorithm: str | None
    speculative_num_steps: int | None
    speculative_eagle_topk: int | None
    speculative_num_draft_tokens: int | None
    speculative_draft_model_path: str | None
    max_running_requests: int | None
    max_total_num_tokens: int | None
    version: str | None
    raw: dict

    @classmethod
    def from_json(cls, data: Any) -> "ServerInfo":
        if isinstance(data, dict) and "decode" in data and isinstance(data["decode"], list) and data["decode"]:
            data = data["decode"][0]  # PD disaggregation wraps the decode side's info
        if not isinstance(data, dict):
            raise ValueError("server info is not a JSON object")
        states = data.get("internal_states")
        st0 = states[0] if isinstance(states, list) and states and isinstance(states[0], dict) else {}

        def pick(key: str) -> Any:
            v = st0.get(key)
            return data.get(key) if v is None else v

        def num(v: Any, typ: Callable = float) -> Any:
            try:
                return None if v is None else typ(v)
            except (TypeError, ValueError):
                return None

        accept = num(st0.get("avg_spec_accept_length", data.get("avg_spec_accept_length")))
        return cls(
            # 0 (or -1) is "no reading yet" (an engine may send the key before its first verify); an
            # accepted length is at least 1 whenever there is one
            avg_spec_accept_length=accept if accept is not None and accept > 0 and math.isfinite(accept) else None,
            last_gen_throughput=num(pick("last_gen_throughput")),
            speculative_algorithm=pick("speculative_algorithm"),
            speculative_num_steps=num(pick("speculative_num_steps"), int),
            speculative_eagle_topk=num(pick("speculative_eagle_topk"), int),
            speculative_num_draft_tokens=num(pick("speculative_num_draft_tokens"), int),
            speculative_draft_model_path=pick("speculative_draft_model_path"),
            max_running_requests=num(pick("max_running_requests"), int),
            max_total_num_tokens=num(pick("max_total_num_tokens"), int),
            version=data.get("version"),
            raw=data,
        )
