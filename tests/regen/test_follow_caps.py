"""A line longer than the read limit in a progress log, a SpecForge output or a run's output: reported
with its size and the limit, passed over without being held, and the lines after it still read."""

from __future__ import annotations

import json

from backend.regen.follow import CutLine, LineReader, ProgressFollower
from backend.regen.follow_specforge import SpecForgeFollower
from backend.regen.samples import find_row, last_row, read_job, row_at, row_before
from backend.regen.output import RunFiles
from tests.regen.regen_fixtures import append, line, out_row, snap

T0 = 1_764_000_000.0
MiB = 1 << 20


def long_line(path, size: int, *, newline: bool = True) -> int:
    """Append a line of ``size`` zero bytes (sparse: no disk used); the offset it starts at."""
    with open(path, "ab") as f:
        start = f.tell()
    with open(path, "r+b") as f:
        f.truncate(start + size)
    if newline:
        append(path, raw=b"\n")
    return start


def test_line_reader_cuts_a_line_over_its_cap_and_goes_on(tmp_path):
    p = tmp_path / "f.jsonl"
    p.write_bytes(b'{"a": 1}\n' + b"x" * 10_000 + b'\n{"b": 2}\n')
    r = LineReader(p, max_line=1000)
    got = r.read(max_bytes=100)
    assert got == [(0, b'{"a": 1}')]
    (off, cut), = r.read(max_bytes=100)
    assert off == 9 and isinstance(cut, CutLine) and cut.size == 10_000 and len(cut) <= 4096
    assert cut.note(p, off, 1000) == f"{p} at byte 9: a line of 9.8 KiB, over the 1,000 bytes read limit; not read"
    assert r.read(max_bytes=100) == [(10_010, b'{"b": 2}')]


def test_line_reader_cuts_a_long_line_inside_one_read(tmp_path):
    p = tmp_path / "f.jsonl"
    p.write_bytes(b"y" * 3000 + b'\n{"c": 3}\n')
    (_, cut), second = LineReader(p, max_line=1000).read(max_bytes=1 << 20)
    assert isinstance(cut, CutLine) and cut.size == 3000 and second == (3001, b'{"c": 3}')


def test_line_reader_passes_a_long_line_still_being_written(tmp_path):
    p = tmp_path / "f.jsonl"
    p.write_bytes(b"z" * 5000)  # no newline yet: the writer is in the middle of it
    r = LineReader(p, max_line=1000)
    assert r.read() == []
    assert r.offset == 5000  # passed over, not read again next time
    append(p, raw=b"z" * 5000)
    assert r.read() == [] and r.offset == 10_000
    append(p, raw=b'zz\n{"d": 4}\n')
    (off, cut), after = r.read()  # its end, then what follows it, in the same read
    assert off == 0 and isinstance(cut, CutLine) and cut.size == 10_002
    assert after == (10_003, b'{"d": 4}') and r.read() == []


def test_progress_follower_reports_a_huge_line_and_reads_past_it(tmp_path):
    prog = tmp_path / "run.progress.jsonl"
    append(prog, snap(T0, 1))
    long_line(prog, 40 * MiB)  # over the 16 MiB row limit, and over the size that is sampled
    append(prog, snap(T0 + 2, 2))
    f = ProgressFollower(tmp_path / "run.jsonl").poll()
    assert f.latest["done"] == 2


def test_progress_follower_says_which_line_was_over_the_limit(tmp_path):
    prog = tmp_path / "run.progress.jsonl"
    start = long_line(prog, 20 * MiB)
    append(prog, snap(T0 + 2, 2))
    f = ProgressFollower(tmp_path / "run.jsonl").poll()
    assert f.latest["done"] == 2 and f.bad_lines == 1
    assert f.last_bad == f"{prog} at byte {start}: a line of 20 MiB, over the 16 MiB read limit; not read"


def test_progress_follower_catches_up_on_a_big_append_over_several_reads(tmp_path):
    prog = tmp_path / "run.progress.jsonl"
    append(prog, snap(T0, 0))
    f = ProgressFollower(tmp_path / "run.jsonl").poll()
    pad = "p" * 20_000
    with open(prog, "ab") as fh:  # ~40 MB appended between two polls: more than one read holds
        for i in range(1, 2001):
            fh.write(line(snap(T0 + i, i, pad=pad)))
    f.poll()
    assert f.latest["done"] == 2000


def test_specforge_follower_counts_a_huge_row_as_bad(tmp_path):
    out = tmp_path / "regen.jsonl"
    append(out, out_row("a", "x"))
    start = long_line(out, 20 * MiB)
    append(out, out_row("b", "y"))
    (tmp_path / "input.jsonl").write_text("{}\n{}\n{}\n")
    f = SpecForgeFollower(tmp_path / "input.jsonl", out)
    for _ in range(10):
        f.poll()
    fc = f.files["success"]
    assert fc.rows == 2 and fc.bad == 1
    assert fc.last_bad == f"{out} at byte {start}: a line of 20 MiB, over the 16 MiB read limit; not read"


def test_sample_viewer_refuses_a_row_over_the_limit_and_steps_past_it(tmp_path):
    out = tmp_path / "regen.jsonl"
    append(out, out_row("a", "x"))
    start = long_line(out, 20 * MiB)
    end = start + 20 * MiB + 1
    append(out, out_row("b", "y"))
    big = row_at(out, start)
    assert big.record is None and (big.start, big.end) == (start, end)
    assert big.error == f"{out} at byte {start}: a row of 20 MiB, over the 16 MiB read limit; not shown"
    assert row_at(out, big.end).record["id"] == "b"
    assert row_at(out, start + 5 * MiB).record["id"] == "b"  # an offset inside it: on to the next row
    back = row_before(out, end)
    assert back.record is None and "over the 16 MiB read limit" in back.error and back.start == start
    assert row_before(out, start).record["id"] == "a"
    assert last_row(out).record["id"] == "b"
    assert find_row(out, "b").record["id"] == "b"


def test_a_huge_job_file_is_not_read(tmp_path):
    files = RunFiles.of(tmp_path / "regen.jsonl")
    with open(files.job, "wb") as f:
        f.write(json.dumps({"root": "/"}).encode()[:-1])
        f.truncate(1 << 30)
    assert read_job(files) is None
