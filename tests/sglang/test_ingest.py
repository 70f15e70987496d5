"""Incremental ingestion: appends, partial lines, truncation, replacement, startup and failures."""

from __future__ import annotations

import os
import threading
import time

from backend.sglang.ingest import FileWatcher, LogIngester
from backend.sglang.logparse import Phase
from backend.sglang.version import capabilities


def dline(sec: int, accept: float = 2.0, running: int = 4, tput: float = 300.0) -> str:
    return (f"[2026-04-08 14:05:{sec:02d} TP0] Decode batch, #running-req: {running}, #token: 100, "
            f"token usage: 0.10, accept len: {accept:.2f}, accept rate: 0.50, cuda graph: True, "
            f"gen throughput (token/s): {tput:.2f}, #queue-req: 1\n")


ACCESS = '[2026-04-08 14:05:00] INFO:     127.0.0.1:5000 - "POST /generate HTTP/1.1" 200 OK\n'


def append(path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(text)


def test_appends_are_read_once_and_partial_lines_wait(tmp_path):
    log = tmp_path / "srv.log"
    ing = LogIngester(log, caps=capabilities("0.5.10"))
    assert ing.poll() == 0  # missing file reads as nothing
    append(log, dline(1) + ACCESS)
    n1 = ing.poll()
    assert n1 == log.stat().st_size
    assert ing.stats.decode_lines == 1 and ing.stats.http_lines == 1
    assert ing.poll() == 0  # unchanged
    half = dline(2, accept=3.0)
    append(log, half[:40])
    assert ing.poll() == 40 and ing.stats.decode_lines == 1  # partial line kept back
    append(log, half[40:])
    ing.poll()
    assert ing.stats.decode_lines == 2
    assert ing.decode.as_lists()["accept_len"] == [2.0, 3.0]
    assert ing.offset == log.stat().st_size
    assert ing.accept_rate_meaning == "with_bonus"


def test_cost_is_proportional_to_new_bytes(tmp_path):
    log = tmp_path / "srv.log"
    append(log, "".join(dline(i % 60) for i in range(2000)))
    ing = LogIngester(log)
    first = ing.poll()
    append(log, dline(5))
    second = ing.poll()
    assert first == log.stat().st_size - len(dline(5))
    assert second == len(dline(5))
    assert ing.stats.bytes_read == log.stat().st_size


def test_truncation_and_replacement_start_over(tmp_path):
    log = tmp_path / "srv.log"
    append(log, dline(1) + dline(2) + dline(3))
    ing = LogIngester(log)
    ing.poll()
    assert ing.stats.decode_lines == 3
    log.write_text(dline(9, accept=1.0))  # truncated and rewritten shorter
    ing.poll()
    assert ing.stats.decode_lines == 1 and ing.stats.resets == 1
    assert ing.decode.as_lists()["accept_len"] == [1.0]
    # rewritten in place to a longer file: the head changed
    log.write_text(dline(7, accept=4.0) * 5)
    ing.poll()
    assert ing.decode.as_lists()["accept_len"] == [4.0] * 5 and ing.stats.resets == 2
    # replaced by a new file (new inode)
    new = tmp_path / "new.log"
    new.write_text(dline(8, accept=1.5))
    os.replace(new, log)
    ing.poll()
    assert ing.decode.as_lists()["accept_len"] == [1.5] and ing.stats.resets == 3


def test_series_are_bounded(tmp_path):
    log = tmp_path / "srv.log"
    append(log, "".join(dline(i % 60, accept=1 + i / 100) for i in range(500)))
    ing = LogIngester(log, max_points=100, chunk_bytes=4096)
    ing.poll()
    s = ing.decode.as_lists()
    assert len(s["ts"]) == 100 and ing.stats.decode_lines == 500
    assert s["accept_len"][0] == 5.0 and s["accept_len"][-1] == 5.99


def test_unparsed_lines_are_counted_with_line_numbers(tmp_path):
    log = tmp_path / "srv.log"
    append(log, dline(1) + "[2026-04-08 14:05:02] Decode batch, #running-req: x\n" + dline(3))
    ing = LogIngester(log)
    ing.poll()
    assert ing.stats.unparsed_lines == 1 and ing.stats.decode_lines == 2
    u = ing.unparsed[0]
    assert u.line_no == 2 and "#running-req" in u.reason


def test_startup_phases_progress_and_ready(tmp_path):
    log = tmp_path / "srv.log"
    ing = LogIngester(log)
    append(log, "[2026-04-08 14:00:00] server_args=ServerArgs(model_path='/m')\n"
                "[2026-04-08 14:00:01] Load weight begin. avail mem=78 GB\n")
    ing.poll()
    assert ing.startup.phase == Phase.WEIGHTS and ing.startup.run_index == 1
    p0 = ing.startup.progress
    # tqdm writes \r-separated updates without a newline: seen before the line ends
    append(log, "Loading safetensors checkpoint shards:  30% Completed | 3/10\r"
                "Loading safetensors checkpoint shards:  60% Completed | 6/10\r")
    ing.poll()
    assert ing.startup.percent == 60.0 and ing.startup.progress > p0
    append(log, "[2026-04-08 14:00:30] Load weight end. type=X, avail mem=60 GB\n"
                "[2026-04-08 14:00:31] KV Cache is allocated. #tokens: 1000, K size: 1 GB, V size: 1 GB\n"
                "[2026-04-08 14:00:32] Capture cuda graph begin. This can take up to several minutes.\n")
    ing.poll()
    assert ing.startup.phase == Phase.CUDA_GRAPH
    append(log, "[2026-04-08 14:00:40] Capture cuda graph end. Time elapsed: 8 s.\n"
                '[2026-04-08 14:00:41] INFO:     127.0.0.1:1 - "GET /get_model_info HTTP/1.1" 200 OK\n'
                "[2026-04-08 14:00:42] The server is fired up and ready to roll!\n")
    ing.poll()
    su = ing.startup
    assert su.phase == Phase.READY and su.progress == 1.0
    assert su.ready_ts == time.mktime(time.strptime("2026-04-08 14:00:42", "%Y-%m-%d %H:%M:%S"))
    phases = [e.phase for e in su.events]
    assert phases == sorted(phases) and phases[0] == Phase.LAUNCHED and phases[-1] == Phase.READY
    # a relaunch in the same log starts a new run
    append(log, "[2026-04-08 15:00:00] server_args=ServerArgs(model_path='/m')\n")
    ing.poll()
    assert ing.startup.run_index == 2 and ing.startup.ready_ts is None and ing.startup.phase == Phase.LAUNCHED


def test_fatal_with_traceback_and_possible_solutions(tmp_path):
    log = tmp_path / "srv.log"
    append(log, "[2026-04-08 14:00:32 TP0] Capture cuda graph begin. This can take up to several minutes.\n"
                "[2026-04-08 14:00:33 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
                '  File "/sglang/srt/model_executor/cuda_graph_runner.py", line 300, in __init__\n'
                "    self.capture()\n"
                "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 2.00 GiB\n"
                "Possible solutions:\n"
                "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
                "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
                "3. disable torch compile by not using --enable-torch-compile\n"
                "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
                "\n"
                "[2026-04-08 14:00:34] Received sigquit from a child process. It usually means the child failed.\n")
    ing = LogIngester(log)
    ing.poll()
    f = ing.startup.fatal
    assert f is not None and f.code == "cuda_graph_capture_failed"
    assert f.hint.startswith("Possible solutions:") and "--cuda-graph-max-bs to a smaller value" in f.hint
    assert f.hint.count("\n") == 4
    assert any("Capture cuda graph failed" in c for c in f.context)
    assert "Scheduler hit an exception" in f.message


def test_file_watcher_signals_appends(tmp_path):
    log = tmp_path / "srv.log"
    log.write_text("")
    ev = threading.Event()
    w = FileWatcher(log, ev)
    try:
        assert w.start() is True
        ev.clear()
        append(log, dline(1))
        assert ev.wait(10.0)
    finally:
        w.stop()
    assert not w.active


def test_file_watcher_without_directory_reports_false(tmp_path):
    w = FileWatcher(tmp_path / "missing" / "srv.log", threading.Event())
    assert w.start() is False


def test_supervisor_run_marker_starts_a_new_run(tmp_path):
    log = tmp_path / "srv.log"
    append(log, "===== specdeck: srv run 20260408T140000-aaaa starting at 2026-04-08 14:00:00: python -m x\n"
                "[2026-04-08 14:00:01] server_args=ServerArgs(model_path='/m')\n"
                "[2026-04-08 14:00:05] The server is fired up and ready to roll!\n"
                + dline(10, accept=2.5))
    ing = LogIngester(log)
    ing.poll()
    su = ing.startup
    assert su.run_index == 1 and su.phase == Phase.READY and su.launched_ts is not None
    # the next run fails before printing anything of its own: the old READY must not linger
    append(log, "===== specdeck: srv run 20260408T150000-bbbb starting at 2026-04-08 15:00:00: python -m x\n"
                "launch_server.py: error: ambiguous option: --cuda-graph-max-bs could match "
                "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill\n")
    ing.poll()
    su = ing.startup
    assert su.run_index == 2 and su.ready_ts is None and su.phase == Phase.LAUNCHED
    assert su.launched_ts == time.mktime(time.strptime("2026-04-08 15:00:00", "%Y-%m-%d %H:%M:%S"))
    assert su.fatal is not None and su.fatal.code == "bad_arguments"
