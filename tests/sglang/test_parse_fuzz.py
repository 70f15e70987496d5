"""Fuzz: thousands of mutated real log lines through the per-line parser, the ingester's vectorised
and per-line paths, and the CLI.  No exception anywhere; the two paths agree record for record; every
line is counted, and every line carrying a batch label is either a record or rejected with a reason.

Seeded, so a failure reproduces; sized to run in a few seconds on a loaded 2-core machine."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from backend.sglang import bulkparse
from backend.sglang.ingest import MAX_LINE, LogIngester
from backend.sglang.logparse import BadBatchLine, parse_line
from tests.sglang.test_logparse import DECODE_CASES, FATALS, PREFILL_CASES, STARTUP
from tests.sglang.test_parse_robust import BAD, GOOD
from tests.sglang.test_startup_progress import SEQUENCE

REPO = Path(__file__).resolve().parents[2]
SEED = 20261130
N_LINES = 6000

REAL = ([c[0] for c in DECODE_CASES + PREFILL_CASES] + [c[0] for c in STARTUP] + [c[0] for c in FATALS]
        + [c[0] for c in SEQUENCE] + [GOOD] + [b[0][:300] for b in BAD] + [
            '[2025-11-06 01:22:14] INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
            '  File "/sglang/srt/model_executor/cuda_graph_runner.py", line 300, in __init__',
            "Possible solutions:",
            "[2025-11-06 01:22:14 TP0] Cache flushed successfully!",
        ])

_NUMBER = re.compile(rb"[0-9]+(?:\.[0-9]+)?")
_WEIRD_NUMBERS = [b"-1", b"-0.5", b"nan", b"inf", b"-inf", b"1e999", b"1e3", b"\xef\xbc\x91\xef\xbc\x92",  # "１２"
                  b"\xd9\xa3", b"99999999999999999999999", b"9" * 5000, b"0.5", b"1.5", b"5_000", b"+3", b" 7",
                  b"", b"1.2.3", b"0x10", b"00000000000000000001"]
_BYTES = [b"\xff", b"\xc3", b"\xed\xa0\x80", b",", b":", b" ", b", ", b": ", b"[", b"]", b"(", b".", b"%", b"\t",
          b"#", b"-", b"\xef\xbc\x91", b"\xc3\xa9"]
# NUL and what Python takes for a line break: the vectorised path leaves a piece holding one to the per-line
# path, so they are rarer, to leave most pieces to the vectorised path
_BREAKS = [b"\x00", b"\r", b"\x0b", b"\x0c", b"\x1c", b"\x1f", b"\xc2\x85", b"\xe2\x80\xa8", b"\xe2\x80\xa9"]
_SEPARATORS = [(b", ", b","), (b", ", b";"), (b": ", b":"), (b": ", b" : "), (b", ", b",, "), (b".", b"")]


def _mutate(rng: random.Random, line: bytes) -> bytes:
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        op = rng.randrange(8)
        if op == 0 and line:  # one byte replaced
            i = rng.randrange(len(line))
            line = line[:i] + rng.choice(_BYTES) + line[i + 1:]
        elif op == 1:  # a number replaced by an impossible or odd one
            nums = list(_NUMBER.finditer(line))
            if nums:
                m = rng.choice(nums)
                line = line[:m.start()] + rng.choice(_WEIRD_NUMBERS) + line[m.end():]
        elif op == 2:  # separators changed
            a, b = rng.choice(_SEPARATORS)
            line = line.replace(a, b, rng.choice((1, -1)))
        elif op == 3 and line:  # cut short
            line = line[:rng.randrange(len(line))]
        elif op == 4 and line:  # a piece repeated (longer lines; now and then over the line limit)
            i, j = sorted(rng.randrange(len(line) + 1) for _ in range(2))
            times = rng.choice((2, 3, 50)) if rng.random() < 0.995 else MAX_LINE // max(1, j - i) + 2
            line = line[:j] + line[i:j] * times + line[j:]
        elif op == 5 and line:  # bytes inserted
            i = rng.randrange(len(line) + 1)
            line = line[:i] + rng.choice(_BREAKS if rng.random() < 0.02 else _BYTES) + line[i:]
        elif op == 6:  # the label mangled
            line = line.replace(b"batch,", rng.choice((b"batch ,", b"batch", b"batch:", b"batch [", b"batch [1]")))
        elif op == 7:  # a digit swapped for another (a plausible value)
            digits = [k for k, c in enumerate(line) if 48 <= c <= 57]
            if digits:
                k = rng.choice(digits)
                line = line[:k] + bytes([48 + rng.randrange(10)]) + line[k + 1:]
    # keep line ends unambiguous for the count below: "\r\n" would be one line end split by a read boundary
    return line.replace(b"\n", b" ").replace(b"\r ", b"\r.")


def _corpus() -> tuple[bytes, list[str]]:
    rng = random.Random(SEED)
    real = [x.encode("utf-8") for x in REAL]
    out = []
    for k in range(N_LINES):
        line = rng.choice(real)
        if rng.random() < 0.85:
            line = _mutate(rng, line)
        if line.endswith(b"\r"):
            line += b"."
        out.append(line)
        if k % 400 == 399:
            out.append(b"")  # an empty line now and then
    data = b"\n".join(out) + b"\n"
    return data, data.decode("utf-8", "replace").splitlines()


def _reference(lines: list[str]) -> tuple[list, int]:
    """(records, rejected) from parse_line on each line alone; any exception other than BadBatchLine fails."""
    recs, rejected = [], 0
    for line in lines:
        if len(line) > MAX_LINE:
            rejected += 1  # cut by the ingester, never parsed
            continue
        try:
            rec = parse_line(line)
        except BadBatchLine:
            rejected += 1
            continue
        if rec is not None and rec.kind in ("decode", "prefill"):
            recs.append(rec)
    return recs, rejected


def _labelled(lines: list[str]) -> tuple[int, int]:
    """Lines whose first batch label is followed by '.', ',' or ' [' (must be counted), and lines with a label."""
    must = may = 0
    for line in lines:
        p, n = line.find("Decode batch"), 12
        if p < 0:
            p, n = line.find("Prefill batch"), 13
        if p < 0:
            continue
        may += 1
        if line[p + n:p + n + 1] in (".", ",") or line[p + n:p + n + 2] == " [":
            must += 1
    return must, may


def _ingest(path: Path, bulk: bool) -> LogIngester:
    ing = LogIngester(path, max_points=N_LINES * 2, chunk_bytes=16 * 1024, bulk=bulk)
    ing.bulk_min_bytes = 0
    while ing.poll(max_bytes=256 * 1024):
        pass
    ing.flush()
    return ing


def test_fuzzed_lines_through_both_paths_and_the_cli(tmp_path):
    data, lines = _corpus()
    path = tmp_path / "fuzz.log"
    path.write_bytes(data)
    recs, rejected = _reference(lines)
    must, may = _labelled(lines)
    assert must <= len(recs) + rejected <= may + sum(len(x) > MAX_LINE for x in lines)
    assert len(recs) > N_LINES // 10 and rejected > N_LINES // 10  # the corpus exercises both outcomes

    paths = [False] + ([True] if bulkparse.AVAILABLE else [])
    ingesters = {bulk: _ingest(path, bulk) for bulk in paths}
    for bulk, ing in ingesters.items():
        st = ing.stats
        assert st.lines == len(lines), bulk
        assert st.decode_lines + st.prefill_lines == len(recs), bulk
        assert st.unparsed_lines == rejected, bulk
        dec = ing.decode.as_lists()
        want = [r for r in recs if r.kind == "decode"]
        assert dec["accept_len"] == [r.accept_len for r in want], bulk
        assert dec["gen_throughput"] == [r.gen_throughput for r in want], bulk
        assert dec["running_req"] == [r.running_req for r in want], bulk
        assert dec["ts"] == [r.ts for r in want], bulk
        pre = ing.prefill.as_lists()
        assert pre["new_token"] == [r.new_token for r in recs if r.kind == "prefill"], bulk
    if bulkparse.AVAILABLE:
        fast, ref = ingesters[True], ingesters[False]
        assert fast.bulk_pieces >= 20  # most pieces went through the vectorised path
        assert fast.stats == ref.stats
        assert fast.decode.as_lists() == ref.decode.as_lists()
        assert fast.prefill.as_lists() == ref.prefill.as_lists()
        assert list(fast.unparsed) == list(ref.unparsed)
        assert fast.startup.phase == ref.startup.phase and fast.startup.percent == ref.startup.percent

    r = subprocess.run([sys.executable, "-m", "backend.cli", "servers", "parselog", str(path), "--kinds", "decode,prefill"],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = [json.loads(x) for x in r.stdout.splitlines()]
    assert len(out) == len(recs)
    assert [x.get("accept_len") for x in out if x["kind"] == "decode"] == [r.accept_len for r in want]
    assert f"{rejected} unparsed" in r.stderr


@pytest.mark.parametrize("seed", range(3))
def test_single_mutations_never_raise_anything_but_a_rejection(seed):
    rng = random.Random(seed)
    for line in REAL:
        raw = line.encode("utf-8")
        for _ in range(60):
            text = _mutate(rng, raw).decode("utf-8", "replace")
            try:
                parse_line(text)
            except BadBatchLine as exc:
                assert str(exc)
