"""Job cost on the command line: ``regen status --json``, ``train runs --json`` and ``bench list --json`` carry
``gpu_hours`` and ``energy_kwh`` per job (real values for a job whose GPUs are known, the energy from the
power history the dashboard's telemetry stored) and, where a figure is not known, null with the reason; their
text output has the same figures or N/A with a few words.

Real processes run the jobs (a training run's trainer is a stand-in script, a regeneration job a short
python), each ending by itself within seconds; the fixture stops any still live."""

from __future__ import annotations

import io
import json
import os
import sys
import time
from pathlib import Path

import pytest

from backend.cli import main
from specdeck_types.bench import BenchConfig, BenchFigures, BenchLoad, BenchResult
from state.bench import BenchStore
from state.store import Store
from state.telemetry import Bucket, TelemetryStore
from tests.helpers import free_port, wait_for

pytestmark = pytest.mark.timeout(240)

WATTS = 250.0  # every GPU's draw in the stored power history
CLUSTER_PY = os.environ.get("SPECDECK_CLUSTER_PYTHON") or str(
    Path(__file__).resolve().parents[2] / ".venv-cluster" / "bin" / "python")
TRAINER = "import time\nprint('training', flush=True)\ntime.sleep(1.0)\n"
# the training environment's python: torchrun (-m torch.distributed.run --standalone --nproc_per_node N)
# runs the script as one process here
FAKE_PYTHON = f"""#!/bin/sh
if [ "$1" = "-m" ] && [ "$2" = "torch.distributed.run" ]; then
  shift 5
fi
exec {sys.executable} "$@"
"""


@pytest.fixture
def ws(tmp_path, monkeypatch):
    root = tmp_path / "ws"
    (root / "models").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "data" / "t.jsonl").write_text('{"messages": []}\n')
    (root / "trainer.py").write_text(TRAINER)
    py = root / "python"
    py.write_text(FAKE_PYTHON)
    py.chmod(0o755)
    gport = free_port()
    train = (f'python = "{py}"\ngeneration = "gen2"\nentry = "script:{root / "trainer.py"}"\n'
             f'target_model = "{root / "models"}"\ntrain_data = "{root / "data" / "t.jsonl"}"\n')
    (root / "specdeck.toml").write_text(f"""[workspace]
name = "cost"

[telemetry]
source = "fake"

[[server]]
name = "g"
model_path = "{root / 'models'}"
port = {gport}
simulate = true
gpus = [0, 1]

[[server]]
name = "h"
model_path = "{root / 'models'}"
port = {free_port()}
simulate = true

[[router]]
name = "fleet"
port = {free_port()}
metrics_port = {free_port()}
servers = ["g"]
python = "{CLUSTER_PY}"

[[train]]
name = "tg"
gpus = [2, 3]
{train}
[[train]]
name = "tn"
{train}""")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SPECDECK_WORKSPACE", raising=False)
    try:
        yield root, gport
    finally:
        run(root, "processes", "stop-all")


