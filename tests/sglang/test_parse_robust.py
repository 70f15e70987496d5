"""Bad input cannot break or fool the log parsers: each bad line is rejected with its reason and
counted, the good lines around it are kept, in the per-line parser, the vectorised one and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest

from backend.sglang import bulkparse
from backend.sglang.ingest import MAX_LINE, LogIngester
from backend.sglang.logparse import BadBatchLine, DecodeBatch, parse_line

REPO = Path(__file__).resolve().parents[2]

GOOD = ("[2026-04-08 14:05:21 TP0] Decode batch, #running-req: 5, #token: 20800, token usage: 0.29, "
        "accept len: 2.50, accept rate: 0.50, cuda graph: True, gen throughput (token/s): 144.95, #queue-req: 0")
GOOD_TS = time.mktime(time.strptime("2026-04-08 14:05:21", "%Y-%m-%d %H:%M:%S"))

# (line, words its reason must hold)
BAD = [
    (GOOD.replace("14:05:21 TP0]", "14:05:21." + "7" * 5000 + " TP0]"), "5000 digits"),
    (GOOD.replace("(token/s): 144.95", "(token/s): -144.95"), "'gen throughput (token/s)'"),
    (GOOD.replace("#running-req: 5", "#running-req: -5"), "negative"),
    (GOOD.replace("#token: 20800", "#token: -1"), "negative"),
    (GOOD.replace("token usage: 0.29", "token usage: -0.29"), "negative"),
    (GOOD.replace("accept len: 2.50", "accept len: nan"), "not a finite number"),
    (GOOD.replace("(token/s): 144.95", "(token/s): inf"), "not a finite number"),
    (GOOD.replace("(token/s): 144.95", "(token/s): 1e999"), "not a finite number"),
    (GOOD.replace("(token/s): 144.95", "(token/s): 1e3"), "exponent"),
    (GOOD.replace("accept len: 2.50", "accept len: 0.50"), "'accept len': '0.50' is out of range"),
    (GOOD.replace("accept rate: 0.50", "accept rate: 1.50"), "'accept rate': '1.50' is out of range"),
    (GOOD.replace("#running-req: 5", "#running-req: １２"), "not ASCII"),  # full-width digits: int() takes them
    (GOOD.replace("#queue-req: 0", "#queue-req: ٣"), "not ASCII"),  # Arabic-Indic digit
    (GOOD.replace("#running-req: 5", "#running-req: 123456789012345678901234567890"), "64-bit"),
    (GOOD.replace("#running-req: 5", "#running-req: 5_000"), "'#running-req': '5_000' is not a valid value"),
    (GOOD.replace("Decode batch,", "Decode batch ,"), "followed by ' ,"),
    (GOOD.replace("Decode batch,", "Decode batch:"), "followed by ':"),
    (GOOD.replace("Decode batch,", "Decode batch [" + "9" * 5000 + "],"), "is not a number"),
]


@pytest.mark.parametrize("line,words", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_each_bad_line_is_rejected_with_its_reason(line, words):
    with pytest.raises(BadBatchLine) as err:
        parse_line(line)
    assert words in str(err.value)


def test_prose_and_quoted_source_are_not_batch_lines():
    for line in ("[2026-04-08 14:05:21] Decode batch size is too large for the graph",
                 "[2026-04-08 14:05:21] the Decode batchsize is large",
                 '    msg = f"Decode batch{iter_msg}, #running-req: {num_running_reqs}, "'):
        assert parse_line(line) is None, line


def _log(tmp_path, lines: list[str]) -> Path:
    path = tmp_path / "srv.log"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _ingest(path: Path, bulk: bool, chunk: int = 1 << 16) -> LogIngester:
    ing = LogIngester(path, max_points=100000, chunk_bytes=chunk, bulk=bulk)
    ing.bulk_min_bytes = 0
    ing.poll()
    ing.flush()
    return ing


@pytest.mark.parametrize("bulk", [True, False], ids=["vectorised", "per-line"])
def test_bad_lines_among_good_ones_are_counted_one_by_one(tmp_path, bulk):
    if bulk and not bulkparse.AVAILABLE:
        pytest.skip("polars is not installed")
    lines: list[str] = []
    bad_at = []
    for line, _ in BAD:
        lines.extend([GOOD] * 40)
        lines.append(line)
        bad_at.append(len(lines))  # 1-based line number
    lines.extend([GOOD] * 40)
    ing = _ingest(_log(tmp_path, lines), bulk)
    st = ing.stats
    assert (st.lines, st.decode_lines, st.unparsed_lines) == (len(lines), 40 * (len(BAD) + 1), len(BAD))
    assert [u.line_no for u in ing.unparsed] == bad_at[-20:]
    assert ing.decode.as_lists()["accept_len"] == [2.5] * (40 * (len(BAD) + 1))
    assert set(ing.decode.as_lists()["ts"]) == {GOOD_TS}
    if bulk:
        assert ing.bulk_pieces > 0


def test_an_integer_wider_than_64_bits_does_not_drop_its_piece(tmp_path):
    if not bulkparse.AVAILABLE:
        pytest.skip("polars is not installed")
    wide = GOOD.replace("#running-req: 5", "#running-req: 99999999999999999999999")
    lines = [GOOD] * 1000 + [wide] + [GOOD] * 1001
    ing = _ingest(_log(tmp_path, lines), bulk=True, chunk=8 << 20)
    assert ing.bulk_pieces == 1
    assert (ing.stats.decode_lines, ing.stats.unparsed_lines, ing.stats.lines) == (2001, 1, 2002)
    assert ing.unparsed[0].line_no == 1001 and "64-bit" in ing.unparsed[0].reason


def test_a_piece_the_columns_cannot_take_is_read_line_by_line(tmp_path, monkeypatch):
    if not bulkparse.AVAILABLE:
        pytest.skip("polars is not installed")

    def refuse(*_a, **_k):
        raise OverflowError("out of range for i64")

    monkeypatch.setattr(bulkparse, "records_frame", refuse)
    # a repeated key: the vectorised path hands the line to the per-line parser (then into records_frame)
    odd = GOOD.replace(", #queue-req: 0", ", #queue-req: 0, #new-key: 1, #new-key: 2")
    lines = [GOOD] * 500 + [odd] + [GOOD] * 500
    ing = _ingest(_log(tmp_path, lines), bulk=True, chunk=8 << 20)
    assert ing.bulk_pieces == 0
    assert (ing.stats.decode_lines, ing.stats.unparsed_lines, ing.stats.lines) == (1001, 0, 1001)
    assert len(ing.decode.as_lists()["ts"]) == 1001


def test_cli_prints_every_good_line_and_exits_0(tmp_path):
    lines = [GOOD.replace("#running-req: 5", f"#running-req: {i}") for i in range(30)]
    lines[10] = BAD[0][0]  # the 5,000-digit fraction
    lines[20] = BAD[5][0]  # nan
    path = _log(tmp_path, lines)
    r = subprocess.run([sys.executable, "-m", "backend.cli", "servers", "parselog", str(path)], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    recs = [json.loads(x) for x in r.stdout.splitlines()]
    assert [x["running_req"] for x in recs] == [i for i in range(30) if i not in (10, 20)]
    assert f"{path}:11: unparsed: timestamp: the fraction of a second has 5000 digits" in r.stderr
    assert f"{path}:21: unparsed: field 'accept len': 'nan'" in r.stderr
    assert "2 unparsed" in r.stderr


def test_cli_exits_2_for_an_unreadable_file(tmp_path):
    r = subprocess.run([sys.executable, "-m", "backend.cli", "servers", "parselog", str(tmp_path / "missing.log")], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "cannot read" in r.stderr and not r.stdout


def test_a_line_without_a_newline_keeps_memory_bounded(tmp_path):
    path = tmp_path / "srv.log"
    size = 24 << 20
    with open(path, "wb") as fh:
        fh.write(GOOD.encode() + b"\n")
        for _ in range(size >> 20):
            fh.write(b"x" * (1 << 20))
    ing = LogIngester(path, chunk_bytes=1 << 20, bulk=False)
    tracemalloc.start()
    try:
        while ing.poll(max_bytes=4 << 20):
            pass
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 6 << 20, peak  # a few chunks, not the 24 MiB line
    with open(path, "ab") as fh:
        fh.write(b"\n" + GOOD.encode() + b"\n")
    ing.poll()
    st = ing.stats
    assert (st.lines, st.decode_lines, st.cut_lines, st.unparsed_lines) == (3, 2, 1, 1)
    assert ing.unparsed[0].line_no == 2 and f"{size:,} bytes" in ing.unparsed[0].reason
    assert ing.tail[-2].endswith(f"[cut: {size:,} bytes]") and len(ing.tail[-2]) < 500
    assert isinstance(ing.last_decode, DecodeBatch)


@pytest.mark.parametrize("bulk", [True, False], ids=["vectorised", "per-line"])
def test_an_over_long_complete_line_is_cut_the_same_way_by_both_paths(tmp_path, bulk):
    if bulk and not bulkparse.AVAILABLE:
        pytest.skip("polars is not installed")
    long_line = GOOD + ", " + ", ".join(f"#k{i}: {i}" for i in range(MAX_LINE // 8))
    assert len(long_line) > MAX_LINE
    ing = _ingest(_log(tmp_path, [GOOD, long_line, GOOD]), bulk, chunk=8 << 20)
    st = ing.stats
    assert (st.lines, st.decode_lines, st.cut_lines, st.unparsed_lines) == (3, 2, 1, 1)
    assert ing.unparsed[0].line_no == 2 and f"{len(long_line):,} characters" in ing.unparsed[0].reason
