"""The log tail's probe filter and the newest line's age (backend.logview)."""

from __future__ import annotations

import os

from backend.logview import filter_probe_lines, is_probe_line, newest_line_age

# lines as SGLang (uvicorn) writes them; which ones are the dashboard's own probes is by hand
LINES = [
    ('[2025-06-01 10:00:00] INFO:     127.0.0.1:51234 - "GET /health HTTP/1.1" 200 OK', True),
    ('[2025-06-01 10:00:00] INFO:     127.0.0.1:51236 - "GET /metrics HTTP/1.1" 200 OK', True),
    ('[2025-06-01 10:00:01] INFO:     127.0.0.1:51238 - "GET /server_info HTTP/1.1" 200 OK', True),
    ('[2025-06-01 10:00:01] INFO:     10.0.0.7:40000 - "GET /get_server_info HTTP/1.1" 200 OK', True),
    ('INFO:     127.0.0.1:51240 - "GET /health HTTP/1.1" 503 Service Unavailable', True),  # while starting
    ('[2025-06-01 10:00:02] INFO:     127.0.0.1:51242 - "POST /generate HTTP/1.1" 200 OK', False),
    ('[2025-06-01 10:00:02] INFO:     127.0.0.1:51244 - "GET /health_generate HTTP/1.1" 200 OK', False),
    ('[2025-06-01 10:00:02] INFO:     127.0.0.1:51246 - "POST /v1/chat/completions HTTP/1.1" 200 OK', False),
    ('[2025-06-01 10:00:02] INFO:     127.0.0.1:51248 - "GET /get_model_info HTTP/1.1" 200 OK', False),
    ("[2025-06-01 10:00:03 TP0] Decode batch. #running-req: 1, #token: 93, token usage: 0.00, "
     "accept len: 2.41, gen throughput (token/s): 160.12, #queue-req: 0", False),
    ("a line that mentions GET /health HTTP/1.1 without quotes", False),
]


def test_probe_lines_are_recognised_by_hand_table():
    for line, probe in LINES:
        assert is_probe_line(line) is probe, line


def test_filter_hides_the_probes_by_default_and_shows_them_on_request():
    lines = [line for line, _ in LINES]
    view = filter_probe_lines(lines)
    assert view.hidden == 5
    assert view.lines == [line for line, probe in LINES if not probe]  # order kept
    everything = filter_probe_lines(lines, show_probes=True)
    assert everything.lines == lines and everything.hidden == 0


def test_newest_line_age_is_the_files_last_write(tmp_path):
    log = tmp_path / "s.log"
    log.write_text("one\ntwo\n")
    os.utime(log, (1_000_000.0, 1_000_000.0))
    assert newest_line_age(log, now=1_000_042.5) == 42.5
    assert newest_line_age(tmp_path / "missing.log", now=1_000_042.5) is None
