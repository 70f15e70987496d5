"""A small training file written as a regeneration writes its output (the regeneration's own
``success_record`` and ``encode``: ``{"id", "status": "success", "regen", "conversations"}`` with role/content
turns ending in the assistant's), made from fixed tables: the demo catalog's coding tasks and languages as
prompts, its code snippets and the simulated model's words as replies.  For runs on a fresh workspace,
before any regeneration has produced data, and for tests.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

from backend.filemodes import make_private_dirs, open_private
from backend.regen.demo_data import LANGS, SNIPPETS, TASKS
from backend.regen.output import encode, success_record
from backend.sim.tokenizer import GEN_WORDS


def demo_rows(rows: int = 200, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    snippets = list(SNIPPETS.items())
    out = []
    for i in range(rows):
        task = TASKS[i % len(TASKS)]
        lang = LANGS[(i // len(TASKS)) % len(LANGS)]
        code_lang, code = snippets[i % len(snippets)]
        words = " ".join(rng.choice(GEN_WORDS) for _ in range(rng.randint(12, 40)))
        reply = (f"Here is a {code_lang} helper that the {lang} version can follow:\n{code}\n"
                 f"To {task}, {words}.")
        prompt = {"role": "user", "content": f"In {lang}, {task}."}
        out.append(success_record(f"demo-train-{i:04d}", {"conversations": [prompt]},
                                  [prompt, {"role": "assistant", "content": reply}],
                                  {"dataset": "demo", "line": i + 1}))
    return out


def write_demo_data(path: str | Path, rows: int = 200, seed: int = 0) -> Path:
    """Write the rows as JSON lines (replaced atomically); returns the path."""
    p = Path(path)
    make_private_dirs(p.parent)  # outputs/regen/ of a new workspace: 0700, as a regeneration makes it
    tmp = p.with_name(p.name + ".tmp")
    with open_private(tmp, "wb") as f:
        for r in demo_rows(rows, seed):
            f.write(encode(r))
    os.replace(tmp, p)
    return p
