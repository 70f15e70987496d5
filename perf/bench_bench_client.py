"""The built-in benchmark client's own overhead, beside SGLang's bench_serving, on one zero-delay server.

    .venv/bin/python perf/bench_bench_client.py [--concurrency 1 16 256] [--output-len 32]
        [--serve-python .venv-serve/bin/python] [--no-sglang] [--repeat 3]

A stand-in server (aiohttp, in its own process) answers ``/generate`` at once: ``output-len``
SSE chunks of one token each, written as fast as the socket takes them, with the cumulative text
and ``meta_info`` SGLang sends.  It keeps, per run, the time it spent on each request (from the
request's arrival to its last chunk).  At each concurrency, the built-in client and then
bench_serving (``--backend sglang --dataset-name random-ids``, in the serving environment) offer
the same requests; for each the script prints the requests/s and output tok/s it drove, its mean
and p99 end-to-end latency, and the latency it adds per request: its mean e2e minus the server's
mean time on a request.  A benchmark tool slower than the server it measures measures itself:
these are the ceilings of each tool on this machine.  Each pair runs ``--repeat`` times, the
two tools taking turns, and the medians are printed last with the ratio of their requests/s.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SHIM = ROOT / "tests" / "bench" / "serve_shim"  # CPU machines only: torchvision stand-in for bench_serving


# --------------------------------------------------------------------------------------
# The zero-delay server
# --------------------------------------------------------------------------------------
def serve(port: int, model_dir: str) -> None:
    from aiohttp import web

    times: list[float] = []
    info = {"model_path": model_dir, "tokenizer_path": model_dir, "served_model_name": model_dir,
            "version": "0.5.23", "tp_size": 1, "speculative_algorithm": None, "disable_cuda_graph": False,
            "internal_states": [{"last_gen_throughput": 0.0}]}
    model_info = {"model_path": model_dir, "tokenizer_path": model_dir, "is_generation": True,
                  "served_model_name": model_dir}

    async def generate(request: web.Request) -> web.StreamResponse:
        t0 = time.perf_counter()
        body = await request.json()
        n = int((body.get("sampling_params") or {}).get("max_new_tokens") or 16)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        text = ""
        for i in range(1, n + 1):
            text += " tok"
            meta = {"id": "0", "prompt_tokens": len(body.get("input_ids") or []) or 1, "completion_tokens": i,
                    "cached_tokens": 0, "finish_reason": {"type": "length", "length": n} if i == n else None}
            await resp.write(b"data: " + json.dumps({"text": text, "output_ids": [], "meta_info": meta}).encode()
                             + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        times.append(time.perf_counter() - t0)
        return resp

    async def stats(request: web.Request) -> web.Response:
        out = {"n": len(times), "mean_s": statistics.fmean(times) if times else None}
        if request.query.get("reset"):
            times.clear()
        return web.json_response(out)

    async def const(request: web.Request) -> web.Response:
        path = request.path
        if path.endswith("server_info"):
            return web.json_response(info)
        if path.endswith("model_info"):
            return web.json_response(model_info)
        if path == "/v1/models":
            return web.json_response({"object": "list", "data": [{"id": model_dir, "object": "model"}]})
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/generate", generate)
    app.router.add_get("/stats", stats)
    for p in ("/health", "/server_info", "/get_server_info", "/model_info", "/get_model_info", "/v1/models",
              "/flush_cache"):
        app.router.add_route("*", p, const)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


# --------------------------------------------------------------------------------------
# The measurement
# --------------------------------------------------------------------------------------
def _get(base: str, path: str) -> dict:
    with urllib.request.urlopen(base + path, timeout=10) as r:
        return json.loads(r.read())


def _server_mean_ms(base: str) -> float | None:
    s = _get(base, "/stats?reset=1")
    return None if s["mean_s"] is None else s["mean_s"] * 1000


def builtin(base: str, c: int, n: int, out_len: int) -> dict:
    from backend.bench.client import Load, run_load

    _get(base, "/stats?reset=1")
    run = run_load(base, Load(concurrency=c, num_prompts=n, input_len=16, output_len=out_len, warmup_requests=1))
    s = run.summary()
    return {"req_s": s["request_throughput"], "tok_s": s["output_throughput"], "e2e_ms": s["mean_e2e_latency_ms"],
            "p99_ms": s["p99_e2e_latency_ms"], "server_ms": _server_mean_ms(base), "done": s["completed"]}


def bench_serving(python: str, module: str, base: str, c: int, n: int, out_len: int, tok_dir: str,
                  work: Path) -> dict:
    out = work / f"bs-{c}.jsonl"
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONWARNINGS="ignore",
               HF_HOME=str(work / "hf"), PYTHONPATH=str(SHIM))
    _get(base, "/stats?reset=1")
    argv = [python, "-m", module, "--backend", "sglang", "--base-url", base, "--dataset-name", "random-ids",
            "--tokenizer", tok_dir, "--num-prompts", str(n), "--random-input-len", "16",
            "--random-output-len", str(out_len), "--random-range-ratio", "1.0", "--max-concurrency", str(c),
            "--request-rate", "inf", "--warmup-requests", "1", "--disable-tqdm", "--output-file", str(out)]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=str(work), timeout=1200)
    if proc.returncode != 0 or not out.exists():
        raise SystemExit(f"bench_serving failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    rec = json.loads(out.read_text().splitlines()[-1])
    # bench_serving's warm-up request is also in the server's figures: one among n + 1
    return {"req_s": rec["request_throughput"], "tok_s": rec["output_throughput"],
            "e2e_ms": rec["mean_e2e_latency_ms"], "p99_ms": rec["p99_e2e_latency_ms"],
            "server_ms": _server_mean_ms(base), "done": rec["completed"]}


def _median(runs: list[dict]) -> dict:
    added = [r["e2e_ms"] - r["server_ms"] for r in runs if r["server_ms"] is not None]
    return {"req_s": statistics.median(r["req_s"] for r in runs),
            "added_ms": statistics.median(added) if added else float("nan")}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _row(tool: str, c: int, r: dict) -> str:
    added = r["e2e_ms"] - r["server_ms"] if r["server_ms"] is not None else float("nan")
    return (f"{tool:<14} {c:>5} {r['done']:>6} {r['req_s']:>10.1f} {r['tok_s']:>11.0f} {r['e2e_ms']:>10.2f} "
            f"{r['p99_ms']:>10.2f} {r['server_ms']:>10.2f} {added:>10.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 16, 256])
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--prompts-per-slot", type=int, default=8, help="requests per concurrency slot (at least 200)")
    ap.add_argument("--serve-python", default=str(ROOT / ".venv-serve" / "bin" / "python"))
    ap.add_argument("--no-sglang", action="store_true", help="only the built-in client")
    ap.add_argument("--repeat", type=int, default=3, help="runs of each tool at each concurrency (medians printed)")
    ap.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve, args.model_dir)
        return 0

    from backend.flows.bench_serving import serving_module
    from backend.sim.models import make_target_dir

    module = None if args.no_sglang else serving_module(args.serve_python)
    if not args.no_sglang and module is None:
        print(f"note: {args.serve_python} has no sglang; only the built-in client is measured", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="specdeck-bench-client-") as tmp:
        work = Path(tmp)
        model = make_target_dir(work / "model")  # a small local tokenizer for bench_serving
        port = _free_port()
        server = subprocess.Popen([sys.executable, __file__, "--serve", str(port), "--model-dir", str(model)],
                                  cwd=str(ROOT))
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    _get(base, "/stats")
                    break
                except OSError:
                    if time.monotonic() > deadline or server.poll() is not None:
                        raise SystemExit("the zero-delay server did not start")
                    time.sleep(0.05)
            print(f"zero-delay /generate, {args.output_len} one-token chunks per request; cpu cores: {os.cpu_count()}")
            print(f"{'tool':<14} {'conc':>5} {'done':>6} {'req/s':>10} {'out tok/s':>11} {'e2e ms':>10} "
                  f"{'p99 ms':>10} {'server ms':>10} {'added ms':>10}")
            medians: list[tuple[int, dict, dict | None]] = []
            for c in args.concurrency:
                n = max(200, args.prompts_per_slot * c)
                ours: list[dict] = []
                theirs: list[dict] = []
                for _ in range(args.repeat):  # interleaved, so a change in the machine's load hits both
                    ours.append(builtin(base, c, n, args.output_len))
                    print(_row("built-in", c, ours[-1]), flush=True)
                    if module:
                        theirs.append(bench_serving(args.serve_python, module, base, c, n, args.output_len,
                                                    str(model), work))
                        print(_row("bench_serving", c, theirs[-1]), flush=True)
                medians.append((c, _median(ours), _median(theirs) if theirs else None))
            print(f"\nmedians of {args.repeat} interleaved runs (1-min load average now "
                  f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
            for c, mine, other in medians:
                line = (f"concurrency {c:>4}: built-in {mine['req_s']:>7.1f} req/s, adds {mine['added_ms']:>7.2f} ms")
                if other is not None:
                    line += (f"  |  bench_serving {other['req_s']:>7.1f} req/s, adds {other['added_ms']:>7.2f} ms"
                             f"  |  req/s ratio built-in / bench_serving {mine['req_s'] / other['req_s']:.2f}")
                print(line)
        finally:
            server.terminate()
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
