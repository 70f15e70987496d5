"""The alerts flow over a real runtime (no background threads): the snapshot gathered from the
supervisor, telemetry and the outputs folder, an evaluation, and the sidebar's list."""

from __future__ import annotations

import dataclasses
import json
import sys
import textwrap
import time

import pytest

from backend.flows.alerts import configure, gather, thresholds_of
from backend.flows.workspace import load_workspace
from backend.runtime import Runtime


def _ws(root, alerts: str):
    root.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-c", "import sys; sys.exit(3)"]
    (root / "specdeck.toml").write_text(textwrap.dedent(f"""
        [workspace]
        name = "flowws"

        [telemetry]
        source = "fake"

        [[process]]
        name = "srv"
        kind = "server"
        argv = {json.dumps(argv)}
    """) + alerts)
    return load_workspace(root)


def test_gather_evaluate_and_sidebar(tmp_path):
    ws = _ws(tmp_path / "ws", "\n[alerts]\ndisk_min_free_gb = 1000000\nstall_s = 120\n")
    rt = Runtime(ws, background=False)
    try:
        assert thresholds_of(ws.config.alerts).stall_s == 120
        rt.start("srv", actor="test", source="test")
        deadline = time.time() + 20
        while rt.supervisor.view("srv").state.value != "EXITED" and time.time() < deadline:
            rt.supervisor.poll()
            time.sleep(0.05)
        snap = gather(rt)
        srv = next(s for s in snap.servers if s.name == "srv")
        assert (srv.state, srv.exit_code) == ("EXITED", 3)
        assert snap.disks and snap.disks[0].path == str(ws.outputs_dir)
        result = rt.alert_loop.run_once()
        assert {a.key for a in result.fired} >= {"server-down:srv", f"disk-full:{ws.outputs_dir}"}
        sidebar = [a for a in rt.active_alerts() if getattr(a, "code", "") in ("server-down", "disk-full")]
        assert {a.code for a in sidebar} == {"server-down", "disk-full"}
        assert any("[open](/servers?server=srv)" in a.title for a in sidebar)
        # acknowledged: gone from the sidebar, kept in the store
        down = next(a for a in sidebar if a.code == "server-down")
        rt.alerts.alerts.ack(down.id, "test")
        assert "server-down" not in {getattr(a, "code", "") for a in rt.active_alerts()}
        # a config edit changes the thresholds at the next evaluation
        ws.config.alerts.disk_min_free_gb = 0
        configure(rt.alerts, ws)
        cleared = rt.alert_loop.run_once().cleared
        assert [a.rule for a in cleared] == ["disk-full"]
    finally:
        rt.close()


