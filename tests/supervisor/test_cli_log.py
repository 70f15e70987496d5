"""`processes log`: the last lines even behind one huge line, and a follower that keeps up."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import textwrap
import threading

import pytest

from backend.cli.processes import follow
from backend.supervisor.logtail import CUT_KEEP, read_last
from tests.supervisor.conftest import PY, wait_for
from tests.supervisor.test_cli import REPO, run, write_ws

BIG = 5 * 1024 * 1024  # more than read_last's 4 MB window


def _lines(k: int) -> bytes:
    return b"".join(b"line %02d\n" % i for i in range(k))


@pytest.mark.parametrize("newline", [b"", b"\n"])
def test_last_lines_behind_a_line_longer_than_the_window(tmp_path, newline):
    p = tmp_path / "a.log"
    p.write_bytes(_lines(60) + b"x" * BIG + newline)
    c = read_last(p, 50)
    got = c.text.splitlines()
    assert got[:-1] == [f"line {i:02d}" for i in range(11, 60)]  # the 49 lines before it
    assert got[-1] == "x" * 4096 + f" [... cut: this line has {BIG:,} bytes; its first 4,096 are shown]"
    assert c.offset == p.stat().st_size  # a follower goes on after it
    assert CUT_KEEP == 4096


def test_a_long_line_in_the_middle_does_not_end_the_walk(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(b"first\nsecond\n" + b"y" * BIG + b"\nthird\n")
    assert read_last(p, 4).text.splitlines() == [
        "first", "second", "y" * 4096 + f" [... cut: this line has {BIG:,} bytes; its first 4,096 are shown]",
        "third"]


def test_a_line_longer_than_the_scan_limit_shows_its_end(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(b"before\n" + b"z" * 20_000 + b"END\n")
    text = read_last(p, 3, max_bytes=1000, scan_limit=10_000).text
    assert text.startswith("[... cut: a line longer than 10,000 bytes; its end is shown] zzz")
    assert text.endswith("zzzEND\n") and "before" not in text


def test_cli_prints_the_lines_before_the_cut_line(tmp_path):
    ws = write_ws(tmp_path / "ws")
    assert run("-w", str(ws), "processes", "list")[0] == 0
    (ws / "logs" / "sleeper.log").write_bytes(_lines(60) + b"x" * BIG)
    rc, out, _ = run("-w", str(ws), "processes", "log", "sleeper", "-n", "50")
    lines = out.splitlines()
    assert rc == 0 and len(lines) == 50
    assert lines[0] == "line 11" and lines[-2] == "line 59"
    assert lines[-1].endswith(f" [... cut: this line has {BIG:,} bytes; its first 4,096 are shown]")


def test_follow_skips_ahead_to_the_newest_lines_with_a_marker(tmp_path):
    p = tmp_path / "a.log"
    p.write_bytes(b"".join(b"record %07d\n" % i for i in range(400_000)))  # 6,000,000 bytes, 15 a line
    out = io.StringIO()
    calls = iter([False, True])
    follow(str(p), 0, out, should_stop=lambda: next(calls), interval_s=0, max_bytes=64 * 1024)
    first, rest = out.getvalue().split("\n", 1)
    # The newest 65,536 bytes start at 5,934,464, inside record 395630; the first whole line
    # in them is record 395631, at 395,631 * 15 = 5,934,465.
    assert first == f"----- skipped 5,934,465 bytes of {p} to keep up -----"
    assert rest.startswith("record 0395631\n") and rest.endswith("record 0399999\n")
    assert len(rest) == (400_000 - 395_631) * 15


@pytest.mark.timeout(120)
def test_follow_keeps_up_with_a_fast_writer(tmp_path):
    """A writer far faster than a terminal: the follower must show the writer's last line soon
    after it is written, not minutes later."""
    ws = write_ws(tmp_path / "ws", textwrap.dedent(f"""
        [[process]]
        name = "chatty"
        argv = [{json.dumps(PY)}, "-c", "pass"]
    """))
    assert run("-w", str(ws), "processes", "list")[0] == 0
    log = ws / "logs" / "chatty.log"
    log.write_bytes(b"")
    follower = subprocess.Popen([PY, "-m", "backend.cli", "-w", str(ws), "processes", "log", "chatty", "-n", "0",
                                 "-f"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)
    seen: list[bytes] = []
    reader = threading.Thread(target=lambda: seen.extend(iter(follower.stdout.readline, b"")), daemon=True)
    try:
        assert follower.stderr.readline().startswith(b"following ")  # handshake: offset fixed
        reader.start()
        block = b"".join(b"%s noise line %07d\n" % (b"x" * 40, i) for i in range(20_000))  # ~1 MB
        with open(log, "ab") as f:
            for _ in range(48):  # ~48 MB, as fast as this machine writes
                f.write(block)
                f.flush()
            f.write(b"the writer's last line\n")
        wait_for(lambda: any(b"the writer's last line" in line for line in seen), timeout_s=30)
        assert any(line.startswith(b"----- skipped ") for line in seen)
    finally:
        os.killpg(follower.pid, signal.SIGINT)
        follower.wait(timeout=30)
        reader.join(timeout=10)
        follower.stdout.close()
        follower.stderr.close()
    assert follower.returncode == 0
