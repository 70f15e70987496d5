"""One regeneration row: a conversation read from any supported input shape, with a stable id.

Three input shapes are accepted (``../reference/specforge.md`` §3.2):

- SpecForge's record: ``{"id": ..., "conversations": [{"role": ..., "content": ...}, ...]}``
- ShareGPT's turns: ``{"id": ..., "conversations": [{"from": "human", "value": ...}, ...]}``
  (``messages`` is accepted in place of ``conversations`` for either of the two)
- prompt-only rows: ``{"prompt": "..."}`` or ``{"text": "..."}``

OpenAI's chat format is read too: the ``developer`` role is the system turn (SpecForge knows only
system, user and assistant), and ``content`` may be a list of text parts
(``[{"type": "text", "text": "..."}]``), joined with newlines as vLLM and SGLang join them; a part
of another type (an image) makes the row unusable.  Text holding a lone surrogate (``"\\ud800"``
decodes to one) is refused with the field named: it cannot be sent as UTF-8 nor written so that
SpecForge and pyarrow read it.

:func:`to_row` turns any of them into a :class:`Row` whose ``messages`` are role/content pairs in
SpecForge's vocabulary, or raises :class:`RowError` naming why the row is unusable.  A row without
a usable id gets ``h-`` plus 16 hex digits of a SHA-256 over its messages, so the same content
always gets the same id (a resume depends on it).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any

# ShareGPT speaker names, as SpecForge's prepare_data.py maps them.
ROLE_NAMES: dict[str, str] = {
    "human": "user", "user": "user",
    "gpt": "assistant", "chatgpt": "assistant", "bing": "assistant", "bard": "assistant",
    "assistant": "assistant", "model": "assistant",
    "system": "system", "developer": "system",
}

MAX_ID_CHARS = 512
_SURROGATE = re.compile("[\ud800-\udfff]")


class RowError(ValueError):
    """A row that cannot be regenerated; the message is the reason written to the skipped file."""


@dataclass(frozen=True)
class Message:
    role: str  # "system" | "user" | "assistant"
    content: str

    def as_dict(self) -> dict[str, str]:
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True)
class Row:
    """A row ready to be asked again: its id, where it came from, and its turns."""

    id: str
    dataset: str
    messages: tuple[Message, ...]
    record: dict[str, Any] = field(compare=False, repr=False)  # the input record as read
    line: int | None = None  # 1-based line (JSONL) or row number (Parquet) in its file
    repeat: int = 0  # a row without an id whose turns an earlier row had: 1 for the second, ...

    @property
    def user_turns(self) -> int:
        return sum(1 for m in self.messages if m.role == "user")

    @property
    def prompt_chars(self) -> int:
        return sum(len(m.content) for m in self.messages if m.role != "assistant")


def stable_id(messages: tuple[Message, ...]) -> str:
    canon = json.dumps([[m.role, m.content] for m in messages], ensure_ascii=False, separators=(",", ":"))
    return "h-" + hashlib.sha256(canon.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _turns(obj: dict[str, Any]) -> tuple[Message, ...]:
    key = "conversations" if "conversations" in obj else "messages" if "messages" in obj else None
    if key is None:
        for k in ("prompt", "text"):
            if k in obj:
                text = obj[k]
                if not isinstance(text, str) or not text.strip():
                    raise RowError(f"{k}: not a non-empty string")
                _check_text(text, k)
                return (Message("user", text),)
        raise RowError("no conversations, messages, prompt or text field")
    turns = obj[key]
    if not isinstance(turns, list) or not turns:
        raise RowError(f"{key}: not a non-empty list")
    out: list[Message] = []
    for i, t in enumerate(turns):
        if not isinstance(t, dict):
            raise RowError(f"{key}[{i}]: not an object")
        raw_role = t.get("role", t.get("from"))
        content = t.get("content", t.get("value"))
        if not isinstance(raw_role, str):
            raise RowError(f"{key}[{i}]: no role (role or from)")
        role = ROLE_NAMES.get(raw_role.strip().lower())
        if role is None:
            raise RowError(f"{key}[{i}].role: unknown role {raw_role[:40]!r}")
        field_ = f"{key}[{i}].content" if "content" in t else f"{key}[{i}].value"
        if isinstance(content, list):
            content = _text_parts(content, field_)
        elif not isinstance(content, str):
            raise RowError(f"{field_}: not a string or a list of text parts")
        _check_text(content, field_)
        out.append(Message(role, content))
    if not any(m.role == "user" and m.content.strip() for m in out):
        raise RowError(f"{key}: no user turn with text")
    return tuple(out)


def _text_parts(parts: list[Any], where: str) -> str:
    """OpenAI's content parts, ``[{"type": "text", "text": ...}, ...]``, as one text."""
    texts = []
    for j, part in enumerate(parts):
        if not isinstance(part, dict):
            raise RowError(f"{where}[{j}]: not a content part object")
        kind = part.get("type")
        if kind != "text":
            raise RowError(f"{where}[{j}].type: {str(kind)[:40]!r} part; only text parts can be asked")
        text = part.get("text")
        if not isinstance(text, str):
            raise RowError(f"{where}[{j}].text: not a string")
        texts.append(text)
    return "\n".join(texts)


def _check_text(text: str, where: str) -> None:
    m = _SURROGATE.search(text)
    if m is not None:
        raise RowError(f"{where}: a lone surrogate U+{ord(m.group()):04X} at character {m.start() + 1} "
                       "(not valid Unicode; it cannot be sent or written as UTF-8)")


def _given_id(obj: dict[str, Any]) -> str | None:
    raw = obj.get("id")
    if isinstance(raw, bool) or raw is None:
        return None
    if isinstance(raw, int):
        return str(raw)
    if isinstance(raw, str) and raw.strip() and len(raw) <= MAX_ID_CHARS and "\n" not in raw \
            and not _SURROGATE.search(raw):
        return raw
    return None


def to_row(obj: Any, *, dataset: str, line: int | None = None) -> Row:
    """The :class:`Row` for one decoded input record; :class:`RowError` when it has no usable turns."""
    if not isinstance(obj, dict):
        raise RowError(f"not a JSON object ({type(obj).__name__})")
    messages = _turns(obj)
    return Row(id=_given_id(obj) or stable_id(messages), dataset=dataset, messages=messages,
               record=obj, line=line)
