"""Each alert rule fires on a snapshot that shows its condition and gives nothing once it clears."""

from __future__ import annotations

from backend.alerts import rules
from backend.alerts.model import DiskState, GpuState, RegenState, ServerState, Snapshot, Thresholds

TH = Thresholds()
T0 = 1_800_000_000.0
GIB = 1024 ** 3


def one(alerts, rule):
    found = [a for a in alerts if a.rule == rule]
    assert len(found) == 1, alerts
    return found[0]


# -- accept_len stuck ------------------------------------------------------------------------

def _spec_server(accepts, *, state="RUNNING", spec_on=True):
    return ServerState("glm5", state, spec_on=spec_on, ready_at=T0,
                       accept=tuple((T0 + 5 + 5 * i, a) for i, a in enumerate(accepts)))


def test_accept_stuck_fires_after_the_window_and_clears_when_accepting():
    stuck = _spec_server([1.0, 1.01, 1.0, 1.02])
    # before the window has passed: no verdict yet
    assert rules.accept_stuck(Snapshot(T0 + 30, servers=(stuck,)), TH) == []
    a = one(rules.accept_stuck(Snapshot(T0 + 61, servers=(stuck,)), TH), "accept-stuck")
    assert a.severity == "error" and a.link == "/servers?server=glm5" and "EAGLE3" in a.action
    assert a.key == "accept-stuck:glm5" and a.since == T0 + 60
    # a draft that accepts next to nothing shows an odd reading above the floor on a small batch:
    # still stuck (its mean is what counts), and the message gives the mean
    noisy = _spec_server([1.02, 1.07, 1.0, 1.03])
    a = one(rules.accept_stuck(Snapshot(T0 + 61, servers=(noisy,)), TH), "accept-stuck")
    assert "accept_len 1.03 since ready (mean of 4 readings)" in a.title
    # a draft that accepts a little: above the floor on average, nothing
    assert rules.accept_stuck(Snapshot(T0 + 61, servers=(_spec_server([1.02, 1.3, 1.1, 1.05]),)), TH) == []
    # a relaunched server that accepts drafts: nothing
    good = _spec_server([2.4, 2.6, 2.5])
    assert rules.accept_stuck(Snapshot(T0 + 61, servers=(good,)), TH) == []
    # speculation off, or the server stopped: nothing
    assert rules.accept_stuck(Snapshot(T0 + 61, servers=(_spec_server([1.0] * 4, spec_on=False),)), TH) == []
    assert rules.accept_stuck(Snapshot(T0 + 61, servers=(_spec_server([1.0] * 4, state="EXITED"),)), TH) == []


# -- speculation slower than the baseline at the same load ---------------------------------

def _speed_server(points, baseline):
    return ServerState("glm5", "RUNNING", spec_on=True, ready_at=T0, speed=tuple(points), baseline=baseline)


def test_spec_slower_needs_a_steady_window_at_one_measured_load():
    now = T0 + 1000
    steady = [(now - 300 + 10 * i, 60.0, 8) for i in range(31)]
    a = one(rules.spec_slower(Snapshot(now, servers=(_speed_server(steady, {8: 90.0}),)), TH), "spec-slower")
    assert a.severity == "warning" and "concurrency 8" in a.title and "0.67×" in a.title
    assert a.link == "/benchmarks?server=glm5&concurrency=8"
    # faster than the baseline: clears
    fast = [(t, 100.0, c) for t, _, c in steady]
    assert rules.spec_slower(Snapshot(now, servers=(_speed_server(fast, {8: 90.0}),)), TH) == []
    # the load changed inside the window: not steady, no verdict
    mixed = steady[:15] + [(t, v, 16) for t, v, _ in steady[15:]]
    assert rules.spec_slower(Snapshot(now, servers=(_speed_server(mixed, {8: 90.0, 16: 120.0}),)), TH) == []
    # no baseline measured at this load: no verdict (never compared with another load's)
    assert rules.spec_slower(Snapshot(now, servers=(_speed_server(steady, {1: 90.0}),)), TH) == []
    # readings cover only the last minute: the window is not steady yet
    short = [p for p in steady if p[0] >= now - 60]
    assert rules.spec_slower(Snapshot(now, servers=(_speed_server(short, {8: 90.0}),)), TH) == []


# -- server down or restarting in a loop -----------------------------------------------------

def test_server_down_and_restart_loop():
    now = T0
    fatal = ServerState("glm5", "FATAL", exit_code=1, tries=1, detail="CUDA out of memory")
    a = one(rules.server_down(Snapshot(now, servers=(fatal,)), TH), "server-down")
    assert a.severity == "error" and "exit code 1" in a.title and "CUDA out of memory" in a.title
    loop = ServerState("glm5", "BACKOFF", exit_code=1, tries=3)
    b = one(rules.server_down(Snapshot(now, servers=(loop,)), TH), "server-restart-loop")
    assert "3 tries" in b.title
    # one restart after a failure is the restart policy at work, not yet a loop
    assert rules.server_down(Snapshot(now, servers=(ServerState("glm5", "BACKOFF", tries=1),)), TH) == []
    for ok in (ServerState("glm5", "RUNNING"), ServerState("glm5", "EXITED", exit_code=0),
               ServerState("glm5", "STOPPED")):
        assert rules.server_down(Snapshot(now, servers=(ok,)), TH) == []


# -- regeneration ----------------------------------------------------------------------------

