"""Real-GPU proof of training: the project's trainer at ``--size large`` on CUDA, started through
the supervisor's launch path while the telemetry sampler (the real NVML adapter) attributes the GPU
to the run and the training log reader follows its log.

    python3 perf/train_gpu_proof.py --out "$OUT" [--steps 600] [--max-seconds 420]

The run is a ``[[train]]`` entry of a workspace written into ``--work`` (a temporary folder by
default), started with ``TrainRuns.start`` as ``python -m backend.cli train start`` does.  Once a
second the supervisor is polled, the sampler takes a sample and the reader reads what the log grew
by.  Written into ``--out``:

- ``train.log``: the run's log as the trainer wrote it;
- ``frames.jsonl``: one line per second: GPU utilisation, memory, power, the attribution line of
  each GPU, the run's state, and the newest step the reader has;
- ``records.jsonl``: every record the reader parsed (step, epoch, position, metrics);
- ``checkpoint.json``: the last checkpoint inspected without loading its weights;
- ``report.txt``: the summary (steps, loss and acc first/last, attribution, unparsed lines).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

NAME = "h200-draft"


def _workspace(root: Path, steps: int, args: argparse.Namespace) -> None:
    py = sys.executable
    target, data = root / "models" / "target", root / "data" / "train.jsonl"
    data.parent.mkdir(parents=True, exist_ok=True)
    for argv in ([py, "-m", "backend.flows.tiny", "make-target", str(target), "--size", args.size],
                 [py, "-m", "backend.flows.tiny", "make-data", str(data), "--rows", str(args.rows)]):
        subprocess.run(argv, cwd=REPO, check=True)
    (root / "specdeck.toml").write_text(f"""\
# the real-GPU proof of training (perf/train_gpu_proof.py)
[telemetry]
source = "{args.source}"
interval_s = 1.0

[[train]]
name = "{NAME}"
python = {json.dumps(py)}
generation = "gen2"
entry = "module:backend.flows.tiny train"
target_model = {json.dumps(str(target))}
train_data = {json.dumps(str(data))}
num_epochs = 1000
batch_size = {args.batch_size}
learning_rate = 1e-3
max_length = {args.max_length}
ttt_length = 7
save_interval = {max(1, steps // 3)}
log_interval = 10
seed = 0
gpus = [0]
extra_args = ["--device", "{args.device}", "--size", "{args.size}", "--max-num-steps", "{steps}"]
""", encoding="utf-8")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "artifacts/train-gpu-proof"))
    ap.add_argument("--work", default=None, help="workspace folder (default: a temporary one)")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--max-length", type=int, default=512)
    ap.add_argument("--max-seconds", type=float, default=420.0)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--size", choices=["large", "tiny"], default="large")
    ap.add_argument("--source", choices=["nvml", "fake"], default="nvml",
                    help="telemetry source (fake: a trial run of this script on a machine without a GPU)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    root = Path(args.work or tempfile.mkdtemp(prefix="specdeck-train-proof-"))
    root.mkdir(parents=True, exist_ok=True)
    _workspace(root, args.steps, args)

    from backend.supervisor.supervisor import Supervisor
    from backend.telemetry.sampler import make_workspace_sampler
    from backend.train.checkpoints import inspect_checkpoint, list_checkpoints
    from backend.train.reader import TrainLogReader
    from backend.train.runs import TrainRuns
    from backend.flows.workspace import load_workspace
    from state.store import Store

    ws = load_workspace(str(root))
    store = Store(ws.store_path)
    sup = Supervisor(store, ws.run_dir, default_cwd=ws.root)
    runs = TrainRuns(ws, sup, store)
    sup.sync_specs(ws.process_specs() + runs.specs(), prune=False)
    sampler = make_workspace_sampler(ws, store, managed=sup.views)
    print("command:", " ".join(runs.command(NAME).argv), flush=True)
    runs.start(NAME, actor="proof", source="cli")
    reader = TrainLogReader(runs.log_path(NAME))
    frames, records = [], []
    t0 = time.time()
    busy_lines: list[str] = []
    try:
        while time.time() - t0 < args.max_seconds:
            time.sleep(max(0.0, 1.0 - (time.time() - t0) % 1.0))
            sup.poll()
            snap = sampler.sample_once()
            chunk = reader.poll()
            records.extend(chunk.records)
            v = sup.view(NAME)
            attr = snap.attribution
            gpus = [{"index": g.index, "util": g.util_gpu, "mem_gib": None if g.mem_used is None else g.mem_used / 2**30,
                     "power_w": g.power_w, "who": attr.who(g.index) if attr else None,
                     "procs": [p.pid for p in (g.processes or ())]} for g in snap.gpus]
            jobs = [j.summary for j in attr.jobs] if attr else []
            prog = reader.progress()
            frame = {"t": round(snap.t - t0, 1), "state": v.state.value if v else None, "pid": v.pid if v else None,
                     "gpus": gpus, "jobs": jobs, "step": getattr(prog, "step", None)}
            frames.append(frame)
            if jobs:
                busy_lines = jobs
            print(json.dumps(frame), flush=True)
            if v is not None and v.state.is_terminal:
                break
        else:
            runs.stop(NAME, actor="proof", source="cli", wait=True)
    finally:
        records.extend(reader.poll().records)
        records.extend(reader.flush())
        sampler.stop() if sampler.running else None
    v = sup.view(NAME)
    log_path = runs.log_path(NAME)
    (out / "train.log").write_bytes(log_path.read_bytes())
    with (out / "frames.jsonl").open("w") as f:
        for fr in frames:
            f.write(json.dumps(fr) + "\n")
    with (out / "records.jsonl").open("w") as f:
        for r in records:
            f.write(json.dumps(r.to_dict(), default=str) + "\n")
    ckpts = list_checkpoints(runs.output_dir(NAME)).checkpoints
    if ckpts:
        info = inspect_checkpoint(ckpts[-1].path)
        (out / "checkpoint.json").write_text(json.dumps(info.summary(), default=str, indent=2))
    train = [r for r in records if r.kind == "metrics" and r.split != "eval" and r.step is not None]
    first, last = (train[0], train[-1]) if train else (None, None)
    busy = [fr for fr in frames if any((g["util"] or 0) > 0 for g in fr["gpus"])]
    lines = [
        f"run {NAME}: {v.state.value if v else '?'} exit {getattr(v, 'exit_code', None)} after {time.time() - t0:.0f} s",
        f"command: {' '.join(runs.command(NAME).argv)}",
        f"records parsed: {len(records)}; unparsed lines: {reader.stats.unparsed}; ignored: {reader.stats.ignored}",
        f"first train record: step {first.step if first else None} {first.metrics if first else {}}",
        f"last train record: step {last.step if last else None} {last.metrics if last else {}}",
        f"frames: {len(frames)}; with the GPU busy: {len(busy)}",
        f"attribution (last while training): {busy_lines}",
        f"checkpoints: {[c.path.name for c in ckpts]}",
    ]
    (out / "report.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    sup.close()
    store.close()
    return 0 if v is not None and v.exit_code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