def test_gather_reads_a_servers_decode_series_and_its_baseline_at_the_same_load(tmp_path, monkeypatch):
    """accept_len stuck at 1.00 after ready and 60 tok/s at concurrency 4 against a baseline of 90 tok/s
    measured at 4 (another at 1 is never used): both rules fire on what the fleet read from the log."""
    from backend.alerts.rules import evaluate
    from backend.sglang.runs import RunInfo
    from specdeck_types.bench import BenchConfig, BenchFigures, BenchLoad, BenchResult
    from state.bench import BenchStore
    from tests.helpers import close_runtime
    from tests.simws import make_models, page_workspace

    target, draft = make_models(tmp_path / "m", draft="draft")
    rt, log = page_workspace(tmp_path, monkeypatch, "alertsim", target, draft)
    try:
        now = time.time()
        t0 = float(int(now) - 400)
        monkeypatch.setattr(rt.fleet, "_run", lambda name: RunInfo("r1", t0 + 0.2, True))
        stamp = lambda t: time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))  # noqa: E731
        lines = [f"===== specdeck: sim run r1 starting at {stamp(t0)}: python -m backend.sim.server\n",
                 f"[{stamp(t0 + 1)}] server_args=ServerArgs(speculative_algorithm='EAGLE3')\n",
                 f"[{stamp(t0 + 10)}] The server is fired up and ready to roll!\n"]
        for i in range(36):
            t = t0 + 20 + 10 * i
            lines.append(f"[{stamp(t)} TP0] Decode batch. #running-req: 4, #token: 4000, token usage: 0.25, "
                         f"accept len: 1.00, cuda graph: True, gen throughput (token/s): 60.00, #queue-req: 0, \n")
        log.write_text("".join(lines))
        deadline = time.time() + 20
        while len(rt.fleet.snapshot("sim").decode["ts"]) < 36 and time.time() < deadline:
            rt.fleet.monitor("sim").refresh(http=False)
            time.sleep(0.05)
        bench = BenchStore(rt.store)
        for conc, tok_s in ((4, 90.0), (1, 30.0)):
            bench.insert(BenchResult(source="run", server="sim", config=BenchConfig(target_model=str(target), algorithm="NONE"),
                                     load=BenchLoad(concurrency=conc), results=BenchFigures(output_tok_s=tok_s),
                                     started_at=now - 86400))
        snap = gather(rt, now)
        sim = next(s for s in snap.servers if s.name == "sim")
        assert sim.spec_on and sim.ready_at == pytest.approx(t0 + 10, abs=1)
        assert len(sim.accept) == 36 and {a for _, a in sim.accept} == {1.0}
        assert {c for _, _, c in sim.speed} == {4} and sim.baseline == {4: 90.0}
        # the test starts no process: as the supervisor would show it running
        running = dataclasses.replace(snap, servers=(dataclasses.replace(sim, state="RUNNING"),))
        fired = {a.rule: a for a in evaluate(running, thresholds_of(rt.workspace.config.alerts))}
        assert "accept-stuck" in fired and "spec-slower" in fired
        assert "60.0 tok/s vs baseline 90.0 tok/s at concurrency 4 (0.67×)" in fired["spec-slower"].title
    finally:
        close_runtime(tmp_path)


def test_gather_reads_a_regeneration_from_its_progress_log(tmp_path):
    """A running job's done/failed readings, its last completion and its ETA come from the progress log;
    a deadline in [alerts] reaches the snapshot; the stall, error-rate and deadline rules fire on it."""
    from types import SimpleNamespace

    from backend.alerts.rules import evaluate
    from backend.regen.output import RunFiles

    now = float(int(time.time()))
    out = tmp_path / "regen" / "answers.jsonl"
    out.parent.mkdir()
    files = RunFiles.of(out)
    rows = [{"t": now - 3000 + 100 * i, "started_at": now - 3000, "state": "running", "done": 100 * i,
             "failed": 1 * i, "remaining": 100_000 - 101 * i} for i in range(20)]
    # the last 20 minutes: one row in three fails
    rows += [{"t": now - 1000 + 100 * i, "started_at": now - 3000, "state": "running", "done": 1900 + 70 * i,
              "failed": 19 + 35 * i, "remaining": 98_081 - 105 * i} for i in range(1, 11)]
    files.progress.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ws = _ws(tmp_path / "ws", "\n[alerts]\ndeadlines = { gen = 2020-01-01T00:00:00Z }\nerror_window_s = 1200\n")
    view = SimpleNamespace(state=SimpleNamespace(value="RUNNING"))
    rt = SimpleNamespace(workspace=ws, jobs=lambda: [SimpleNamespace(name="gen", meta={"kind": "regen", "out": str(out)})],
                         supervisor=SimpleNamespace(views=lambda: [], view=lambda name: view),
                         fleet=None, telemetry=None, store=None)
    snap = gather(rt, now)
    (gen,) = snap.regens
    assert gen.running and gen.last_completion_at == now and gen.points[-1] == (now, 2600, 369)
    assert gen.deadline == 1577836800.0 and gen.eta_point_s is not None and gen.eta_point_s > 0
    th = thresholds_of(ws.config.alerts)
    fired = {a.rule for a in evaluate(snap, th)}
    assert fired == {"regen-errors", "eta-deadline"}
    # nothing completed for the stall time since
    later = {a.rule for a in evaluate(dataclasses.replace(snap, now=now + 601), th)}
    assert "regen-stalled" in later


