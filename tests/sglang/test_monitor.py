"""ServerMonitor and the HTTP client against a small HTTP server on 127.0.0.1, and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path


from backend.sglang.client import SglangClient, parse_metrics
from backend.sglang.config import ServerConfig
from backend.sglang.monitor import ServerMonitor
from tests.helpers import LocalHTTPServer

REPO = Path(__file__).resolve().parents[2]

METRICS = """# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{engine_type="unified",model_name="m",tp_rank="0",pp_rank="0"} 1.0
# HELP sglang:gen_throughput The generation throughput (token/s).
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{engine_type="unified",model_name="m",tp_rank="0",pp_rank="0"} 84.5
# HELP sglang:num_requests_total Number of requests.
# TYPE sglang:num_requests_total counter
sglang:num_requests_total{model_name="m"} 12.0
# HELP process_cpu_seconds_total CPU.
# TYPE process_cpu_seconds_total counter
process_cpu_seconds_total 3.0
"""


class FakeServer(LocalHTTPServer):
    """Answers like SGLang 0.5.4: 503 on /health until ``ready`` is set."""

    def __init__(self):
        self.ready = False
        self.hits: list[str] = []
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):  # noqa: N802
                outer.hits.append(self.path)
                if self.path == "/health":
                    self._send(200 if outer.ready else 503, b"")
                elif self.path == "/metrics":
                    self._send(200, METRICS.encode(), "text/plain; version=0.0.4")
                elif self.path == "/get_server_info" and outer.ready:
                    body = {"speculative_algorithm": "EAGLE", "speculative_num_steps": 3, "version": "0.5.4",
                            "internal_states": [{"avg_spec_accept_length": 1.0, "last_gen_throughput": 84.5}]}
                    self._send(200, json.dumps(body).encode(), "application/json")
                else:
                    self._send(404, b"not found")

            def _send(self, code, body, ctype="text/plain"):
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        super().__init__(H)


def test_parse_metrics_keeps_sglang_names():
    m = parse_metrics(METRICS)
    assert m.get("spec_accept_length") == 1.0 and m.get("gen_throughput") == 84.5
    assert m.get("num_requests") == 12.0 or m.get("num_requests_total") == 12.0
    assert "process_cpu_seconds" not in " ".join(m.names)


def test_client_readings_have_times_and_errors():
    with FakeServer() as srv:
        c = SglangClient(f"http://127.0.0.1:{srv.port}", timeout_s=2.0)  # assumes 0.5.23 paths
        h = c.health()
        assert h.status == 503 and not h.ok and h.age() < 5
        srv.ready = True
        si = c.server_info()  # /server_info is 404 here: falls back to /get_server_info
        assert si.ok and si.value.avg_spec_accept_length == 1.0 and si.value.speculative_algorithm == "EAGLE"
        assert srv.hits[-2:] == ["/server_info", "/get_server_info"]
    dead = SglangClient(f"http://127.0.0.1:{srv.port}", timeout_s=0.5).health()
    assert dead.status is None and not dead.ok and dead.error


def _write(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(text)


def _ts(offset: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(time.time() + offset))


def test_monitor_startup_ready_and_alert(tmp_path):
    log = tmp_path / "logs" / "srv.log"
    log.parent.mkdir()
    with FakeServer() as srv:
        cfg = ServerConfig(name="srv", model_path=str(tmp_path), port=srv.port, baseline_tok_s=90.0,
                           speculative={"algorithm": "EAGLE", "draft_model_path": str(tmp_path / "nodraft")})
        mon = ServerMonitor(cfg, log, "0.5.4", poll_interval_s=0.1, http_interval_s=0.1)
        mon.start()
        try:
            snap = mon.snapshot()
            assert snap.status == "no-log" and snap.alert is None
            _write(log, f"[{_ts(-30)}] server_args=ServerArgs(speculative_algorithm='EAGLE')\n"
                        f"[{_ts(-29)} TP0] Load weight begin. avail mem=78 GB\n"
                        "Loading safetensors checkpoint shards:  50% Completed | 1/2\n")
            snap = _wait(mon, lambda s: s.phase == "WEIGHTS" and s.phase_percent == 50.0)
            assert snap.status == "starting" and 0 < snap.progress < 0.6 and snap.health.status == 503
            _write(log, f"[{_ts(-3)}] The server is fired up and ready to roll!\n")
            srv.ready = True
            snap = _wait(mon, lambda s: s.ready and s.server_info is not None)
            assert snap.status == "ready" and snap.lifetime_accept_len == 1.0
            assert snap.metrics.value.get("gen_throughput") == 84.5
            lines = "".join(f"[{_ts(-2 + i * 0.5)} TP0] Decode batch. #running-req: 1, #token: 10, "
                            f"token usage: 0.00, accept len: 1.00, cuda graph: True, "
                            f"gen throughput (token/s): 84.50, #queue-req: 0, \n" for i in range(3))
            _write(log, lines)
            snap = _wait(mon, lambda s: s.alert is not None)
            assert snap.alert.severity == "error" and snap.decode["accept_len"] == [1.0, 1.0, 1.0]
            assert snap.accept_rate_meaning == "with_bonus" and snap.baseline_tok_s == 90.0
            assert snap.log_tail[-1].startswith("[") and snap.stats.decode_lines == 3
        finally:
            mon.stop()
        assert not mon.running


def test_monitor_no_alert_for_working_draft(tmp_path):
    log = tmp_path / "srv.log"
    cfg = ServerConfig(name="srv", model_path=str(tmp_path), port=1, speculative={"algorithm": "EAGLE3"})
    mon = ServerMonitor(cfg, log, "0.5.10", http=False, watch=False)
    _write(log, f"[{_ts(-100)}] The server is fired up and ready to roll!\n" + "".join(
        f"[{_ts(-90 + i)} TP0] Decode batch, #running-req: 1, #token: 10, token usage: 0.00, accept len: 2.{i}0, "
        f"accept rate: 0.5, cuda graph: True, gen throughput (token/s): 150.00, #queue-req: 0\n" for i in range(5)))
    mon.refresh()
    snap = mon.snapshot()
    assert snap.alert is None and len(snap.decode["ts"]) == 5 and snap.status == "ready"


def _wait(mon, cond, timeout=10.0):
    end = time.time() + timeout
    while time.time() < end:
        s = mon.snapshot()
        if cond(s):
            return s
        time.sleep(0.05)
    raise AssertionError(f"condition not met; last snapshot: {mon.snapshot()}")


def test_parselog_cli(tmp_path):
    log = tmp_path / "srv.log"
    log.write_text(
        "[2026-04-08 14:05:00 TP0] Decode batch, #running-req: 2, #token: 10, token usage: 0.00, accept len: 2.00, "
        "accept rate: 0.50, cuda graph: True, gen throughput (token/s): 150.00, #queue-req: 0\n"
        '[2026-04-08 14:05:00] INFO:     127.0.0.1:5000 - "POST /generate HTTP/1.1" 200 OK\n'
        "[2026-04-08 14:05:01 TP0] Decode batch, #running-req: two\n"
        "[2026-04-08 14:05:02] Prefill batch, #new-seq: 1, #new-token: 5, #cached-token: 0, token usage: 0.00, "
        "#running-req: 0, #queue-req: 0")  # no final newline: still parsed
    p = subprocess.run([sys.executable, "-m", "backend.cli", "servers", "parselog", str(log), "--version", "0.5.10"],
                       cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    recs = [json.loads(x) for x in p.stdout.splitlines()]
    assert [r["kind"] for r in recs] == ["decode", "prefill"]
    assert recs[0]["accept_len"] == 2.0 and recs[0]["ranks"] == {"TP": 0}
    assert "1 unparsed" in p.stderr and f"{log}:3:" in p.stderr
    p = subprocess.run([sys.executable, "-m", "backend.cli", "servers", "parselog", str(tmp_path / "none.log")],
                       cwd=REPO, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "none.log" in p.stderr
