"""backend.readcap: reads never hold more than their cap, say when they cut, and name file and cap when a
file that is only useful whole is over it."""

from __future__ import annotations

import io
import json
import os

import pytest

from backend import readcap
from backend.readcap import (MiB, TooLarge, load_json_capped, read_bytes_capped, read_bytes_whole, read_text_capped,
                             readline_capped, size_text)


def sparse(path, head: bytes, size: int):
    """``head`` then zeros up to ``size`` bytes, without using the disk."""
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)
    return path


def test_size_text():
    assert size_text(1 << 30) == "1 GiB"
    assert size_text(16 * MiB) == "16 MiB"
    assert size_text(int(1.5 * MiB)) == "1.5 MiB"
    assert size_text(900) == "900 bytes"


def test_text_under_the_cap_is_whole(tmp_path):
    p = tmp_path / "a.txt"
    p.write_text("hello\n")
    assert read_text_capped(p, 100) == ("hello\n", False)
    assert read_text_capped(p, 6) == ("hello\n", False)  # exactly the cap is not a cut


def test_text_over_the_cap_is_cut_and_says_so(tmp_path):
    p = tmp_path / "a.txt"
    p.write_text("hello world\n")
    assert read_text_capped(p, 5) == ("hello", True)


def test_a_cut_never_splits_a_character(tmp_path):
    p = tmp_path / "a.txt"
    p.write_text("ab€€", encoding="utf-8")  # € is 3 bytes
    text, cut = read_text_capped(p, 4)  # falls inside the first €
    assert (text, cut) == ("ab", True)


def test_capped_read_reads_at_most_limit_plus_one(tmp_path, monkeypatch):
    p = sparse(tmp_path / "big", b"x", 64 * MiB)
    asked = []
    real = readcap._read_at_most
    monkeypatch.setattr(readcap, "_read_at_most", lambda f, n: (asked.append(n), real(f, n))[1])
    data, cut = read_bytes_capped(p, 1000)
    assert cut and len(data) == 1000 and asked == [1001]


def test_whole_read_over_the_cap_is_refused_unread(tmp_path, monkeypatch):
    p = sparse(tmp_path / "config.json", b"{", 1 << 30)
    monkeypatch.setattr(readcap, "_read_at_most", lambda f, n: pytest.fail("read a file over its cap"))
    with pytest.raises(TooLarge) as e:
        load_json_capped(p, 16 * MiB, "a model config")
    assert str(e.value) == f"{p}: 1 GiB, over the 16 MiB read limit for a model config; not read"
    assert e.value.size == 1 << 30 and e.value.limit == 16 * MiB
    assert isinstance(e.value, ValueError)  # callers that catch a bad JSON file catch this too


def test_whole_read_of_a_file_that_lies_about_its_size_stops_at_the_cap():
    # /dev/zero says it is 0 bytes long and never ends
    with pytest.raises(TooLarge, match="over the 1 KiB read limit"):
        read_bytes_whole("/dev/zero", 1024)


def test_json_under_the_cap_loads(tmp_path):
    p = tmp_path / "c.json"
    p.write_text(json.dumps({"hidden_size": 8}))
    assert load_json_capped(p, 1024) == {"hidden_size": 8}
    p.write_text("{")
    with pytest.raises(json.JSONDecodeError):  # a bad file keeps the error its caller already handles
        load_json_capped(p, 1024)


@pytest.mark.timeout(20)
def test_a_fifo_is_refused_not_waited_on(tmp_path):
    p = tmp_path / "config.json"
    os.mkfifo(p)
    with pytest.raises(OSError, match="not a regular file"):
        load_json_capped(p, 1024)
    with pytest.raises(OSError, match="not a regular file"):
        read_text_capped(p, 1024)


def test_a_folder_is_an_oserror(tmp_path):
    with pytest.raises(IsADirectoryError):
        read_bytes_whole(tmp_path, 1024)


def test_readline_capped():
    f = io.BytesIO(b"short\n" + b"L" * 100 + b"\nlast")
    assert readline_capped(f, 10) == (b"short\n", 6, True)
    head, size, ended = readline_capped(f, 10)
    assert head == b"L" * 10 and size == 101 and ended  # the rest of the long line is passed, not kept
    assert readline_capped(f, 10) == (b"last", 4, False)  # torn: no newline yet
    assert readline_capped(f, 10) == (b"", 0, False)


def test_readline_capped_on_a_long_torn_line():
    f = io.BytesIO(b"x" * 50)
    assert readline_capped(f, 10) == (b"x" * 10, 50, False)


_HUGE_LINE_PROBE = r"""
import json, resource, sys
sys.path.insert(0, sys.argv[1])
log, prog, out, small = sys.argv[2:6]
from backend.regen.follow import ProgressFollower
from backend.regen.samples import row_at
from backend.supervisor.logtail import last_lines
from backend.train.reader import TrainLogReader

def peak():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

last_lines(small, 10); TrainLogReader(small).poll(); row_at(small, 0)  # imports and first calls
before = peak()
got = {}
got["server_log_tail"] = last_lines(log, 200)[-1][:200]
reader = TrainLogReader(log)
reader.poll()
got["train_unparsed"] = reader.stats.unparsed
f = ProgressFollower(out).poll()
got["progress_done"], got["progress_bad"] = f.latest["done"], f.last_bad
got["row"] = row_at(out, 0).error
got["peak_growth"] = peak() - before
print(json.dumps(got))
"""


@pytest.mark.timeout(120)
def test_every_reader_of_a_log_with_a_1gib_line_stays_small(tmp_path):
    """A server log, a training log, a progress log and an output whose one line is 1 GiB: each reader
    says what it cut, and the process's peak memory grows by less than 50 MB for all of them."""
    import subprocess
    import sys
    from pathlib import Path

    gib = 1 << 30
    log = sparse(tmp_path / "server.log", b"[2026-01-01 00:00:00] start\n", gib)
    with open(log, "ab") as f:
        f.write(b"\n[2026-01-01 00:00:01] after the long line\n")
    out = tmp_path / "regen.jsonl"
    prog = sparse(tmp_path / "regen.progress.jsonl", b"", gib)  # the first snapshot line is 1 GiB of zeros
    with open(prog, "ab") as f:
        f.write(b'\n{"t": 1.0, "state": "running", "done": 7, "failed": 0}\n')
    sparse(out, b"", gib)
    with open(out, "ab") as f:
        f.write(b"\n")
    small = tmp_path / "small.log"
    small.write_text("one\n")
    repo = Path(__file__).resolve().parent.parent
    r = subprocess.run([sys.executable, "-c", _HUGE_LINE_PROBE, str(repo), str(log), str(prog), str(out), str(small)],
                       capture_output=True, text=True, timeout=110)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["server_log_tail"] == "[2026-01-01 00:00:01] after the long line"
    assert got["train_unparsed"] >= 1  # the long line is counted as cut, not parsed
    assert got["progress_done"] == 7
    assert got["row"] == f"{out} at byte 0: a row of 1 GiB, over the 16 MiB read limit; not shown"
    assert got["peak_growth"] < 50 * MiB, got
