"""A catch-up read of a long log happens in slices, releasing the monitor's lock between them."""

from pathlib import Path

from backend.sglang import monitor as monitor_mod
from backend.sglang.config import ServerConfig
from backend.sglang.monitor import ServerMonitor

LINE = ("[2026-04-08 14:05:21 TP0] Decode batch, #running-req: 5, #token: 20800, token usage: 0.29, "
        "accept len: 2.10, accept rate: 0.37, cuda graph: True, gen throughput (token/s): 144.95, #queue-req: 0\n")


def test_refresh_reads_in_slices(tmp_path: Path, monkeypatch):
    log = tmp_path / "s.log"
    log.write_text(LINE * 2000)  # ~370 KB
    monkeypatch.setattr(monitor_mod, "REFRESH_SLICE_BYTES", 64 * 1024)
    cfg = ServerConfig(name="s", model_path="/m", sglang_version="0.5.23")
    mon = ServerMonitor(cfg, log, "0.5.23", watch=False, http=False)
    mon.ingester.chunk_bytes = 16 * 1024
    holds = []
    real_poll = mon.ingester.poll

    def poll(max_bytes=None):
        assert max_bytes == 64 * 1024
        n = real_poll(max_bytes=max_bytes)
        holds.append(n)
        return n

    mon.ingester.poll = poll
    total = mon.refresh()
    assert total == log.stat().st_size
    assert len(holds) >= 5  # several lock holds, not one
    assert mon.snapshot().decode["accept_len"][-1] == 2.10
    assert mon.refresh() == 0


def test_snapshot_says_when_the_monitor_last_refreshed(tmp_path: Path):
    log = tmp_path / "s.log"
    log.write_text(LINE)
    now = [1000.0]
    cfg = ServerConfig(name="s", model_path="/m", sglang_version="0.5.23")
    mon = ServerMonitor(cfg, log, "0.5.23", watch=False, http=False, clock=lambda: now[0])
    assert mon.snapshot().refreshed_at is None  # never read: the page says "no data yet"
    mon.refresh()
    now[0] = 1030.0
    snap = mon.snapshot()
    assert snap.refreshed_at == 1000.0 and snap.taken_at == 1030.0  # the age is real, not "now"


def test_health_of_the_old_endpoint_is_dropped_after_a_config_change(tmp_path: Path):
    from backend.sglang.client import Reading

    log = tmp_path / "s.log"
    log.write_text("")
    cfg = ServerConfig(name="s", model_path="/m", sglang_version="0.5.23", port=31001)
    mon = ServerMonitor(cfg, log, "0.5.23", watch=False, http=True)

    class SlowOldClient:
        def health(self):
            # the relaunch with a new port lands while this request is in flight
            mon.set_config(cfg.model_copy(update={"port": 31002}))
            return Reading(value=None, at=1.0, ok=True, status=200, error=None, latency_s=0.0)

        def metrics(self):
            return Reading(value=None, at=1.0, ok=True, status=200)

        def server_info(self):
            return Reading(value=None, at=1.0, ok=True, status=200)

    mon.client = SlowOldClient()
    mon._poll_http()
    assert mon.snapshot().health is None  # not the old server's "ok"


def test_a_snapshot_during_a_long_slice_is_the_last_one_of_the_run_not_a_wait(tmp_path: Path):
    """While a catch-up slice holds the lock, a page's snapshot does not wait for it: it gets the last
    snapshot of the same run and config.  Another run (a relaunch) or a changed config waits for the lock."""
    import threading
    import time

    from backend.sglang.runs import RunInfo

    log = tmp_path / "s.log"
    log.write_text(LINE * 10)
    cfg = ServerConfig(name="s", model_path="/m", sglang_version="0.5.23")
    mon = ServerMonitor(cfg, log, "0.5.23", watch=False, http=False)
    mon.refresh()
    run = RunInfo("r1", 1000.0, True)
    first = mon.snapshot(run)
    held, release = threading.Event(), threading.Event()

    def slice_holding_the_lock():
        with mon._lock:
            held.set()
            release.wait(10)

    t = threading.Thread(target=slice_holding_the_lock)
    t.start()
    held.wait(5)
    t0 = time.monotonic()
    assert mon.snapshot(run) is first  # the last one of this run, at once
    assert time.monotonic() - t0 < 2.0
    got: list = []
    other = threading.Thread(target=lambda: got.append(mon.snapshot(RunInfo("r2", 2000.0, True))))
    other.start()
    other.join(0.5)
    assert other.is_alive() and not got  # another run waits for the slice to end
    release.set()
    other.join(5)
    t.join(5)
    assert got and got[0] is not first
    # a fresh snapshot once the lock is free
    assert mon.snapshot(run) is not first
