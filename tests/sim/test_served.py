"""The simulator in threads of the test process (backend.sim.server.serve), its hold switch
(SPECDECK_SIM_HOLD) and its own record of what it served on both clocks (GET /sim/requests, and
SPECDECK_SIM_REQUESTS_LOG, which outlives the run)."""

from __future__ import annotations

import json
import socket
import time

import pytest

from backend.sim.engine import Speed
from tests.helpers import wait_for
from tests.sim.simproc import start_sim_thread

FAST = {"SPECDECK_SIM_SPEED": "200", "SPECDECK_SIM_SEED": "1"}


def _gen(sim, n: int) -> dict:
    status, raw = sim.request("/generate", {"text": "Say something.", "sampling_params": {
        "max_new_tokens": n, "ignore_eos": True}})
    assert status == 200, raw
    return json.loads(raw)


def test_served_in_a_thread_answers_records_both_clocks_and_stops_like_the_process(dirs, tmp_path):
    env = dict(FAST, SPECDECK_SIM_BASELINE_TOK_S="100", SPECDECK_SIM_PEAK_TOK_S="1000")
    sim = start_sim_thread(["--model-path", str(dirs["target"])], tmp_path / "sim.log", env)
    try:
        sim.wait_ready()
        assert _gen(sim, 20)["meta_info"]["completion_tokens"] == 20
        status, raw = sim.request("/sim/requests")
        assert status == 200
        got = json.loads(raw)
        [r] = [x for x in got["finished"] if x["completion_tokens"] == 20]
        assert r["finish_reason"] == "length"
        # one stream: 19 decode steps after the prefill's token, each (1 + c) / peak = 1 / baseline s
        step = Speed(baseline=100.0, peak=1000.0).iteration(1, True)
        assert step == pytest.approx(0.01)
        assert (r["v_finished"] - r["v_first_token"]) == pytest.approx(19 * step, rel=1e-6)
        assert r["v_created"] <= r["v_first_token"] <= r["v_finished"] <= got["clock_s"]
        assert r["created"] <= r["first_token"] <= r["finished"]
        # an idle connection held open, as a client's pool does: dropped when the server stops
        conn = socket.create_connection(("127.0.0.1", sim.port), timeout=5)
        conn.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert conn.recv(4096).startswith(b"HTTP/1.1 200")
        assert sim.stop() == 0
        conn.settimeout(5)
        assert conn.recv(4096) == b""  # closed by the server
        conn.close()
        assert "Application shutdown complete." in sim.text()
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", sim.port), timeout=2).close()
    finally:
        sim.stop()


def test_the_requests_log_keeps_every_run_of_a_server_after_it_stopped(dirs, tmp_path):
    record = tmp_path / "requests.jsonl"
    env = dict(FAST, SPECDECK_SIM_REQUESTS_LOG=str(record))
    served: list[list[dict]] = []
    for lens in ((12, 5), (7,)):  # the server, then the same server started again
        sim = start_sim_thread(["--model-path", str(dirs["target"])], tmp_path / "sim.log", env)
        try:
            sim.wait_ready()
            for n in lens:
                _gen(sim, n)
            status, raw = sim.request("/sim/requests")
            assert status == 200
            served.append(json.loads(raw)["finished"])
        finally:
            sim.stop()
    rows = [json.loads(line) for line in record.read_text().splitlines()]
    runs = list(dict.fromkeys(r["run"] for r in rows))
    assert len(runs) == 2
    # each run's rows as its GET /sim/requests gave them (the startup's warm-up request among them), in order
    for run, finished in zip(runs, served):
        assert [{k: v for k, v in r.items() if k != "run"} for r in rows if r["run"] == run] == finished
    assert [r["completion_tokens"] for r in served[0][-2:]] + [served[1][-1]["completion_tokens"]] == [12, 5, 7]


def test_a_requests_log_it_cannot_write_stops_the_record_not_the_serving(dirs, tmp_path):
    record = tmp_path / "no-such-folder" / "requests.jsonl"
    sim = start_sim_thread(["--model-path", str(dirs["target"])], tmp_path / "sim.log",
                           dict(FAST, SPECDECK_SIM_REQUESTS_LOG=str(record)))
    try:
        sim.wait_ready()
        assert _gen(sim, 6)["meta_info"]["completion_tokens"] == 6
        assert _gen(sim, 4)["meta_info"]["completion_tokens"] == 4
        assert not record.parent.exists()
        assert sim.text().count(f"SPECDECK_SIM_REQUESTS_LOG {record}") == 1  # said once, then left alone
    finally:
        sim.stop()