def test_gather_reads_gpus_from_telemetry(tmp_path):
    """Memory, the throttle reasons that slow a GPU (not an idle clock), and who holds it: only running
    jobs count, and their utilisation history is read for the idle rule."""
    from types import SimpleNamespace

    from backend.alerts.rules import evaluate
    from backend.telemetry.model import GpuSample, Series

    now = float(int(time.time()))
    gib = 1024 ** 3
    gpus = (GpuSample(0, now, None, None, None, mem_used=79 * gib, mem_total=80 * gib, throttle=("gpu_idle",)),
            GpuSample(1, now, None, None, None, mem_used=10 * gib, mem_total=80 * gib,
                      throttle=("sw_thermal", "gpu_idle")),
            GpuSample(2, now, None, None, None, lost=True))
    attribution = SimpleNamespace(jobs_on=lambda i: {0: ("regen", "stopped-job"), 1: ("stopped-job",)}.get(i, ()))
    snap = SimpleNamespace(gpus=gpus, attribution=attribution, interval_s=1.0)
    asked = []

    def history(index, field, since):
        asked.append((index, field))
        ts = tuple(now - 300 + i for i in range(301))
        return Series(field, index, ts, (0.0,) * len(ts))

    views = [SimpleNamespace(name="regen", state=SimpleNamespace(value="RUNNING")),
             SimpleNamespace(name="stopped-job", state=SimpleNamespace(value="EXITED"))]
    ws = _ws(tmp_path / "ws", "")
    rt = SimpleNamespace(workspace=ws, jobs=lambda: [], fleet=None, store=None,
                         supervisor=SimpleNamespace(views=lambda: views, view=lambda name: None),
                         telemetry=SimpleNamespace(latest=lambda: snap, history=history))
    got = gather(rt, now).gpus
    assert [g.index for g in got] == [0, 1]  # the lost GPU left out
    assert got[0].held_by == ("regen",) and got[1].held_by == ()
    assert got[0].throttle == () and got[1].throttle == ("sw_thermal",)
    assert asked == [(0, "util_gpu")]
    fired = {a.key for a in evaluate(gather(rt, now), thresholds_of(ws.config.alerts))}
    assert {"gpu-memory:0", "gpu-idle:0", "gpu-throttle:1"} <= fired and "gpu-idle:1" not in fired


def test_the_configured_single_stream_baseline_counts_only_at_concurrency_1(tmp_path, monkeypatch):
    """No baseline stored: the server's baseline_tok_s (90) stands in at one running request, never at four."""
    from backend.sglang.runs import RunInfo
    from tests.helpers import close_runtime
    from tests.simws import make_models, page_workspace

    target, draft = make_models(tmp_path / "m", draft="draft")
    rt, log = page_workspace(tmp_path, monkeypatch, "alertsim1", target, draft)
    try:
        now = time.time()
        t0 = float(int(now) - 400)
        monkeypatch.setattr(rt.fleet, "_run", lambda name: RunInfo("r1", t0 + 0.2, True))
        stamp = lambda t: time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))  # noqa: E731
        lines = [f"===== specdeck: sim run r1 starting at {stamp(t0)}: python -m backend.sim.server\n",
                 f"[{stamp(t0 + 10)}] The server is fired up and ready to roll!\n"]
        for i in range(36):
            running = 1 if i < 18 else 4
            lines.append(f"[{stamp(t0 + 20 + 10 * i)} TP0] Decode batch. #running-req: {running}, #token: 4000, "
                         f"token usage: 0.25, accept len: 2.00, cuda graph: True, gen throughput (token/s): "
                         f"60.00, #queue-req: 0, \n")
        log.write_text("".join(lines))
        deadline = time.time() + 20
        while len(rt.fleet.snapshot("sim").decode["ts"]) < 36 and time.time() < deadline:
            rt.fleet.monitor("sim").refresh(http=False)
            time.sleep(0.05)
        sim = next(s for s in gather(rt, now).servers if s.name == "sim")
        assert sim.baseline == {1: 90.0}
    finally:
        close_runtime(tmp_path)
