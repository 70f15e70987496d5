from __future__ import annotations

import os

import pytest

from backend.supervisor.logtail import LogTailer, last_lines, read_last, read_tail


def test_incremental_reads(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(b"one\ntwo\n")
    c = read_tail(p, 0)
    assert (c.text, c.offset) == ("one\ntwo\n", 8)
    again = read_tail(p, c.offset, inode=c.inode)
    assert (again.text, again.offset, again.flags) == ("", 8, frozenset())
    with open(p, "ab") as f:
        f.write(b"three\n")
    c = read_tail(p, c.offset, inode=c.inode)
    assert (c.text, c.offset) == ("three\n", 14)


def test_partial_last_line_waits_for_its_newline(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(b"done\nhalf")
    c = read_tail(p, 0)
    assert (c.text, c.offset) == ("done\n", 5)
    assert read_tail(p, 5).text == ""
    assert read_tail(p, 5, partial=True).text == "half"
    with open(p, "ab") as f:
        f.write(b" line\n")
    assert read_tail(p, 5).text == "half line\n"


def test_truncation_restarts_from_zero(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(b"x" * 100 + b"\n")
    t = LogTailer(p)
    assert len(t.read().text) == 101
    p.write_bytes(b"new\n")  # truncate and rewrite in place
    c = t.read()
    assert c.truncated and c.reset and c.text == "new\n" and c.offset == 4


def test_rotation_follows_the_new_file(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(b"old 1\nold 2\n")
    t = LogTailer(p)
    t.read()
    os.rename(p, tmp_path / "a.log.1")
    p.write_bytes(b"fresh file that is longer than the old one\n")
    c = t.read()
    # the old file was read to its end: the new one continues it, nothing to start over
    assert c.followed and not c.rotated and not c.truncated and not c.reset
    assert c.text == "fresh file that is longer than the old one\n"


def test_rotation_whose_old_file_is_gone_reads_the_new_file_from_zero(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(b"old 1\nold 2\n")
    t = LogTailer(p)
    t.read()
    os.rename(p, tmp_path / "a.log.1")
    p.write_bytes(b"fresh\n")  # created while the old file exists, so it cannot get the old inode
    os.unlink(tmp_path / "a.log.1")
    c = t.read()
    assert c.rotated and c.reset and not c.followed
    assert c.text == "fresh\n"


def test_missing_file(tmp_path):
    c = read_tail(tmp_path / "nope.log", 0)
    assert c.missing and c.text == "" and c.offset == 0
    assert read_last(tmp_path / "nope.log", 5).missing


def test_bad_bytes_are_replaced_and_utf8_not_split(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(b"ok \xff\xfe bad\n" + "é€😀\n".encode())
    c = read_tail(p, 0)
    assert c.text == "ok \ufffd\ufffd bad\né€😀\n"
    # A single line longer than max_bytes comes out in pieces that never split a character.
    p.write_bytes(("€" * 100).encode())  # 300 bytes, no newline
    out, offset, inode = "", 0, None
    for _ in range(20):
        c = read_tail(p, offset, 64, inode=inode, skip_ahead=False)
        offset, inode = c.offset, c.inode
        out += c.text
        if not c.text:
            break
    # Four pieces of 21 characters (63 of 64 bytes); the short unfinished rest waits.
    assert out == "€" * 84
    rest = read_tail(p, offset, 64, inode=inode, partial=True)
    assert rest.text == "€" * 16 and rest.offset == 300


def test_skip_ahead_returns_newest_lines_from_a_line_start(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(b"".join(b"line %04d\n" % i for i in range(1000)))  # 10 bytes a line
    c = read_tail(p, 0, 105)
    assert c.text.startswith("line 09") and c.text.endswith("line 0999\n")
    assert all(len(line) == 9 for line in c.text.splitlines())
    assert c.skipped > 0 and "skipped" in c.flags
    # Without skipping, a reader catches up in order.
    c = read_tail(p, 0, 105, skip_ahead=False)
    assert c.text.startswith("line 0000\n") and c.offset == 100


def test_last_lines(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(b"".join(b"l%d\n" % i for i in range(100000)) + b"partial")
    assert last_lines(p, 3) == ["l99997", "l99998", "l99999"]
    c = read_last(p, 2)
    assert c.offset == p.stat().st_size - len("partial")
    assert last_lines(p, 0) == []
    short = tmp_path / "b.log"
    short.write_bytes(b"only\n")
    assert last_lines(short, 10) == ["only"]
    empty = tmp_path / "c.log"
    empty.write_bytes(b"")
    assert last_lines(empty, 10) == []


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError):
        read_tail(tmp_path / "x", 0, 0)
    with pytest.raises(ValueError):
        read_last(tmp_path / "x", -1)