def run(root: Path, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    rc = main(["--workspace", str(root), *argv], out=out, err=err)
    return rc, out.getvalue(), err.getvalue()


def store_power(root: Path, gpus, since: float, until: float) -> None:
    """The power history the dashboard's telemetry would have stored: one-minute buckets of WATTS."""
    with Store(root / "state.db") as store:
        t0 = int(since // 60) * 60
        TelemetryStore(store).write([Bucket("gpu", g, "power_w", float(t), 60.0, 60, WATTS, WATTS, WATTS)
                                     for g in gpus for t in range(t0, int(until) + 60, 60)])


def _listed(root: Path, cmd: list[str]) -> dict:
    rc, out, err = run(root, *cmd)
    assert rc == 0, err
    return {r["name"]: r for r in json.loads(out)}


def test_train_runs_give_gpu_hours_and_energy_or_na_with_why(ws):
    root, _ = ws
    now = time.time()
    store_power(root, range(4), now - 300, now + 600)
    rows = _listed(root, ["train", "runs", "--json"])
    tn = rows["tn"]
    assert tn["state"] == "NEVER" and tn["gpu_hours"] is None and tn["energy_kwh"] is None
    assert tn["cost"]["na"] == "not started" and tn["cost"]["gpu_hours_why"]

    for name in ("tg", "tn"):
        rc, _, err = run(root, "train", "start", name)
        assert rc == 0, err
    wait_for(lambda: all(r["state"] == "EXITED" for r in _listed(root, ["train", "runs", "--json"]).values()),
             90, "both training runs to end", every=0.5)
    rows = _listed(root, ["train", "runs", "--json"])
    tg, tn = rows["tg"], rows["tn"]
    # tg: CUDA_VISIBLE_DEVICES=2,3 for its time; energy from the stored power of GPUs 2 and 3
    secs = tg["cost"]["seconds"]
    assert secs > 0.5 and tg["cost"]["gpus"] == [2, 3] and tg["cost"]["gpus_from"] == "CUDA_VISIBLE_DEVICES"
    assert tg["gpu_hours"] == pytest.approx(2 * secs / 3600)
    assert tg["energy_kwh"] == pytest.approx(2 * WATTS * secs / 3.6e6, rel=0.01)
    assert tg["cost"]["gpu_hours_why"] is None and "power readings" in tg["cost"]["energy_why"]
    # tn: no GPU in its spec and none seen by the telemetry: N/A with why, never 0
    assert tn["gpu_hours"] is None and tn["energy_kwh"] is None
    assert tn["cost"]["na"] == "GPUs not known" and "CUDA_VISIBLE_DEVICES" in tn["cost"]["gpu_hours_why"]

    rc, text, _ = run(root, "train", "runs")
    lines = {ln.split()[0]: ln for ln in text.splitlines() if ln and not ln.startswith(" ")}
    assert f"{tg['gpu_hours']:,.2f} GPU-h, {tg['energy_kwh']:,.2f} kWh" in lines["tg"]
    assert "cost N/A (GPUs not known)" in lines["tn"]


def _result(server: str, start: float | None, secs: float, tp: int | None = None) -> BenchResult:
    return BenchResult(source="run", server=server, config=BenchConfig(target_model="M", algorithm="EAGLE3", tp=tp),
                       load=BenchLoad(concurrency=1, num_prompts=4, input_len=8, output_len=8),
                       results=BenchFigures(output_tok_s=50.0, completed=4),
                       started_at=start, ended_at=None if start is None else start + secs)


def test_bench_list_gives_each_results_cost(ws):
    root, _ = ws
    t = time.time() - 3600
    store_power(root, range(2), t - 120, t + 1000)
    with Store(root / "state.db") as store:
        bs = BenchStore(store)
        for r in (_result("g", t, 720.0), _result("fleet", t, 360.0), _result("h", t, 60.0),
                  _result("elsewhere", t, 60.0), _result("g", None, 0.0)):
            bs.insert(r)
    rc, out, err = run(root, "bench", "list", "--json")
    assert rc == 0, err
    g, fleet, h, elsewhere, untimed = [json.loads(ln) for ln in out.splitlines()]
    assert g["gpu_hours"] == pytest.approx(2 * 720 / 3600) and g["cost"]["gpus"] == [0, 1]
    assert g["energy_kwh"] == pytest.approx(2 * WATTS * 720 / 3.6e6, rel=0.01)
    # through the router: the GPUs of the server behind it
    assert fleet["gpu_hours"] == pytest.approx(2 * 360 / 3600) and "router fleet" in fleet["cost"]["gpus_from"]
    assert fleet["energy_kwh"] == pytest.approx(2 * WATTS * 360 / 3.6e6, rel=0.01)
    # a server whose config names no GPUs, one not in the workspace, a result without times: N/A with why
    assert h["gpu_hours"] is None and "sets no gpus" in h["cost"]["gpu_hours_why"]
    assert elsewhere["gpu_hours"] is None and elsewhere["cost"]["na"] == "GPUs not known"
    assert "not in this workspace" in elsewhere["cost"]["gpu_hours_why"]
    assert untimed["gpu_hours"] is None and untimed["energy_kwh"] is None
    assert untimed["cost"]["na"] == "no start or end time"

    rc, text, _ = run(root, "bench", "list")
    lines = text.splitlines()
    assert lines[0].endswith(f"· cost {g['gpu_hours']:,.3f} GPU-h, {g['energy_kwh']:,.3f} kWh")
    assert lines[2].endswith("· cost N/A (GPUs not known)") and lines[4].endswith("· cost N/A (no start or end time)")


def test_regen_status_gives_the_cost_of_a_run_started_here_and_why_not_otherwise(ws, tmp_path):
    from backend.cli.session import Session
    from backend.regen.output import RunFiles
    from backend.supervisor.adhoc import save_job
    from specdeck_types.process import Kind, ProcessSpec

    root, gport = ws
    now = time.time()
    store_power(root, range(2), now - 300, now + 600)
    here, elsewhere = root / "outputs" / "regen" / "here.jsonl", tmp_path / "elsewhere.jsonl"
    for out in (here, elsewhere):
        out.parent.mkdir(parents=True, exist_ok=True)
        snap = {"t": now, "state": "done", "total": 4, "done": 4, "failed": 0, "skipped": 0, "in_flight": 0,
                "remaining": 0, "req_s": 0.0, "tok_s": 0.0, "completion_tokens": 9000, "started_at": now,
                "servers": {f"http://127.0.0.1:{gport}": {"name": "g", "state": "up", "done": 4}}}
        RunFiles.of(out).progress.write_text(json.dumps(snap) + "\n")
    spec = ProcessSpec(name="regen-here", kind=Kind.REGENERATION, log_path=str(root / "logs" / "regen-here.log"),
                       argv=(sys.executable, "-c", "import time; time.sleep(1.0)"))
    s = Session(str(root))
    try:
        save_job(s.ws.run_dir, spec, {"kind": "regen", "out": str(here)})
        s.sup.sync_specs([spec], prune=False)
        s.sup.start("regen-here", actor="test", source="test")

        def ended() -> bool:
            s.sup.poll()
            v = s.sup.view("regen-here")
            return v is not None and v.state.value == "EXITED"

        wait_for(ended, 60, "the regeneration stand-in to end", every=0.2)
    finally:
        s.close()

    rc, out, err = run(root, "regen", "status", str(here), "--json")
    assert rc == 0, err
    got = json.loads(out)
    secs = got["cost"]["seconds"]
    assert secs > 0.5 and got["cost"]["gpus"] == [0, 1] and "g" in got["cost"]["gpus_from"]
    assert got["gpu_hours"] == pytest.approx(2 * secs / 3600)
    assert got["energy_kwh"] == pytest.approx(2 * WATTS * secs / 3.6e6, rel=0.01)
    assert got["done"] == 4  # the snapshot's own fields are still there
    # tokens per kWh at the top, as gpu_hours and energy_kwh: the answer tokens of this start over its energy
    assert got["tokens_per_kwh"] == pytest.approx(9000 / got["energy_kwh"], rel=1e-6)
    assert got["cost"]["tokens"] == 9000
    rc, out, err = run(root, "regen", "status", str(here))
    assert rc == 0, err
    assert f"{got['tokens_per_kwh']:,.0f} tokens/kWh" in out, out

    rc, out, err = run(root, "regen", "status", str(elsewhere), "--json")
    assert rc == 0, err
    got = json.loads(out)
    assert got["gpu_hours"] is None and got["energy_kwh"] is None and got["tokens_per_kwh"] is None
    assert got["cost"]["na"] == "run not started here" and "progress log" in got["cost"]["gpu_hours_why"]

    # without --workspace: the workspace the output lies in; an output in none (and no demo yet) says so
    out, err = io.StringIO(), io.StringIO()
    assert main(["regen", "status", str(here), "--json"], out=out, err=err) == 0, err.getvalue()
    assert json.loads(out.getvalue())["cost"]["gpus"] == [0, 1]
    out = io.StringIO()
    assert main(["regen", "status", str(elsewhere), "--json"], out=out, err=io.StringIO()) == 0
    got = json.loads(out.getvalue())
    assert got["gpu_hours"] is None and got["cost"]["na"] == "no workspace"
    assert not (Path(os.environ["SPECDECK_HOME"]) / "demo").exists()  # no demo workspace made by a status

    rc, text, _ = run(root, "regen", "status", str(elsewhere))
    assert "  cost: N/A (run not started here); this run was started outside" in text
    rc, text, _ = run(root, "regen", "status", str(here))
    assert any(ln.startswith("  cost: ") and "GPU-h, " in ln and "kWh" in ln for ln in text.splitlines())
