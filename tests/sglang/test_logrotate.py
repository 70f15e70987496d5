"""The Servers page's log reader across rotation: every decode line is ingested exactly once, and
the series go on (no start-over), whether Specdeck's wrapper rotated the log or logrotate moved it
aside (``create`` style) while the server kept writing to the moved file."""

from __future__ import annotations

import os
import random
import time

from backend.sglang.config import ServerConfig
from backend.sglang.ingest import LogIngester
from backend.sglang.launch import to_process_spec
from backend.sglang.version import capabilities
from backend.supervisor.logrotate import RotatingLog, rotated_path


def dline(i: int) -> str:
    # the line's number rides in #running-req (a count the series keeps as it is)
    return (f"[2026-04-08 14:05:{i % 60:02d} TP0] Decode batch, #running-req: {i}, #token: 100, "
            f"token usage: 0.10, accept len: 2.50, accept rate: 0.50, cuda graph: True, "
            f"gen throughput (token/s): 300.00, #queue-req: 1\n")


def ingested(ing: LogIngester) -> list[int]:
    return list(ing.decode.data["running_req"])


def test_ingester_reads_every_decode_line_once_across_own_rotations(tmp_path):
    log = tmp_path / "srv.log"
    w = RotatingLog(log, max_bytes=2000, keep=50)
    ing = LogIngester(log, caps=capabilities("0.5.10"))
    rng = random.Random(3)
    n = 0
    for _ in range(40):
        for _ in range(rng.randint(0, 30)):  # up to three rotations between two polls
            w.write(dline(n).encode())
            n += 1
        ing.poll()
    w.close()
    ing.poll()
    assert w.rotations >= 15
    assert ing.stats.resets == 0
    assert ing.stats.decode_lines == n
    assert ingested(ing) == list(range(n))
    assert ing.last_decode.accept_len == 2.5


def test_ingester_follows_a_server_writing_to_its_moved_log(tmp_path):
    """Fault 3: logrotate (create) moves the log; the server keeps writing to the moved file.  The
    reader stays with the moved file (decode lines and accept_len keep coming) and goes on in the new
    one once the writer does, without counting a line twice."""
    log = tmp_path / "srv.log"
    server = open(log, "ab", buffering=0)
    ing = LogIngester(log, caps=capabilities("0.5.10"))
    for i in range(20):
        server.write(dline(i).encode())
    ing.poll()
    os.rename(log, rotated_path(log, 1))
    log.touch()
    ing.poll()
    for i in range(20, 50):
        server.write(dline(i).encode())
        if i % 7 == 0:
            ing.poll()
    half = dline(50)
    server.write(half[:30].encode())
    ing.poll()
    assert ing.stats.decode_lines == 50 and ingested(ing) == list(range(50))
    assert ing.last_decode.accept_len == 2.5 and ing.stats.resets == 0
    server.close()
    server = open(log, "ab", buffering=0)  # the writer reopens by name (as Specdeck's wrapper does)
    server.write(half[30:].encode())
    for i in range(51, 80):
        server.write(dline(i).encode())
    server.close()
    ing.poll()
    assert ing.stats.resets == 0
    assert ing.stats.decode_lines == 80  # the line split across the two files counted once, whole
    assert ingested(ing) == list(range(80))
    assert ing.poll() == 0  # settled on the live file: an unchanged file reads as nothing
    # a log replaced by another file (the old one gone, nothing to follow) still starts the series over
    new = tmp_path / "new"
    new.write_text(dline(7))
    os.replace(new, log)
    ing.poll()
    assert ing.stats.resets == 1 and ingested(ing) == [7]



def test_server_log_settings_reach_the_spec(tmp_path):
    cfg = ServerConfig(name="s", model_path="/m", simulate=True, log_max_mb=8, log_keep=3)
    spec = to_process_spec(cfg, tmp_path, "0.5.23")
    assert (spec.log_max_bytes, spec.log_keep) == (8 * 2**20, 3)
    default = to_process_spec(ServerConfig(name="s", model_path="/m", simulate=True), tmp_path, "0.5.23")
    assert (default.log_max_bytes, default.log_keep) == (100 * 2**20, 5)


def test_file_watcher_wakes_when_the_moved_log_is_written(tmp_path):
    import threading

    from backend.sglang.logwatch import FileWatcher

    log = tmp_path / "srv.log"
    log.write_text(dline(0))
    os.rename(log, rotated_path(log, 1))
    log.touch()
    (tmp_path / "other.log").touch()
    event = threading.Event()
    w = FileWatcher(log, event)
    assert w.start()
    try:
        time.sleep(0.2)
        event.clear()
        with open(tmp_path / "other.log", "a") as f:  # another process's log: no wake-up
            f.write(dline(1))
        assert not event.wait(0.5)
        with open(rotated_path(log, 1), "a") as f:  # the server still writing to its moved log
            f.write(dline(2))
        assert event.wait(5)
    finally:
        w.stop()
