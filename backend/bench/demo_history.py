"""The demo workspace's benchmark history: the numbers of the story Specdeck was built from.

A GLM-5-NVFP4 server, one request at a time: 90 tok/s without speculation;
with the ``EAGLE`` flag instead of ``EAGLE3`` the draft got the wrong hidden
states and accept_len sat at 1.0; fixed, EAGLE-3 with CUDA graphs and 5 draft
tokens gave 82.3 tok/s at accept_len about 2.1, slower than no speculation;
another EAGLE-3 drafter (AQ-MedAI's) gave 50.5 tok/s.  What was not recorded
stays empty (N/A), never made up: the flag mistake's tok/s, the other
drafter's accept_len, the lengths and the dates.  The load is not stated
either; 90 tok/s is one stream of a large model (the same server did about
830 tok/s batched), so the rows say concurrency 1.

:func:`install_demo_history` writes the CSV into the demo workspace and
imports it into the workspace's store like any other CSV.
"""

from __future__ import annotations

from pathlib import Path

from backend.bench.importers import import_file
from backend.filemodes import make_private_dirs, write_private
from state.bench import BenchStore
from state.store import Store

CSV_NAME = "bench/history.csv"
SERVER = "glm5"
TARGET = "GLM-5-NVFP4"
# What the story did about the draft's low accept_len: it had the target answer the training
# prompts again (the regeneration), so the next draft learns the target's own words.
REGENERATED_SAMPLES = 83_288

HISTORY_CSV = f"""\
# Benchmark history of the story behind Specdeck (see backend/bench/demo_history.py).
# Hand-entered numbers; empty cells were not recorded. Columns: backend/bench/importers_csv.py.
server,label,target_model,draft_model,algorithm,num_draft_tokens,cuda_graph,concurrency,output_tok_s,accept_len
{SERVER},baseline without speculation,{TARGET},,NONE,,,1,90.0,
{SERVER},EAGLE flag instead of EAGLE3: draft got final-layer states only,{TARGET},GLM-5 EAGLE-3 (K2.5-trained),EAGLE,,,1,,1.0
{SERVER},EAGLE3 + CUDA graphs + 5 draft tokens,{TARGET},GLM-5 EAGLE-3 (K2.5-trained),EAGLE3,5,true,1,82.3,2.1
{SERVER},the other drafter,{TARGET},AQ-MedAI EAGLE-3,EAGLE3,,,1,50.5,
"""


def install_demo_history(root: Path, store_path: Path | None = None) -> int:
    """Write the history CSV under ``root`` (if missing) and import it; return how many results are new.

    Importing again adds nothing (results are keyed by file and line)."""
    path = root / CSV_NAME
    if not path.exists():
        make_private_dirs(path.parent)
        write_private(path, HISTORY_CSV)
    parsed = import_file(path)
    if parsed.problems:  # the file is ours: a problem here is a bug, not user input
        raise ValueError("; ".join(str(p) for p in parsed.problems))
    with Store(store_path or root / "state.db") as store:
        bench = BenchStore(store)
        return sum(1 for r in parsed.results if bench.insert(r).new)