def test_regen_stalled_fires_after_stall_time_and_not_when_paused():
    job = RegenState("regen-code", True, started_at=T0, last_completion_at=T0 + 100)
    assert rules.regen_stalled(Snapshot(T0 + 100 + 599, regens=(job,)), TH) == []
    a = one(rules.regen_stalled(Snapshot(T0 + 100 + 601, regens=(job,)), TH), "regen-stalled")
    assert a.link == "/regeneration?job=regen-code" and "10 m 01 s" in a.title
    stopped = RegenState("regen-code", False, started_at=T0, last_completion_at=T0 + 100)
    assert rules.regen_stalled(Snapshot(T0 + 5000, regens=(stopped,)), TH) == []


def test_regen_error_rate_rising_fires_and_an_old_rate_does_not():
    now = T0 + 2000
    # 1 % failed until 10 minutes ago, then 40 of the last 200 rows
    pts = ((T0, 0, 0), (now - 700, 990, 10), (now - 600, 1000, 10), (now, 1160, 50))
    a = one(rules.regen_errors(Snapshot(now, regens=(RegenState("r", True, points=pts),)), TH), "regen-errors")
    assert "20% of the last 200 rows failed" in a.title and "was 1%" in a.title
    # the same share as before the window: not rising
    flat = ((T0, 0, 0), (now - 600, 800, 200), (now, 960, 240))
    assert rules.regen_errors(Snapshot(now, regens=(RegenState("r", True, points=flat),)), TH) == []
    # recovered: few failures in the window
    ok = ((T0, 0, 0), (now - 600, 1000, 10), (now, 1199, 11))
    assert rules.regen_errors(Snapshot(now, regens=(RegenState("r", True, points=ok),)), TH) == []


def test_eta_past_the_deadline():
    deadline = T0 + 10 * 3600
    late = RegenState("r", True, eta_low_s=8 * 3600, eta_point_s=11 * 3600, eta_high_s=14 * 3600, deadline=deadline)
    a = one(rules.eta_deadline(Snapshot(T0, regens=(late,)), TH), "eta-deadline")
    assert a.severity == "warning" and "1 h 00 m after its deadline" in a.title
    later = RegenState("r", True, eta_low_s=11 * 3600, eta_point_s=12 * 3600, deadline=deadline)
    assert one(rules.eta_deadline(Snapshot(T0, regens=(later,)), TH), "eta-deadline").severity == "error"
    on_time = RegenState("r", True, eta_low_s=6 * 3600, eta_point_s=9 * 3600, deadline=deadline)
    assert rules.eta_deadline(Snapshot(T0, regens=(on_time,)), TH) == []
    no_deadline = RegenState("r", True, eta_point_s=99 * 3600)
    assert rules.eta_deadline(Snapshot(T0, regens=(no_deadline,)), TH) == []


# -- GPUs and disk ---------------------------------------------------------------------------

def test_gpu_memory_throttle_and_idle():
    full = GpuState(3, mem_used=int(78 * GIB), mem_total=int(80 * GIB))
    a = one(rules.gpu_memory(Snapshot(T0, gpus=(full,)), TH), "gpu-memory")
    assert a.subject == "3" and a.link == "/gpus?gpu=3" and "78.0 of 80.0 GiB" in a.title
    assert rules.gpu_memory(Snapshot(T0, gpus=(GpuState(3, int(60 * GIB), int(80 * GIB)),)), TH) == []
    hot = GpuState(0, throttle=("sw_thermal",))
    assert one(rules.gpu_throttle(Snapshot(T0, gpus=(hot,)), TH), "gpu-throttle").subject == "0"
    assert rules.gpu_throttle(Snapshot(T0, gpus=(GpuState(0),)), TH) == []

    now = T0 + 1000
    idle_util = tuple((now - 300 + i, 0.0) for i in range(301))
    held = GpuState(1, util=idle_util, held_by=("regen-code",))
    b = one(rules.gpu_idle(Snapshot(now, gpus=(held,)), TH), "gpu-idle")
    assert "regen-code" in b.title
    assert rules.gpu_idle(Snapshot(now, gpus=(GpuState(1, util=idle_util),)), TH) == []  # nobody holds it
    busy = tuple((t, 80.0 if t > now - 5 else 0.0) for t, _ in idle_util)
    assert rules.gpu_idle(Snapshot(now, gpus=(GpuState(1, util=busy, held_by=("r",)),)), TH) == []
    gap = tuple((t, None if t == now - 100 else 0.0) for t, _ in idle_util)  # N/A is not idle
    assert rules.gpu_idle(Snapshot(now, gpus=(GpuState(1, util=gap, held_by=("r",)),)), TH) == []


def test_disk_nearly_full_where_outputs_go():
    low = DiskState("/data/outputs", free_bytes=int(3 * GIB), total_bytes=int(500 * GIB))
    a = one(rules.disk_full(Snapshot(T0, disks=(low,)), TH), "disk-full")
    assert a.severity == "warning" and "/data/outputs" in a.title
    full = DiskState("/data/outputs", free_bytes=int(0.2 * GIB), total_bytes=int(500 * GIB))
    assert one(rules.disk_full(Snapshot(T0, disks=(full,)), TH), "disk-full").severity == "error"
    ok = DiskState("/data/outputs", free_bytes=int(50 * GIB), total_bytes=int(500 * GIB))
    assert rules.disk_full(Snapshot(T0, disks=(ok,)), TH) == []
    assert rules.disk_full(Snapshot(T0, disks=(low,)), Thresholds(disk_min_free_gb=2)) == []


def test_evaluate_puts_errors_first():
    snap = Snapshot(T0, servers=(ServerState("a", "FATAL", exit_code=1),),
                    disks=(DiskState("/o", int(3 * GIB), int(100 * GIB)),))
    got = rules.evaluate(snap, TH)
    assert [a.rule for a in got] == ["server-down", "disk-full"]
