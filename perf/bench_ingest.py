"""Benchmark: SGLang server-log ingestion into typed records.

    python perf/bench_ingest.py [--size-mb 1024] [--dir /tmp] [--keep] [--no-sglang] [--no-per-line] [--seed 0]

Writes a synthetic log (Decode and Prefill batch lines in every format of the
reference, mixed with HTTP access lines and other server lines; every line drawn
fresh from a seeded generator, no repeated block) to a temporary file, then
prints the figures below.  Each parser runs in its own process, so its peak
resident memory (measured from after its imports) is its own; besides the
wall-clock rate each prints the CPU time it used (all its threads), which a
busy machine disturbs less:

* plain line iteration over the file (the floor for any Python parser);
* Specdeck's LogIngester: MB/s into typed records, with the series bounded and
  the peak resident memory -- the vectorised path (polars, what the ingester
  uses for large reads) and the per-line reference parser on the same file,
  with a check that both give the same counts, unparsed lines, series and
  latest records (a digest of each, compared);
* refresh on an unchanged log (ingester poll and monitor refresh), in ms;
* SGLang 0.5.23's own debug_utils/log_parser.py (polars) over the same file, in
  64 MB pieces, and how many lines it recognised -- when the wheel and polars can
  be fetched with pip into /tmp; otherwise it says why.

The log is deleted at the end unless --keep is given.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from backend.sglang.config import ServerConfig  # noqa: E402
from backend.sglang.ingest import LogIngester  # noqa: E402
from backend.sglang.monitor import ServerMonitor  # noqa: E402

SGLANG_VERSION = "0.5.23"


# -- synthetic log ---------------------------------------------------------------

def _prefixes(rng: random.Random, ts: str) -> str:
    return rng.choice([
        f"[{ts}] ",
        f"[{ts} TP0] ",
        f"[{ts}.{rng.randrange(1000):03d} DP{(d := rng.randrange(8))} TP{d} EP{d}] ",
        f"[{ts} DP0 TP0] ",
        f"[{ts} PP1 ATTN_CP1 MOE_DP2 TP3] ",
        f"(SGLangEngine pid={rng.choice((41820, 41821, 41822, 41823))}) [{ts} TP0] ",
        f"{ts} INFO 151972 [scheduler_metrics_mixin.py:287] ",
    ])


def decode_line(rng: random.Random, ts: str) -> str:
    run = rng.randrange(1, 256)
    tok = rng.randrange(100, 400000)
    use = rng.random()
    acc = 1 + rng.random() * 3
    steps = 3
    g = rng.random() < 0.9
    tput = rng.random() * 900
    q = rng.randrange(0, 50)
    p = _prefixes(rng, ts)
    fmt = rng.randrange(10)
    if fmt == 0:  # 2024-era, no graph
        return f"{p}Decode batch. #running-req: {run}, #token: {tok}, token usage: {use:.2f}, gen throughput (token/s): {tput:.2f}, #queue-req: {q}"
    if fmt == 1:  # 0.4.6
        return f"{p}Decode batch. #running-req: {run}, #token: {tok}, token usage: {use:.2f}, accept len: {acc:.2f}, cuda graph: {g}, gen throughput (token/s): {tput:.2f}, #queue-req: {q}"
    if fmt == 2:  # 0.4.10 SWA, trailing comma
        return f"{p}Decode batch. #running-req: {run}, #full token: {tok}, full token usage: {use:.2f}, #swa token: {tok // 2}, swa token usage: {use / 2:.2f}, cuda graph: {g}, gen throughput (token/s): {tput:.2f}, #queue-req: {q}, "
    if fmt == 3:  # 0.5.3.post3
        return f"{p}Decode batch. #running-req: {run}, #token: {tok}, token usage: {use:.2f}, accept len: {acc:.2f}, accept rate: {acc / (steps + 1):.2f}, cuda graph: {g}, gen throughput (token/s): {tput:.2f}, #queue-req: {q}, "
    if fmt == 4:  # 0.5.4
        return f"{p}Decode batch [{rng.randrange(10**6)}], #running-req: {run}, #token: {tok}, token usage: {use:.2f}, accept len: {acc:.2f}, accept rate: {acc / (steps + 1):.2f}, cpu graph: {g}, gen throughput (token/s): {tput:.2f}, #queue-req: {q}, "
    if fmt == 5:  # 0.5.5
        return f"{p}Decode batch, #running-req: {run}, #token: {tok}, token usage: {use:.2f}, accept len: {acc:.2f}, accept rate: {acc / (steps + 1):.2f}, cuda graph: {g}, gen throughput (token/s): {tput:.2f}, #queue-req: {q}, "
    if fmt == 6:  # 0.5.10
        return f"{p}Decode batch, #running-req: {run}, #token: {tok}, token usage: {use:.2f}, cuda graph: {g}, gen throughput (token/s): {tput:.2f}, #queue-req: {q}"
    if fmt == 7:  # 0.5.23 PD decode
        return f"{p}Decode batch, #running-req: {run}, #token: {tok}, token usage: {use:.2f}, accept len: {acc:.2f}, accept rate: {(acc - 1) / steps:.2f}, pre-allocated usage: {use / 3:.2f}, #prealloc-req: 0, #transfer-req: 1, #retracted-req: 0, cuda graph: {g}, gen throughput (token/s): {tput:.2f}, #queue-req: {q}"
    if fmt == 8:  # 0.5.23 DSpark + MFU
        return f"{p}Decode batch, #running-req: {run}, #token: {tok}, token usage: {use:.2f}, accept len: {acc:.2f}, accept rate: {(acc - 1) / steps:.2f}, cap len: 4.00, block accept len: {acc:.2f}, npu graph: {g}, gen throughput (token/s): {tput:.2f}, #queue-req: {q}, est. decode TFLOPS/s (per GPU): 12.50, est. read BW (GB/s per GPU): 900.10, est. write BW (GB/s per GPU): 20.20"
    return f"{p}Decode batch, #running-req: {run}, #full token: {tok}, full token usage: {use:.2f}, mamba num: 4, mamba usage: 0.02, cuda graph: {g}, gen throughput (token/s): {tput:.2f}, #queue-req: {q}"


def prefill_line(rng: random.Random, ts: str) -> str:
    p = _prefixes(rng, ts)
    ns, nt, ct = rng.randrange(1, 8), rng.randrange(1, 16384), rng.randrange(0, 8192)
    use, run, q = rng.random(), rng.randrange(0, 256), rng.randrange(0, 50)
    it = rng.random() * 20000
    fmt = rng.randrange(6)
    if fmt == 0:
        return f"{p}Prefill batch. #new-seq: {ns}, #new-token: {nt}, #cached-token: {ct}, cache hit rate: {rng.random() * 100:.2f}%, token usage: {use:.2f}, #running-req: {run}, #queue-req: {q}"
    if fmt == 1:
        return f"{p}Prefill batch. #new-seq: {ns}, #new-token: {nt}, #cached-token: {ct}, token usage: {use:.2f}, #running-req: {run}, #queue-req: {q}, "
    if fmt == 2:
        return f"{p}Prefill batch [{rng.randrange(10**6)}], #new-seq: {ns}, #new-token: {nt}, #cached-token: {ct}, token usage: {use:.2f}, #running-req: {run}, #queue-req: {q}, "
    if fmt == 3:
        return f"{p}Prefill batch, #new-seq: {ns}, #new-token: {nt}, #cached-token: {ct}, token usage: {use:.2f}, #running-req: {run}, #queue-req: {q}, cuda graph: False, input throughput (token/s): {it:.2f}"
    if fmt == 4:
        return f"{p}Prefill batch, #new-seq: {ns}, #new-token: {nt}, #cached-token: {ct}, token usage: {use:.2f}, #running-req: {run}, #queue-req: {q}, input throughput (token/s): {it:.2f}, cuda graph: False"
    return f"{p}Prefill batch, #new-seq: {ns}, #new-token: {nt}, #cached-token: {ct}, full token usage: {use:.2f}, swa token usage: {use:.2f}, #running-req: {run}, #queue-req: {q}, #pending-token: {rng.randrange(50000)}, cuda graph: False, input throughput (token/s): {it:.2f}"


_PATHS = ["/v1/chat/completions", "/generate", "/v1/completions", "/metrics", "/health", "/server_info"]


def access_line(rng: random.Random, ts: str) -> str:
    return (f'[{ts}] INFO:     127.0.0.1:{rng.randrange(30000, 65000)} - "{rng.choice(("POST", "GET"))} '
            f'{rng.choice(_PATHS)} HTTP/1.1" 200 OK')


_OTHER = [
    "Cache flushed successfully!",
    "Max running requests is reset to 48 for speculative decoding. You can override this by explicitly setting --max-running-requests.",
    "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when speculative_eagle_topk == 1",
    "Endpoint '/get_server_info' is deprecated and will be removed in a future version. Please use '/server_info' instead.",
]


def other_line(rng: random.Random, ts: str) -> str:
    return f"[{ts}] {rng.choice(_OTHER)}"


MIX = (("access", 0.45, access_line), ("decode", 0.35, decode_line), ("prefill", 0.15, prefill_line),
       ("other", 0.05, other_line))


def write_log(path: Path, size_bytes: int, seed: int = 0) -> dict[str, int]:
    """Write ``size_bytes`` of synthetic log, every line drawn fresh from a seeded generator; return line
    counts per kind."""
    rng = random.Random(seed)
    t0 = time.mktime(time.strptime("2026-04-08 14:00:00", "%Y-%m-%d %H:%M:%S"))
    kinds = [k for k, _, _ in MIX]
    weights = [w for _, w, _ in MIX]
    makers = {k: f for k, _, f in MIX}
    counts = dict.fromkeys(kinds, 0)
    written = 0
    sec = 0
    with open(path, "w", encoding="utf-8") as fh:
        while written < size_bytes:
            sec += 1
            ts = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t0 + sec))
            out = []
            for k in rng.choices(kinds, weights, k=40):  # 40 lines per second of log time
                out.append(makers[k](rng, ts))
                counts[k] += 1
            text = "\n".join(out) + "\n"
            fh.write(text)
            written += len(text)
    return counts


# -- measurements ------------------------------------------------------------------

def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def bench_iteration(path: Path) -> float:
    size = path.stat().st_size
    t = time.perf_counter()
    n = 0
    with open(path, "rb") as fh:
        for _ in fh:
            n += 1
    return size / (time.perf_counter() - t) / 1e6


def bench_unchanged(path: Path, ing: LogIngester) -> tuple[float, float, float]:
    samples = []
    for _ in range(2000):
        t = time.perf_counter()
        ing.poll()
        samples.append((time.perf_counter() - t) * 1e3)
    cfg = ServerConfig(name="bench", model_path=str(path.parent), port=1)
    mon = ServerMonitor(cfg, path, "0.5.10", http=False, watch=False)
    mon.ingester = ing
    mon_samples = []
    for _ in range(500):
        t = time.perf_counter()
        mon.refresh()
        mon_samples.append((time.perf_counter() - t) * 1e3)
    t = time.perf_counter()
    mon.snapshot()
    snap_ms = (time.perf_counter() - t) * 1e3
    return statistics.median(samples), max(samples), statistics.median(mon_samples), snap_ms


def load_sglang_parser(workdir: Path):
    """SGLang's debug_utils/log_parser.py from the PyPI wheel, with polars, both under workdir."""
    wheel_dir = workdir / "wheel"
    pkg_dir = workdir / "pkgs"
    py = sys.executable
    r = subprocess.run([py, "-m", "pip", "download", f"sglang=={SGLANG_VERSION}", "--no-deps", "--quiet",
                        "-d", str(wheel_dir)], capture_output=True, text=True, timeout=600)
    wheels = sorted(wheel_dir.glob("sglang-*.whl"))
    if not wheels:
        raise RuntimeError(f"pip download sglang=={SGLANG_VERSION} failed: {r.stderr.strip()[-300:]}")
    member = "sglang/srt/debug_utils/log_parser.py"
    with zipfile.ZipFile(wheels[0]) as z:
        if member not in z.namelist():
            raise RuntimeError(f"{wheels[0].name} has no {member}")
        z.extract(member, workdir / "src")
    if importlib.util.find_spec("polars") is None:
        r = subprocess.run([py, "-m", "pip", "install", "--quiet", "--target", str(pkg_dir), "polars"],
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise RuntimeError(f"pip install polars failed: {r.stderr.strip()[-300:]}")
        sys.path.insert(0, str(pkg_dir))
    spec = importlib.util.spec_from_file_location("sglang_log_parser", workdir / "src" / member)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def bench_sglang(path: Path, mod, piece_bytes: int = 64 * 1024 * 1024) -> tuple[float, int, float]:
    size = path.stat().st_size
    rows = 0
    before = rss_mb()
    t = time.perf_counter()
    with open(path, "r", encoding="utf-8", errors="replace") as fh:
        rest = ""
        while True:
            piece = fh.read(piece_bytes)
            if not piece:
                break
            piece = rest + piece
            cut = piece.rfind("\n") + 1
            rest = piece[cut:]
            rows += mod.parse(piece[:cut]).height
        if rest:
            rows += mod.parse(rest).height
    dt = time.perf_counter() - t
    return size / dt / 1e6, rows, rss_mb() - before


def _digest(ing: LogIngester) -> str:
    """What both paths must agree on: counts, unparsed lines, series and the latest record."""
    import hashlib
    text = repr((ing.stats, list(ing.unparsed), ing.decode.as_lists(), ing.prefill.as_lists(), ing.last_decode,
                 ing.last_prefill))
    return hashlib.sha256(text.encode()).hexdigest()


def measure(mode: str, log: Path, work: Path) -> dict:
    """One parser over the log, in this process (run by main() in a child process of its own)."""
    size = log.stat().st_size
    if mode == "sglang":
        mod = load_sglang_parser(work / "sglang")
        base = rss_mb()
        mbs, rows, _ = bench_sglang(log, mod)
        return {"mbs": mbs, "rows": rows, "peak_rss_mb": rss_mb() - base, "pid": os.getpid()}
    ing = LogIngester(log, max_points=20000, bulk=mode == "vectorised")
    base = rss_mb()
    t, cpu = time.perf_counter(), time.process_time()
    ing.poll()
    dt, cpu = time.perf_counter() - t, time.process_time() - cpu
    st = ing.stats
    out = {"mbs": size / dt / 1e6, "seconds": dt, "cpu_s": cpu, "mb_per_cpu_s": size / cpu / 1e6,
           "peak_rss_mb": rss_mb() - base, "decode": st.decode_lines,
           "prefill": st.prefill_lines, "unparsed": st.unparsed_lines, "points": len(ing.decode),
           "bulk_pieces": ing.bulk_pieces, "digest": _digest(ing), "pid": os.getpid()}
    if mode == "vectorised":
        out["unchanged"] = bench_unchanged(log, ing)
    return out


def run_child(mode: str, log: Path, work: Path) -> dict:
    """measure() in a fresh process: its peak RSS is its own, not the high-water mark of another parser."""
    import json
    r = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--measure", mode, "--log", str(log),
                        "--dir", str(work)], capture_output=True, text=True, timeout=7200)
    if r.returncode != 0:
        raise RuntimeError(f"{mode}: exit {r.returncode}: {r.stderr.strip()[-500:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description="SGLang log ingestion benchmark")
    ap.add_argument("--size-mb", type=float, default=1024.0)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--seed", type=int, default=0, help="seed of the synthetic log")
    ap.add_argument("--no-sglang", action="store_true", help="skip SGLang's own parser")
    ap.add_argument("--no-per-line", action="store_true", help="skip the per-line reference path")
    ap.add_argument("--measure", choices=("vectorised", "per-line", "sglang"), help=argparse.SUPPRESS)
    ap.add_argument("--log", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        import json
        print(json.dumps(measure(args.measure, Path(args.log), Path(args.dir))))
        return 0

    work = Path(tempfile.mkdtemp(prefix="specdeck-bench-", dir=args.dir))
    log = work / "server.log"
    try:
        t = time.perf_counter()
        counts = write_log(log, int(args.size_mb * 1024 * 1024), seed=args.seed)
        size = log.stat().st_size
        total = sum(counts.values())
        print(f"log: {log} {size / 1e6:.0f} MB, {total:,} lines (seed {args.seed}, no repeated block) "
              + ", ".join(f"{k} {v / total:.0%}" for k, v in counts.items())
              + f" (written in {time.perf_counter() - t:.1f} s)")
        print(f"machine: {os.cpu_count()} CPU(s), Python {sys.version.split()[0]}, "
              f"load average {os.getloadavg()[0]:.2f}; each parser in its own process")

        mbs = bench_iteration(log)
        print(f"plain line iteration (for line in file):      {mbs:8.1f} MB/s")

        vec = run_child("vectorised", log, work)
        path = "vectorised, polars" if vec["bulk_pieces"] else "per-line (polars missing)"
        print(f"Specdeck LogIngester -> typed records ({path}): {vec['mbs']:8.1f} MB/s  "
              f"[{vec['cpu_s']:.1f} s CPU, {vec['mb_per_cpu_s']:.1f} MB per CPU-second]  "
              f"({vec['decode']:,} decode + {vec['prefill']:,} prefill records, "
              f"{vec['unparsed']} unparsed, series kept {vec['points']} points, peak RSS +{vec['peak_rss_mb']:.0f} MB)")
        exp_dec, exp_pre = counts["decode"], counts["prefill"]
        if (vec["decode"], vec["prefill"]) != (exp_dec, exp_pre):
            print(f"  MISMATCH: expected {exp_dec:,} decode and {exp_pre:,} prefill lines")

        if not args.no_per_line:
            ref = run_child("per-line", log, work)
            same = ref["digest"] == vec["digest"]
            print(f"Specdeck LogIngester -> typed records (per-line reference): {ref['mbs']:8.1f} MB/s  "
                  f"[{ref['cpu_s']:.1f} s CPU, {ref['mb_per_cpu_s']:.1f} MB per CPU-second]  "
                  f"({ref['decode']:,} decode + {ref['prefill']:,} prefill records, peak RSS "
                  f"+{ref['peak_rss_mb']:.0f} MB; "
                  f"{'same counts, series and records as the vectorised path' if same else 'DIFFERS from the vectorised path'})")

        med, worst, mon_med, snap_ms = vec["unchanged"]
        print(f"refresh on unchanged log: ingester poll median {med:.3f} ms (max {worst:.3f} ms); "
              f"monitor refresh median {mon_med:.3f} ms; snapshot with {vec['points']}-point series "
              f"{snap_ms:.1f} ms")

        if args.no_sglang:
            print("SGLang debug_utils/log_parser.py: skipped (--no-sglang)")
        else:
            try:
                sg = run_child("sglang", log, work)
                print(f"SGLang {SGLANG_VERSION} debug_utils/log_parser.py (polars): {sg['mbs']:8.1f} MB/s  "
                      f"({sg['rows']:,} decode rows recognised of {exp_dec:,} decode and {exp_pre:,} prefill lines; "
                      f"fed 64 MB at a time, peak RSS +{sg['peak_rss_mb']:.0f} MB)")
            except Exception as exc:  # report and go on: the other figures stand
                print(f"SGLang debug_utils/log_parser.py: not measured: {exc}")
    finally:
        if args.keep:
            print(f"kept {log}")
        else:
            import shutil
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
