"""Inputs are streamed: reading a 50 MB file holds a small fraction of it in memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path

from backend.regen.datasets import Skipped, read_rows

REPO = Path(__file__).resolve().parents[2]
MB = 1024 * 1024


def _write_jsonl(path: Path, size: int) -> int:
    body = "fn main() { println!(\"héllo\"); }\n" * 250  # about 8 KB a row
    n = 0
    with open(path, "w", encoding="utf-8") as f:
        while f.tell() < size:
            n += 1
            f.write(json.dumps({"id": f"row-{n:06d}", "conversations": [
                {"role": "user", "content": f"{n}: {body}"}, {"role": "assistant", "content": "ok"}]}) + "\n")
    return n


def test_a_50_mb_jsonl_is_read_with_bounded_memory(tmp_path):
    f = tmp_path / "big.jsonl"
    n = _write_jsonl(f, 50 * MB)
    size = f.stat().st_size
    tracemalloc.start()
    try:
        rows = skipped = 0
        for item in read_rows(f, dataset="big"):
            if isinstance(item, Skipped):
                skipped += 1
            else:
                rows += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (rows, skipped) == (n, 0)
    assert size >= 50 * MB
    assert peak < size / 10, f"peak {peak / MB:.1f} MiB while reading a {size / MB:.0f} MiB file"


def test_an_oversized_line_is_never_held_whole(tmp_path):
    f = tmp_path / "huge-line.jsonl"
    with open(f, "w") as out:
        out.write('{"id": "a", "prompt": "before"}\n')
        out.write('{"prompt": "' + "y" * (40 * MB) + '"}\n')
        out.write('{"id": "b", "prompt": "after"}\n')
    tracemalloc.start()
    try:
        items = list(read_rows(f, dataset="d"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [i.line for i in items] == [1, 2, 3] and isinstance(items[1], Skipped)
    # at most the 8 MiB the limit allows is read at once, never the 40 MiB line
    assert peak < 20 * MB, f"peak {peak / MB:.1f} MiB for a 40 MiB line"


READ_PARQUET = textwrap.dedent("""
    import os, pathlib, sys, tracemalloc
    import pyarrow as pa
    from backend.regen.datasets import Row, read_rows
    tracemalloc.start()
    n = sum(1 for item in read_rows(pathlib.Path(sys.argv[1]), dataset="d") if isinstance(item, Row))
    _, py_peak = tracemalloc.get_traced_memory()
    print(n, py_peak, pa.default_memory_pool().max_memory())
""")


def test_a_50_mb_parquet_is_read_in_batches_with_bounded_memory(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    f = tmp_path / "big.parquet"
    rows = 6400
    texts = [os.urandom(4096).hex() for _ in range(rows)]  # incompressible, 8 KB a row
    pq.write_table(pa.table({"id": [f"r{i}" for i in range(rows)], "prompt": texts}), f,
                   row_group_size=256, compression="none")
    del texts
    size = f.stat().st_size
    # a fresh process, so Arrow's peak counts the reading alone
    out = subprocess.run([sys.executable, "-c", READ_PARQUET, str(f)], capture_output=True, text=True,
                         env=dict(os.environ, PYTHONPATH=str(REPO)), cwd=REPO, timeout=240)
    assert out.returncode == 0, out.stderr
    n, py_peak, arrow_peak = map(int, out.stdout.split())
    assert n == rows and size >= 50 * MB
    assert py_peak < size / 10, f"Python peak {py_peak / MB:.1f} MiB for a {size / MB:.0f} MiB file"
    # with Arrow's default pre-buffering the peak was the whole file (56 MiB here)
    assert arrow_peak < size / 5, f"Arrow peak {arrow_peak / MB:.1f} MiB for a {size / MB:.0f} MiB file"
