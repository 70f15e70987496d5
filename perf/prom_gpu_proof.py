"""Real-GPU proof of the Prometheus path: NVML -> Specdeck's exporter -> Prometheus -> the GPUs page's reader.

    python3 perf/prom_gpu_proof.py --prometheus /usr/bin/prometheus --out "$OUT"

On a machine with NVIDIA GPUs (nvidia-ml-py and prometheus_client installed; torch with CUDA for the
load, optional): it loads every GPU with bf16 matmuls, samples them with the real NVML adapter at 1 Hz,
exports the samples in nvitop-exporter's names (backend/telemetry/promexport.py), lets a real Prometheus
scrape that exporter every second (file_sd targets file, as Specdeck writes it), and reads the node back
through Prometheus's HTTP API (backend/telemetry/promsource.py), as the GPUs page does for other nodes.
For each read it prints the GPU's figures from NVML and from Prometheus side by side, and at the end
the largest difference per field and the read's cost.  report.json and report.txt go to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backend.telemetry.promexport import Exporter, SnapshotCollector  # noqa: E402
from backend.telemetry.promql import PromClient  # noqa: E402
from backend.telemetry.promsource import PromSource  # noqa: E402
from backend.telemetry.sampler import make_sampler  # noqa: E402

FIELDS = ("util_gpu", "mem_used", "mem_total", "temp_c", "power_w", "sm_clock_mhz")
LOAD = """
import sys, time, torch
end = time.time() + float(sys.argv[1])
devs = list(range(torch.cuda.device_count()))
mats = [torch.randn(8192, 8192, device=f"cuda:{d}", dtype=torch.bfloat16) for d in devs]
while time.time() < end:
    for m in mats:
        m @ m
    for d in devs:
        torch.cuda.synchronize(d)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{url} not ready after {timeout:.0f} s")


def end(proc: subprocess.Popen, grace: float = 10.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prometheus", default=shutil.which("prometheus") or "prometheus")
    ap.add_argument("--seconds", type=float, default=40.0, help="how long to read through Prometheus")
    ap.add_argument("--source", default="nvml", choices=("nvml", "fake"), help="fake: a dry run without GPUs")
    ap.add_argument("--no-load", action="store_true", help="leave the GPUs idle")
    ap.add_argument("--out", default=os.environ.get("OUT") or ".")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="prom-gpu-proof-"))
    node = "gpu-node"
    os.environ["SPECDECK_NODE_NAME"] = "reader"  # the reader is "another node": every GPU read is remote

    load = None
    if not args.no_load:
        load = subprocess.Popen([sys.executable, "-c", LOAD, str(args.seconds + 30)])
    sampler = make_sampler(gpu_source=args.source, interval_s=1.0).start()
    exporter = Exporter(f"127.0.0.1:{free_port()}", SnapshotCollector(sampler.latest, hostname=node, source=args.source)).start()
    targets = tmp / "targets.json"
    targets.write_text(json.dumps([{"targets": [exporter.address], "labels": {"node": node}}]))
    (tmp / "prometheus.yml").write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        "scrape_configs:\n  - job_name: specdeck\n    file_sd_configs:\n"
        f"      - files: ['{targets}']\n        refresh_interval: 1s\n")
    port = free_port()
    prom = subprocess.Popen([args.prometheus, f"--config.file={tmp / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
                             "--storage.tsdb.retention.time=1h", "--log.level=warn"])
    rows: list[dict] = []
    read_ms: list[float] = []
    try:
        wait_ready(f"http://127.0.0.1:{port}/-/ready", 30)
        source = PromSource(PromClient(f"http://127.0.0.1:{port}"), max_age_s=30, interval_s=2.0, backfill_s=0)
        t_end = time.monotonic() + args.seconds
        while time.monotonic() < t_end:
            time.sleep(2.0)
            snap = source.read_once()
            local = sampler.latest()
            if snap.query_ms is not None:
                read_ms.append(snap.query_ms)
            nodes = [n for n in snap.nodes if n.node == node]
            if snap.error or not nodes or local is None:
                print(f"read: {snap.error or 'node not seen yet'}", flush=True)
                continue
            remote = {g.index: g for g in nodes[0].gpus}
            for g in local.gpus:
                r = remote.get(g.index)
                row = {"t": round(snap.t, 1), "gpu": g.index, "name": g.name, "age_s": nodes[0].age_s,
                       "health": nodes[0].health}
                for f in FIELDS:
                    row[f"nvml_{f}"] = getattr(g, f)
                    row[f"prom_{f}"] = None if r is None else getattr(r, f)
                rows.append(row)
                print(f"gpu {g.index} {g.name}: util {g.util_gpu} / {row['prom_util_gpu']} %, "
                      f"mem {g.mem_used} / {row['prom_mem_used']} B, power {g.power_w} / {row['prom_power_w']} W, "
                      f"temp {g.temp_c} / {row['prom_temp_c']} C, sm {g.sm_clock_mhz} / {row['prom_sm_clock_mhz']} MHz "
                      f"(node {nodes[0].health}, scraped {nodes[0].age_s} s ago)", flush=True)
    finally:
        end(prom)
        exporter.stop()
        sampler.stop()
        if load is not None:
            end(load)
        shutil.rmtree(tmp, ignore_errors=True)

    # The exporter serves the newest sample and Prometheus scrapes it up to 1 s later, so the two
    # readings of one row can be a sample apart: compare the figures that change slowly exactly and
    # report the others' spread.
    summary: dict = {"rows": len(rows), "gpus": sorted({r["gpu"] for r in rows}),
                     "read_ms_median": statistics.median(read_ms) if read_ms else None}
    for f in FIELDS:
        pairs = [(r[f"nvml_{f}"], r[f"prom_{f}"]) for r in rows]
        seen = [(a, b) for a, b in pairs if a is not None and b is not None]
        summary[f] = {"both": len(seen), "nvml_only": sum(1 for a, b in pairs if a is not None and b is None),
                      "max_abs_diff": max((abs(a - b) for a, b in seen), default=None),
                      "median_abs_diff": statistics.median([abs(a - b) for a, b in seen]) if seen else None,
                      "nvml_max": max((a for a, _ in seen), default=None)}
    text = json.dumps(summary, indent=2)
    print(text)
    (out / "report.json").write_text(json.dumps({"summary": summary, "rows": rows}, indent=1, default=str))
    (out / "report.txt").write_text(text + "\n")
    return 0 if rows else 1


if __name__ == "__main__":
    raise SystemExit(main())
