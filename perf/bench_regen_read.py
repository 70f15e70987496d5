"""Benchmark: reading regeneration inputs (backend.regen.datasets) at the size of the real run.

    python perf/bench_regen_read.py [--rows 83288] [--prompt-chars 1500] [--dir /tmp] [--keep]

Writes the same rows (SpecForge records, ShareGPT turns and prompt-only rows mixed, plus a few
bad rows) as JSON lines, as one JSON array (.json) and as Parquet, then reads each in a fresh
process and prints rows/s, MB/s and the process's peak resident memory:

* the floor: ``for line in f: json.loads(line)`` over the JSONL file (no checks, no ids);
* ``read_rows`` over each of the three files (ids, validation, duplicate check);
* ``count_rows`` over the JSONL file with first_turn_only and max_prompt_chars (what a job does
  once at start to know its total).

The files are deleted at the end unless --keep is given.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def make_records(rows: int, prompt_chars: int):
    unit = "Write a function that merges two sorted lists; explain its complexity. "
    body = (unit * (prompt_chars // len(unit) + 1))[:prompt_chars]
    for i in range(rows):
        k = i % 3
        text = f"{i}: {body}"
        if i % 10_000 == 9_999:
            yield {"conversations": [{"from": "robot", "value": text}]}  # a bad row now and then
        elif k == 0:
            yield {"id": f"sf-{i}", "conversations": [{"role": "system", "content": "Be precise."},
                                                      {"role": "user", "content": text},
                                                      {"role": "assistant", "content": "(original answer)"}]}
        elif k == 1:
            yield {"id": f"sg-{i}", "conversations": [{"from": "human", "value": text}, {"from": "gpt", "value": "ok"}]}
        else:
            yield {"prompt": text}


def write_files(d: Path, rows: int, prompt_chars: int) -> dict[str, Path]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    jl, ja, pqf = d / "inputs.jsonl", d / "inputs.json", d / "inputs.parquet"
    with open(jl, "w", encoding="utf-8") as a, open(ja, "w", encoding="utf-8") as b:
        b.write("[\n")
        for i, rec in enumerate(make_records(rows, prompt_chars)):
            line = json.dumps(rec, ensure_ascii=False)
            a.write(line + "\n")
            b.write(("" if i == 0 else ",\n") + line)
        b.write("\n]\n")
    # Parquet: the prompt-only shape (one schema per file), same count and prompt sizes
    turn = pa.struct([("role", pa.string()), ("content", pa.string())])
    schema = pa.schema([("id", pa.string()), ("conversations", pa.list_(turn))])
    with pq.ParquetWriter(pqf, schema) as w:
        batch: list[dict] = []
        for i, rec in enumerate(make_records(rows, prompt_chars)):
            text = rec.get("prompt") or next(t.get("content", t.get("value")) for t in rec["conversations"]
                                             if t.get("role", t.get("from")) in ("user", "human", "robot"))
            batch.append({"id": f"pq-{i}", "conversations": [{"role": "user", "content": text}]})
            if len(batch) == 4096:
                w.write_table(pa.Table.from_pylist(batch, schema=schema), row_group_size=1024)
                batch = []
        if batch:
            w.write_table(pa.Table.from_pylist(batch, schema=schema), row_group_size=1024)
    return {"jsonl": jl, "json-array": ja, "parquet": pqf}


def one(kind: str, path: str) -> None:
    """Run one measurement in this process and print a JSON line."""
    from backend.regen.datasets import Skipped, count_rows, read_rows

    p = Path(path)
    t0 = time.perf_counter()
    rows = skipped = 0
    if kind == "floor":
        with open(p, "rb") as f:
            for line in f:
                json.loads(line)
                rows += 1
    elif kind == "count":
        c = count_rows(p, dataset="d", first_turn_only=True, max_prompt_chars=100_000)
        rows, skipped = c.rows, c.skipped
    else:
        for item in read_rows(p, dataset="d"):
            if isinstance(item, Skipped):
                skipped += 1
            else:
                rows += 1
    dt = time.perf_counter() - t0
    print(json.dumps({"rows": rows, "skipped": skipped, "s": dt, "peak_rss_mb": peak_rss_mb()}))


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM; ru_maxrss would carry the parent's over exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def baseline_rss() -> float:
    """Peak RSS of a process that imports the reader (and pyarrow) and reads nothing."""
    code = ("import backend.regen.datasets, pyarrow.parquet, bench.bench_regen_read as b;"
            "print(b.peak_rss_mb())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True,
                         env=dict(os.environ, PYTHONPATH=str(REPO)))
    return float(out.stdout)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=83_288)
    ap.add_argument("--prompt-chars", type=int, default=1500)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--one", nargs=2, metavar=("KIND", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        one(*args.one)
        return 0
    d = Path(tempfile.mkdtemp(prefix="specdeck-regen-read-", dir=args.dir))
    try:
        t0 = time.perf_counter()
        files = write_files(d, args.rows, args.prompt_chars)
        print(f"wrote {args.rows:,} rows ({args.prompt_chars:,}-character prompts) in {time.perf_counter() - t0:.1f} s "
              f"to {d}")
        print(f"peak RSS of a process that only imports the reader and pyarrow: {baseline_rss():.0f} MB")
        print(f"{'what':<28} {'file MB':>8} {'rows':>8} {'skipped':>8} {'s':>7} {'rows/s':>9} {'MB/s':>7} {'peak RSS MB':>12}")
        runs = [("floor: json.loads per line", "floor", files["jsonl"]),
                ("read_rows JSONL", "read", files["jsonl"]),
                ("read_rows JSON array", "read", files["json-array"]),
                ("read_rows Parquet", "read", files["parquet"]),
                ("count_rows JSONL, filters", "count", files["jsonl"])]
        for label, kind, path in runs:
            out = subprocess.run([sys.executable, __file__, "--one", kind, str(path)], capture_output=True, text=True,
                                 cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
            if out.returncode != 0:
                print(f"{label}: failed\n{out.stderr}")
                return 1
            r = json.loads(out.stdout)
            mb = path.stat().st_size / 1e6
            print(f"{label:<28} {mb:>8.0f} {r['rows']:>8,} {r['skipped']:>8,} {r['s']:>7.2f} "
                  f"{(r['rows'] + r['skipped']) / r['s']:>9,.0f} {mb / r['s']:>7.0f} {r['peak_rss_mb']:>12.0f}")
    finally:
        if args.keep:
            print(f"kept {d}")
        else:
            shutil.rmtree(d, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