def test_bad_flags_end_it_before_serving_as_the_process_would(dirs, tmp_path):
    sim = start_sim_thread(["--model-path", str(dirs["target"]), "--speculative-algorithm", "MEDUSA"],
                           tmp_path / "sim.log", FAST)
    assert sim.proc.poll() == 2


def test_loading_holds_while_the_hold_file_exists(dirs, tmp_path):
    hold = tmp_path / "hold"
    hold.touch()
    sim = start_sim_thread(["--model-path", str(dirs["target"])], tmp_path / "sim.log",
                           dict(FAST, SPECDECK_SIM_HOLD=str(hold)))
    try:
        wait_for(lambda: "Load weight begin" in sim.text(), 30, "loading to begin")
        time.sleep(1.0)  # 200 times faster, the whole startup takes 0.1 s: it is held, not slow
        assert sim.status("/health") == 503 and "Load weight end" not in sim.text()
        hold.unlink()
        sim.wait_ready()
        assert "Load weight end" in sim.text()
    finally:
        hold.unlink(missing_ok=True)
        sim.stop()


def test_a_held_server_stops_at_once(dirs, tmp_path):
    hold = tmp_path / "hold"
    hold.touch()
    sim = start_sim_thread(["--model-path", str(dirs["target"])], tmp_path / "sim.log",
                           dict(FAST, SPECDECK_SIM_HOLD=str(hold)))
    wait_for(lambda: "Load weight begin" in sim.text(), 30, "loading to begin")
    t0 = time.monotonic()
    assert sim.stop() == 0
    assert time.monotonic() - t0 < 5


def test_requests_running_when_it_stops_end_with_finish_reason_abort(dirs, tmp_path):
    """SGLang answers the requests it holds when it shuts down with ``finish_reason: "abort"``: a
    stream in the middle of its answer and one still queued get an abort chunk (or lose the
    connection), never an ordinary finish or a [DONE] with no finish at all, which a client would
    keep as a whole (empty or cut) answer; a request submitted once it is stopping is aborted too."""
    import http.client
    import threading

    env = dict(FAST, SPECDECK_SIM_BASELINE_TOK_S="20", SPECDECK_SIM_PEAK_TOK_S="40")
    sim = start_sim_thread(["--model-path", str(dirs["target"]), "--max-running-requests", "1"],
                           tmp_path / "sim.log", env)
    got: dict[int, list[bytes]] = {0: [], 1: []}
    first = threading.Event()

    def ask(i: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=30)
        conn.request("POST", "/v1/chat/completions", json.dumps({
            "model": "m", "messages": [{"role": "user", "content": f"Count to {i}."}], "max_tokens": 400,
            "stream": True}), {"content-type": "application/json"})
        resp = conn.getresponse()
        try:
            for line in resp:
                if line.startswith(b"data: "):
                    got[i].append(line[6:].strip())
                    if i == 0 and b'"content"' in line:
                        first.set()
        except OSError:
            pass  # the connection dropped: no answer, which the client asks again
        conn.close()

    try:
        sim.wait_ready()
        running = threading.Thread(target=ask, args=(0,))
        running.start()
        assert first.wait(30), "the first stream's tokens"
        queued = threading.Thread(target=ask, args=(1,))  # behind the one running request
        queued.start()
        wait_for(lambda: json.loads(sim.request("/get_load")[1])[0]["num_waiting_reqs"] == 1, 10,
                 "the second request queued")
        assert sim.stop() == 0
        running.join(30), queued.join(30)
    finally:
        sim.stop()
    for i, lines in got.items():
        chunks = [json.loads(x) for x in lines if x != b"[DONE]"]
        finishes = [c["finish_reason"] for ch in chunks for c in ch.get("choices") or () if c.get("finish_reason")]
        assert finishes in ([], ["abort"]), (i, finishes)
        if lines and lines[-1] == b"[DONE]":
            assert finishes == ["abort"], (i, lines[-3:])
    # the running stream was told (an abort chunk), or its connection was dropped as the server closed
    assert got[0], "the running stream's chunks"


def test_a_request_submitted_while_it_stops_is_aborted_never_left_waiting(dirs, tmp_path):
    """A handler that passed the stopping check and submits after the engine stopped: its request ends
    at once with abort (it would otherwise sit on a queue nobody serves, and its route answer an empty
    ordinary finish)."""
    sim = start_sim_thread(["--model-path", str(dirs["target"])], tmp_path / "sim.log", FAST)
    try:
        sim.wait_ready()
        eng = sim.proc.served.sim.engine
        eng.stop(0.5)
        r = eng.submit("Say something.", max_new_tokens=8)
        assert r.finish_reason == "abort"
        kind, done = r.events.get(timeout=1)
        assert (kind, done) == ("done", r)
    finally:
        sim.stop()
