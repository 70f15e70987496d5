"""Request parameters of the simulated server, checked as SGLang 0.5.23 checks them.

Messages and error shapes follow SGLang: ``SamplingParams.verify`` raises ValueError with the
texts below, which the OpenAI routes return as 400 ``{"object": "error", "message": ...,
"type": "BadRequestError", "param": null, "code": 400}`` and ``/generate`` returns as 400
``{"error": {"message": ...}}``. A body that fails the request schema (a missing or mistyped
field) is a 400 with type "Bad Request", as SGLang's validation handler answers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


class ApiError(Exception):
    """An error answer: status, message and OpenAI-style type."""

    def __init__(self, message: str, *, status: int = 400, err_type: str = "BadRequestError",
                 param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.err_type = err_type
        self.param = param

    def openai_body(self) -> dict[str, Any]:
        return {"object": "error", "message": self.message, "type": self.err_type,
                "param": self.param, "code": self.status}

    def native_body(self) -> dict[str, Any]:
        return {"error": {"message": self.message}}


def schema_error(loc: str, msg: str, value: Any, kind: str = "value_error") -> ApiError:
    """A request-schema failure worded like SGLang's RequestValidationError answer."""
    detail = f"[{{'type': '{kind}', 'loc': ('body', '{loc}'), 'msg': '{msg}', 'input': {value!r}}}]"
    return ApiError(detail, err_type="Bad Request", param=None)


@dataclass
class Sampling:
    max_new_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    repetition_penalty: float = 1.0
    min_new_tokens: int = 0
    stop: tuple[str, ...] = ()
    stop_token_ids: frozenset[int] = field(default_factory=frozenset)
    ignore_eos: bool = False
    n: int = 1

    def verify(self) -> None:
        """SGLang's SamplingParams.verify, in its order and words."""
        if not math.isfinite(self.temperature) or self.temperature < 0.0:
            raise ApiError(f"temperature must be a non-negative finite number, got {self.temperature}.")
        if not 0.0 < self.top_p <= 1.0:
            raise ApiError(f"top_p must be in (0, 1], got {self.top_p}.")
        if not 0.0 <= self.min_p <= 1.0:
            raise ApiError(f"min_p must be in [0, 1], got {self.min_p}.")
        if self.top_k != -1 and self.top_k < 1:
            raise ApiError(f"top_k must be -1 (disable) or at least 1, got {self.top_k}.")
        if not -2.0 <= self.frequency_penalty <= 2.0:
            raise ApiError(f"frequency_penalty must be in [-2, 2], got {self.frequency_penalty}.")
        if not -2.0 <= self.presence_penalty <= 2.0:
            raise ApiError(f"presence_penalty must be in [-2, 2], got {self.presence_penalty}.")
        if not 0.0 < self.repetition_penalty <= 2.0:
            raise ApiError("repetition_penalty must be in (0, 2] (1.0 = no penalty), "
                           f"got {self.repetition_penalty}.")
        if not 0 <= self.min_new_tokens:
            raise ApiError(f"min_new_tokens must be in [0, max_new_tokens], got {self.min_new_tokens}.")
        if self.max_new_tokens is not None:
            if self.max_new_tokens < 0:
                raise ApiError(f"max_new_tokens must be at least 0, got {self.max_new_tokens}.")
            if not self.min_new_tokens <= self.max_new_tokens:
                raise ApiError(f"min_new_tokens must be in [0, max_new_tokens({self.max_new_tokens})], "
                               f"got {self.min_new_tokens}.")


def check_request(sp: Sampling, input_tokens: int, context_len: int) -> None:
    """What SGLang's tokenizer manager checks once the prompt is tokenized, in its order:
    the prompt against the context length, prompt + max_new_tokens, then the sampling values."""
    if input_tokens >= context_len:
        raise ApiError(f"The input ({input_tokens} tokens) is longer than the model's context length "
                       f"({context_len} tokens).")
    mx = sp.max_new_tokens
    if mx is not None and mx + input_tokens > context_len:
        raise ApiError(f"Requested token count exceeds the model's maximum context length of {context_len} "
                       f"tokens. You requested a total of {mx + input_tokens} tokens: {input_tokens} tokens "
                       f"from the input messages and {mx} tokens for the completion. Please reduce the number "
                       "of tokens in the input messages or the completion to fit within the limit.")
    sp.verify()


