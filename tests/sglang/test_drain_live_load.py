"""A drain's count of a server's requests in flight when the server answers late: ``/get_load`` slow on a
loaded machine never lets the drain end on the ``/metrics`` gauges (which say 0 between decode log lines
while a request runs); a server without ``/get_load`` is still read from its gauges."""

from __future__ import annotations

import json
import time
from http.server import BaseHTTPRequestHandler
from types import SimpleNamespace

import pytest

from backend.flows.router_sync import drain
from backend.sglang.routerclient import LoadUnanswered, gauge_in_flight, live_load
from tests.helpers import LocalHTTPServer, free_port


class _Server(LocalHTTPServer):
    """/get_load answers from ``loads`` in turn (a number: its count; "slow": after 2.5 s; 404: none);
    /metrics says ``gauge`` requests running."""

    def __init__(self, loads: list, gauge: int = 0):
        self.loads, self.gauge, self.asked = list(loads), gauge, 0
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                if self.path == "/get_load":
                    outer.asked += 1
                    what = outer.loads.pop(0) if len(outer.loads) > 1 else outer.loads[0]
                    if what == "slow":
                        time.sleep(2.5)
                        what = 1
                    if what in (404, 503):
                        self.send_response(what)
                        self.end_headers()
                        return
                    body = json.dumps([{"dp_rank": 0, "num_reqs": what, "num_waiting_reqs": 0}]).encode()
                elif self.path == "/metrics":
                    body = f"sglang:num_running_reqs {outer.gauge}\nsglang:num_queue_reqs 0\n".encode()
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                try:
                    self.wfile.write(body)
                except OSError:  # the client gave up on a slow answer
                    pass

        super().__init__(H)


def test_live_load_tells_a_count_no_endpoint_nothing_listening_and_a_late_answer_apart():
    with _Server([3, 404, 503, "slow"]) as s:
        assert live_load(s.url) == 3
        assert live_load(s.url) is None  # no /get_load: an older SGLang
        with pytest.raises(LoadUnanswered):  # a busy server's 503: its count is unknown, not absent
            live_load(s.url)
        with pytest.raises(LoadUnanswered):
            live_load(s.url, timeout_s=0.5)
    assert live_load(f"http://127.0.0.1:{free_port()}") == 0  # nothing listens: nothing in flight
    with _Server([404], gauge=2) as s:
        assert live_load(s.url) is None and gauge_in_flight(s.url) == 2  # an older SGLang: its gauges


def _fleet(url: str):
    host, port = url.rsplit("/", 1)[1].split(":")
    fleet = SimpleNamespace(
        router_names=lambda: ["r"], router_members=lambda r: ["a"],
        config=lambda name: SimpleNamespace(host=host, port=int(port)),
        router_config=lambda r: SimpleNamespace(drain_timeout_s=60.0))
    views = {"a": SimpleNamespace(state=SimpleNamespace(value="RUNNING"), pid=4242),
             "r": SimpleNamespace(state=SimpleNamespace(value="EXITED"), pid=None)}
    return fleet, SimpleNamespace(view=views.get)


def test_a_drain_whose_first_count_is_late_waits_for_the_live_count_never_the_gauges(tmp_path):
    clock = [0.0]
    # the first answer is late while a request runs; the gauges say 0 meanwhile (no decode line yet)
    with _Server(["slow", 1, 1, 0], gauge=0) as s:
        fleet, sup = _fleet(s.url)
        res = drain(fleet, sup, tmp_path, "a", clock=lambda: clock[0],
                    sleep=lambda d: clock.__setitem__(0, clock[0] + d))
        assert res.in_flight == 0 and s.asked == 4  # it asked /get_load until it said 0
    with _Server(["slow", 1, "slow", 0], gauge=0) as s:  # a late answer mid-drain keeps the last count
        fleet, sup = _fleet(s.url)
        res = drain(fleet, sup, tmp_path, "a", clock=lambda: clock[0],
                    sleep=lambda d: clock.__setitem__(0, clock[0] + d))
        assert res.in_flight == 0 and s.asked == 4


def test_a_drain_of_a_server_without_get_load_reads_its_gauges(tmp_path):
    clock = [0.0]
    with _Server([404], gauge=0) as s:
        fleet, sup = _fleet(s.url)
        res = drain(fleet, sup, tmp_path, "a", clock=lambda: clock[0],
                    sleep=lambda d: clock.__setitem__(0, clock[0] + d))
        assert res.in_flight == 0 and s.asked == 1
