"""A small training file in the shape a regeneration writes (``{"id", "status": "success", "regen",
"conversations"}`` with role/content turns ending in the assistant's), made from fixed tables: the demo
catalog's coding tasks and languages as prompts, its code snippets and the simulated model's words as
replies.  For runs on a fresh workspace, before any regeneration has produced data, and for tests.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

from backend.regen.demo_data import LANGS, SNIPPETS, TASKS
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
        out.append({"id": f"demo-train-{i:04d}", "status": "success",
                    "regen": {"dataset": "demo", "line": i + 1},
                    "conversations": [{"role": "user", "content": f"In {lang}, {task}."},
                                      {"role": "assistant", "content": reply}]})
    return out


def write_demo_data(path: str | Path, rows: int = 200, seed: int = 0) -> Path:
    """Write the rows as JSON lines (replaced atomically); returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        for r in demo_rows(rows, seed):
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    os.replace(tmp, p)
    return p
