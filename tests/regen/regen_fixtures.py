"""Files of a regeneration run written by hand for the follow and page tests.

The shapes are those of ``../shared/reference`` and the regeneration design: a progress log of
one JSON snapshot per line, an output of SpecForge rows with ``id`` and ``regen``, a ``.job.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def snap(t: float, done: int, *, total: int = 1000, failed: int = 0, skipped: int = 0, in_flight: int = 0,
         state: str = "running", started_at: float = 1_764_000_000.0, req_s: float | None = None,
         tok_s: float | None = None, **extra: Any) -> dict[str, Any]:
    s = {"t": t, "state": state, "started_at": started_at, "total": total, "done": done, "failed": failed,
         "skipped": skipped, "in_flight": in_flight, "remaining": total - done - failed - skipped,
         "prompt_tokens": done * 100, "completion_tokens": done * 500, "req_s": req_s, "tok_s": tok_s,
         "window_s": 30}
    s.update(extra)
    return s


def line(obj: Any) -> bytes:
    return (json.dumps(obj) + "\n").encode()


def append(path: Path, *objs: Any, raw: bytes = b"") -> None:
    with open(path, "ab") as f:
        for o in objs:
            f.write(line(o))
        f.write(raw)


def out_row(rid: str, answer: str, *, dataset: str = "ds", prompt: str = "question?", tokens: int = 10) -> dict:
    return {"id": rid, "status": "success",
            "regen": {"server": "http://127.0.0.1:30000", "prompt_tokens": 5, "completion_tokens": tokens,
                      "finish_reason": "stop", "dataset": dataset, "t": 1_764_000_000.0},
            "conversations": [{"role": "user", "content": prompt}, {"role": "assistant", "content": answer}]}


def in_row(rid: str, prompt: str, answer: str) -> dict:
    return {"id": rid, "conversations": [{"role": "user", "content": prompt},
                                         {"role": "assistant", "content": answer}]}