def _num(body: dict[str, Any], key: str, default: Any, kind: type) -> Any:
    v = body.get(key)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise schema_error(key, f"Input should be a valid {'integer' if kind is int else 'number'}", v,
                           "int_type" if kind is int else "float_type")
    if kind is int:
        if isinstance(v, float) and not v.is_integer():
            raise schema_error(key, "Input should be a valid integer, got a number with a fractional part",
                               v, "int_from_float")
        return int(v)
    return float(v)


def _stops(body: dict[str, Any]) -> tuple[str, ...]:
    s = body.get("stop")
    if s is None:
        return ()
    if isinstance(s, str):
        return (s,)
    if isinstance(s, list) and all(isinstance(x, str) for x in s):
        return tuple(s)
    raise schema_error("stop", "Input should be a valid string or list of strings", s, "string_type")


def _stop_ids(body: dict[str, Any]) -> frozenset[int]:
    s = body.get("stop_token_ids")
    if s is None:
        return frozenset()
    if isinstance(s, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in s):
        return frozenset(s)
    raise schema_error("stop_token_ids", "Input should be a valid list of integers", s, "list_type")


def _common(body: dict[str, Any]) -> Sampling:
    return Sampling(
        temperature=_num(body, "temperature", 1.0, float), top_p=_num(body, "top_p", 1.0, float),
        top_k=_num(body, "top_k", -1, int), min_p=_num(body, "min_p", 0.0, float),
        frequency_penalty=_num(body, "frequency_penalty", 0.0, float),
        presence_penalty=_num(body, "presence_penalty", 0.0, float),
        repetition_penalty=_num(body, "repetition_penalty", 1.0, float),
        min_new_tokens=_num(body, "min_tokens", _num(body, "min_new_tokens", 0, int), int),
        stop=_stops(body), stop_token_ids=_stop_ids(body), ignore_eos=bool(body.get("ignore_eos")),
    )


def _n(body: dict[str, Any]) -> int:
    n = _num(body, "n", 1, int)
    if n < 1:
        raise ApiError(f"n must be at least 1, got {n}.")
    return n


def chat_sampling(body: dict[str, Any]) -> tuple[Sampling, int | None]:
    """Sampling of /v1/chat/completions and the number of top log-probabilities (None: off);
    ``check_request`` verifies it once the prompt is counted."""
    s = _common(body)
    mct = _num(body, "max_completion_tokens", None, int)
    mt = _num(body, "max_tokens", None, int)
    s.max_new_tokens = mct or mt  # SGLang: max_completion_tokens or max_tokens
    s.n = _n(body)
    top: int | None = None
    if body.get("logprobs"):
        top = _num(body, "top_logprobs", 0, int)
        if top < 0:
            raise ApiError(f"top_logprobs must be at least 0, got {top}.")
    return s, top


def completion_sampling(body: dict[str, Any]) -> tuple[Sampling, int | None]:
    """Sampling of /v1/completions: max_tokens defaults to 16 and must be positive."""
    s = _common(body)
    mt = _num(body, "max_tokens", 16, int)
    if mt is not None and mt <= 0:
        raise schema_error("max_tokens", "Value error, max_tokens must be positive", mt)
    s.max_new_tokens = mt
    s.n = _n(body)
    lp = _num(body, "logprobs", None, int)
    return s, lp


def native_sampling(params: Any) -> Sampling:
    """The ``sampling_params`` of /generate (SGLang's own names)."""
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise ApiError("sampling_params must be an object", err_type="BadRequestError")
    s = _common(params)
    s.max_new_tokens = _num(params, "max_new_tokens", 128, int)
    s.n = _n(params)
    return s
