"""The GPUs page through Prometheus for 8 nodes x 8 GPUs against local sampling; prints figures,
asserts nothing.

Sets up, on this box: ``--nodes`` Specdeck fake GPU exporters (``--gpus`` fake GPUs each, sampled
every second, exported in nvitop-exporter's names as node-0 ... node-N), one small static SGLang
``/metrics`` per node (tensor-parallel ranks 0-1, as 0.5.x writes them), the file_sd targets file
Specdeck writes for them, and Debian's Prometheus scraping it every ``--scrape`` seconds.  Then,
side by side in one run:

- background read: ``PromSource.read_once()`` (query + targets over HTTP, JSON parsing, turning
  every series into GpuSample records) against ``Sampler.sample_once()`` of ``--gpus`` fake GPUs
  (the local sampler's pass; the fake NVML is a cheap stand-in for the driver);
- page refresh: one AppTest run of app_pages/gpus.py with the local node only, and with the local node
  plus every Prometheus node (the page reads snapshots; neither run queries anything);
- the answer's size in bytes.

    python perf/bench_prom_source.py                    # 8 nodes x 8 GPUs, scrape 1 s, 30 reads
    python perf/bench_prom_source.py --scrape 15 --reads 50
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from backend.flows.prom_targets import TargetGroup, write_file_sd  # noqa: E402
from backend.telemetry.promql import PromClient  # noqa: E402
from backend.telemetry.promsource import PromSource  # noqa: E402
from backend.telemetry.sampler import attach_prometheus, make_sampler  # noqa: E402
from backend.workspace import PrometheusConfig  # noqa: E402

SGLANG = """# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{{engine_type="unified",model_name="llama",pp_rank="0",tp_rank="0"}} {tput}
sglang:gen_throughput{{engine_type="unified",model_name="llama",pp_rank="0",tp_rank="1"}} {tput}
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{{engine_type="unified",model_name="llama",pp_rank="0",tp_rank="0"}} 16
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{{engine_type="unified",model_name="llama",pp_rank="0",tp_rank="0"}} 2
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{{engine_type="unified",model_name="llama",pp_rank="0",tp_rank="0"}} 3.2
# TYPE sglang:spec_accept_rate gauge
sglang:spec_accept_rate{{engine_type="unified",model_name="llama",pp_rank="0",tp_rank="0"}} 0.71
# TYPE sglang:token_usage gauge
sglang:token_usage{{engine_type="unified",model_name="llama",pp_rank="0",tp_rank="0"}} 0.42
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def static_server(text: str) -> ThreadingHTTPServer:
    body = text.encode()

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def stats(ms: list[float]) -> str:
    ms = sorted(ms)
    return f"median {statistics.median(ms):7.2f} ms · p90 {ms[int(0.9 * (len(ms) - 1))]:7.2f} ms · n={len(ms)}"


def time_page(root: Path, reads: int) -> tuple[list[float], int]:
    """AppTest runs of the GPUs page on the workspace at ``root`` (its runtime already read), and
    the GPU tiles the last run drew."""
    from streamlit.testing.v1 import AppTest  # noqa: PLC0415

    os.environ["SPECDECK_WORKSPACE"] = str(root)
    out = []
    at = None
    for i in range(reads + 1):
        t0 = time.perf_counter()
        at = AppTest.from_file(str(REPO / "app_pages" / "gpus.py"), default_timeout=120).run()
        dt = (time.perf_counter() - t0) * 1000
        if at.exception:
            raise SystemExit(f"the GPUs page raised: {at.exception}")
        if i:  # the first run imports the page's modules
            out.append(dt)
    tiles = sum(1 for m in at.markdown if m.value.startswith("**GPU ") and "ECC" not in m.value)
    return out, tiles


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=8)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--scrape", type=float, default=1.0, help="Prometheus scrape interval, seconds")
    ap.add_argument("--reads", type=int, default=30)
    ap.add_argument("--page-runs", type=int, default=5)
    ap.add_argument("--prometheus", default=shutil.which("prometheus") or "/usr/bin/prometheus")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bench-prom-"))
    os.environ["HOME"] = str(tmp / "home")
    samplers, statics, proc = [], [], None
    try:
        groups = []
        for i in range(args.nodes):
            node = f"node-{i}"
            s = make_sampler(gpu_source="fake", fake_gpus=args.gpus)
            for g in range(args.gpus):
                s.adapter._lib.set_processes(g, [(100000 + i * 100 + g, (40 + g) * 1024**3)])
            attach_prometheus(s, PrometheusConfig(export=f"127.0.0.1:{free_port()}"), root=tmp, config_path=tmp / "none.toml",
                              source="fake", node=node)
            s.start()
            samplers.append(s)
            groups.append(TargetGroup((s.exporter.address,), (("node", node), ("specdeck_kind", "gpu"),
                                                             ("workspace", "bench")), "specdeck"))
            srv = static_server(SGLANG.format(tput=700 + 10 * i))
            statics.append(srv)
            groups.append(TargetGroup((f"127.0.0.1:{srv.server_address[1]}",),
                                      (("node", node), ("server", f"target-{i}"), ("specdeck_kind", "sglang"),
                                       ("workspace", "bench")), "specdeck"))
        targets = tmp / "targets.json"
        write_file_sd(targets, groups)
        port = free_port()
        cfg = tmp / "prometheus.yml"
        cfg.write_text(f"global:\n  scrape_interval: {args.scrape:g}s\n  scrape_timeout: {min(args.scrape, 10):g}s\n"
                       f"scrape_configs:\n  - job_name: specdeck\n    file_sd_configs:\n"
                       f"      - files: [\"{targets}\"]\n")
        proc = subprocess.Popen([args.prometheus, f"--config.file={cfg}", f"--storage.tsdb.path={tmp / 'data'}",
                                 f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp)
        client = PromClient(f"http://127.0.0.1:{port}", timeout_s=10)
        src = PromSource(client, max_age_s=max(30.0, 3 * args.scrape), local_node="bench-local")
        deadline = time.time() + 120
        while True:
            snap = src.read_once() if client.ready() else None
            if snap is not None and len(snap.nodes) == args.nodes and all(
                    len(n.gpus) == args.gpus and all(g.util_gpu is not None for g in n.gpus) and n.servers
                    for n in snap.nodes):
                break
            if time.time() > deadline:
                raise SystemExit("Prometheus did not show every node within 120 s")
            time.sleep(0.5)

        # -- background reads, side by side
        prom_ms, query_ms, targets_ms = [], [], []
        local = make_sampler(gpu_source="fake", fake_gpus=args.gpus)
        local.sample_once()
        local_ms = []
        for _ in range(args.reads):
            t0 = time.perf_counter()
            src.read_once()
            prom_ms.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            client.query(src.query_expr())
            query_ms.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            client.targets()
            targets_ms.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            local.sample_once()
            local_ms.append((time.perf_counter() - t0) * 1000)
        url = f"{client.url}/api/v1/query?" + urllib.parse.urlencode({"query": src.query_expr()})
        with urllib.request.urlopen(url) as r:
            qbytes = len(r.read())
        with urllib.request.urlopen(client.url + "/api/v1/targets?state=active") as r:
            tbytes = len(r.read())
        series = len(client.query(src.query_expr()))

        # -- page refreshes: local only, then local + Prometheus nodes
        from backend import runtime as runtime_mod  # noqa: PLC0415

        pages = {}
        for k, (label, extra) in enumerate((("local node only", ""),
                             (f"local + {args.nodes} Prometheus nodes", f'\n[telemetry.prometheus]\nurl = "{client.url}"\nmax_age_s = {src.max_age_s:g}\n'))):
            root = tmp / f"page-{k}"
            root.mkdir(exist_ok=True)
            (root / "specdeck.toml").write_text(f'[workspace]\nname = "bench"\n\n[telemetry]\nsource = "fake"\n{extra}')
            os.environ["SPECDECK_WORKSPACE"] = str(root)
            rt = runtime_mod.get_runtime(background=False)
            rt.telemetry.sample_once()
            if rt.telemetry.prom is not None:
                rt.telemetry.prom.read_once()
            pages[label] = time_page(root, args.page_runs)
        runtime_mod.close_all()

        n = args.nodes * args.gpus
        print(f"\n{args.nodes} nodes x {args.gpus} GPUs through Prometheus 2.42 (scrape {args.scrape:g} s), "
              f"{series} series; local: {args.gpus} fake GPUs\n")
        print(f"{'background read, one refresh':44} {'':4}")
        print(f"  {'Prometheus: PromSource.read_once()':42} {stats(prom_ms)}  ({statistics.median(prom_ms) * 1000 / n:,.0f} µs per GPU)")
        print(f"  {'  of which the query alone':42} {stats(query_ms)}  ({qbytes:,} bytes)")
        print(f"  {'  of which /api/v1/targets alone':42} {stats(targets_ms)}  ({tbytes:,} bytes)")
        print(f"  {'local: Sampler.sample_once()':42} {stats(local_ms)}  ({statistics.median(local_ms) * 1000 / args.gpus:,.0f} µs per GPU)")
        print("page refresh (AppTest run of app_pages/gpus.py)")
        for label, (ms, tiles) in pages.items():
            print(f"  {label:42} {stats(ms)}  ({tiles} GPU tiles)")
        return 0
    finally:
        for s in samplers:
            s.stop()
        for srv in statics:
            srv.shutdown()
            srv.server_close()
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
