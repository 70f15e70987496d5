"""Regeneration client benchmarks (figures printed, not a test).

    .venv/bin/python perf/bench_regen.py [--rows 3000] [--concurrency 64 256]
        [--specforge-dir DIR --specforge-python PY] [--uneven-rows 1500] [--skip-uneven]

Servers: a minimal OpenAI-compatible stand-in of this benchmark's own (raw asyncio, HTTP/1.1
keep-alive, a canned 16-token answer), one process per server, so neither the simulator's
threaded HTTP server nor Python-level web frameworks set the ceiling.

1. Client ceiling: a server that answers at once; ``regen run`` at each concurrency, then
   SpecForge's ``scripts/regenerate_train_data.py`` on the same server in the same run (its source
   is taken from ``--specforge-dir``, outside this repository, and run with ``--specforge-python``,
   a Python with ``openai`` and ``tqdm``).  For each: completed requests/s while it runs (10 % to
   90 % of the rows, from the output file's growth), the same end to end (process start to exit),
   CPU % of the client process (user + system over wall time) and its peak RSS (wait4).
2. Uneven servers: two stand-ins answering after 0.5 s and 1.5 s (one three times slower); the
   completed requests/s against the sum of what they can serve at that concurrency
   (concurrency / 0.5 + concurrency / 1.5), ours and SpecForge's.
3. SpecForge's ``validate_regenerated_data.py`` run on the output ``regen run`` wrote.
4. ``--scale``: what a resume reads at start for an output of the real run's size (83,288 rows of
   about 4.2 kB, ~350 MB, written here in the job's own format): seconds and peak memory of
   ``backend.regen.output.scan`` (ids and accounting of every row), in a child process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.helpers import free_port  # noqa: E402

ANSWER = ("def add(a, b):\n    return a + b  # adds two numbers and returns their sum")
COMPLETION = json.dumps({
    "id": "cmpl", "object": "chat.completion", "created": 0, "model": "standin",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": ANSWER, "reasoning_content": None},
                 "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 20, "completion_tokens": 16, "total_tokens": 36}}).encode()
MODELS = json.dumps({"object": "list", "data": [{"id": "standin", "object": "model"}]}).encode()


# -- the stand-in server (runs in its own process: bench_regen.py --serve PORT DELAY) ---------


class _Conn(asyncio.Protocol):
    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.buf = bytearray()
        self.t: asyncio.Transport | None = None

    def connection_made(self, transport) -> None:
        self.t = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buf[:end]).lower()
            n = 0
            i = head.find(b"content-length:")
            if i >= 0:
                j = head.find(b"\r\n", i)
                n = int(head[i + 15: j if j > 0 else None])
            if len(self.buf) < end + 4 + n:
                return
            del self.buf[: end + 4 + n]
            body = MODELS if head.startswith(b"get /v1/models") else COMPLETION
            resp = (b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(body)
                    + body)
            if self.delay:
                asyncio.get_running_loop().call_later(self.delay, self._send, resp)
            else:
                self.t.write(resp)

    def _send(self, resp: bytes) -> None:
        if self.t is not None and not self.t.is_closing():
            self.t.write(resp)


async def _serve(port: int, delay: float) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Conn(delay), "127.0.0.1", port, backlog=2048)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


class StandIn:
    def __init__(self, delay: float) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve", str(self.port), str(delay)],
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout.readline().strip() == "ready"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# -- measuring one client run -------------------------------------------------------------


def _write_input(path: Path, rows: int) -> None:
    with open(path, "w") as f:
        for i in range(rows):
            f.write(json.dumps({"id": f"row-{i}", "conversations": [
                {"role": "user", "content": f"Write a Python function number {i} that adds two numbers."},
                {"role": "assistant", "content": "an older answer"}]}) + "\n")


def measure(argv: list[str], out: Path, rows: int, timeout: float = 900) -> dict:
    """Run a client to its end; rates from its output's growth, CPU and peak RSS from wait4."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, cwd=str(ROOT), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    marks: list[tuple[float, int]] = []
    lines, pos = 0, 0
    status = rusage = None
    while True:
        pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() - start > timeout:
            proc.kill()
            raise SystemExit(f"{argv[:3]} ran over {timeout} s")
        if out.exists():
            with open(out, "rb") as f:
                f.seek(pos)
                chunk = f.read()
            pos += len(chunk)
            lines += chunk.count(b"\n")
            marks.append((time.monotonic(), lines))
        time.sleep(0.05)
    wall = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if out.exists():
        lines = out.read_bytes().count(b"\n")
    marks.append((time.monotonic(), lines))
    lo, hi = rows * 0.1, rows * 0.9
    t_lo = next((t for t, n in marks if n >= lo), None)
    t_hi = next((t for t, n in marks if n >= hi), None)
    n_lo = next((n for t, n in marks if n >= lo), 0)
    n_hi = next((n for t, n in marks if n >= hi), 0)
    steady = (n_hi - n_lo) / (t_hi - t_lo) if t_lo and t_hi and t_hi > t_lo else float("nan")
    cpu = rusage.ru_utime + rusage.ru_stime
    return {"rc": proc.returncode, "rows": lines, "wall_s": wall, "steady_req_s": steady,
            "e2e_req_s": lines / wall, "cpu_pct": 100 * cpu / wall, "peak_rss_mb": rusage.ru_maxrss / 1024,
            "stderr": proc.stderr.read()[-400:] if proc.stderr else ""}


def ours(inp: Path, out: Path, servers: list[str], concurrency: int) -> list[str]:
    argv = [sys.executable, "-m", "backend.cli", "regen", "run", "--input", str(inp), "--out", str(out),
            "--concurrency", str(concurrency), "--max-tokens", "16", "--temperature", "0"]
    for s in servers:
        argv += ["--server", s]
    return argv


def specforge(py: str, sf_dir: Path, inp: Path, out: Path, servers: list[str], concurrency: int) -> list[str]:
    return [py, str(sf_dir / "regenerate_train_data.py"), "--model", "standin", "--concurrency", str(concurrency),
            "--max-tokens", "16", "--temperature", "0", "--input-file-path", str(inp), "--output-file-path",
            str(out), "--server-address", *[s.split("://", 1)[1] for s in servers]]


def row(label: str, r: dict) -> str:
    return (f"  {label:<34} {r['rows']:>6} rows  {r['steady_req_s']:>8.1f} req/s running  "
            f"{r['e2e_req_s']:>8.1f} req/s end-to-end  CPU {r['cpu_pct']:>5.0f} %  peak RSS {r['peak_rss_mb']:>6.0f} MB"
            + ("" if r["rc"] == 0 else f"  (exit {r['rc']}: {r['stderr'].strip()[-200:]})"))


def scale(rows: int) -> int:
    from backend.regen.output import encode, success_record

    answer = ("def solve(xs):\n    return sorted(set(xs))\n" * 90)[:3900]
    with tempfile.TemporaryDirectory(prefix="bench-regen-scale-") as tmp:
        out = Path(tmp) / "big.jsonl"
        with open(out, "wb") as f:
            for i in range(rows):
                f.write(encode(success_record(
                    f"row-{i}", {"id": f"row-{i}", "source": "bench"},
                    [{"role": "user", "content": f"Write solution {i}."}, {"role": "assistant", "content": answer}],
                    {"server": "http://127.0.0.1:30000", "prompt_tokens": 40, "completion_tokens": 900,
                     "finish_reason": "stop", "dataset": "the-stack-v2", "t": 1764500000.0 + i, "retries": 0})))
        size = out.stat().st_size
        r = subprocess.run([sys.executable, __file__, "--scan", str(out)], capture_output=True, text=True, cwd=str(ROOT))
        got = json.loads(r.stdout)
        print(f"resume scan of {got['rows']:,} rows ({size / 1e6:.0f} MB): {got['seconds']:.2f} s, "
              f"peak RSS {got['peak_rss_mb']:.0f} MB (the whole process)")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--serve", nargs=2, metavar=("PORT", "DELAY"), help=argparse.SUPPRESS)
    ap.add_argument("--rows", type=int, default=3000)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    ap.add_argument("--uneven-rows", type=int, default=1500)
    ap.add_argument("--uneven-concurrency", type=int, default=64)
    ap.add_argument("--skip-uneven", action="store_true")
    ap.add_argument("--specforge-dir", type=Path, help="folder with SpecForge's regenerate_train_data.py, "
                    "conversation_validation.py and validate_regenerated_data.py")
    ap.add_argument("--specforge-python", default=sys.executable)
    ap.add_argument("--scale", type=int, nargs="?", const=83288, metavar="ROWS",
                    help="only measure a resume's start-up scan of an output this big (default 83,288 rows)")
    ap.add_argument("--scan", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.serve:
        asyncio.run(_serve(int(a.serve[0]), float(a.serve[1])))
        return 0
    if a.scan:
        import resource

        from backend.regen.output import RunFiles, scan
        t = time.perf_counter()
        ex = scan(RunFiles.of(a.scan))
        dt = time.perf_counter() - t
        print(json.dumps({"rows": len(ex.done), "seconds": dt,
                          "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
        return 0
    if a.scale:
        return scale(a.scale)
    sf = a.specforge_dir
    if sf is not None and not (sf / "regenerate_train_data.py").exists():
        print(f"SpecForge: {sf}/regenerate_train_data.py not found; measuring ours only")
        sf = None
    print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory(prefix="bench-regen-") as tmp:
        tmpd = Path(tmp)
        inp = tmpd / "in.jsonl"
        _write_input(inp, a.rows)
        print(f"\n1. client ceiling: {a.rows} rows, one stand-in answering at once (16-token answer)")
        srv = StandIn(0.0)
        validated = None
        try:
            for c in a.concurrency:
                out = tmpd / f"ours-{c}.jsonl"
                print(row(f"regen run, concurrency {c}", measure(ours(inp, out, [srv.url], c), out, a.rows)),
                      flush=True)
                validated = validated or out
                if sf is not None:
                    out = tmpd / f"sf-{c}.jsonl"
                    print(row(f"SpecForge script, concurrency {c}",
                              measure(specforge(a.specforge_python, sf, inp, out, [srv.url], c), out, a.rows)),
                          flush=True)
        finally:
            srv.stop()
        if not a.skip_uneven:
            c = a.uneven_concurrency
            cap = c / 0.5 + c / 1.5
            uin = tmpd / "uneven.jsonl"
            _write_input(uin, a.uneven_rows)
            print(f"\n2. uneven servers: {a.uneven_rows} rows, two stand-ins answering after 0.5 s and 1.5 s, "
                  f"concurrency {c} per server: together they serve {cap:.1f} req/s")
            fast, slow = StandIn(0.5), StandIn(1.5)
            try:
                for label, argv_of in (("regen run", None), ("SpecForge script", "sf")):
                    if argv_of == "sf" and sf is None:
                        continue
                    out = tmpd / f"uneven-{label.split()[0]}.jsonl"
                    argv = (ours(uin, out, [fast.url, slow.url], c) if argv_of is None
                            else specforge(a.specforge_python, sf, uin, out, [fast.url, slow.url], c))
                    r = measure(argv, out, a.uneven_rows)
                    print(row(label, r) + f"  = {100 * r['steady_req_s'] / cap:.0f} % of the sum", flush=True)
            finally:
                fast.stop()
                slow.stop()
        if sf is not None and validated is not None and (sf / "validate_regenerated_data.py").exists():
            print(f"\n3. SpecForge's validate_regenerated_data.py on regen run's output ({validated.name}):")
            v = subprocess.run([a.specforge_python, str(sf / "validate_regenerated_data.py"), "--data-path",
                                str(validated), "--expect-non-reasoning"], cwd=str(sf), capture_output=True, text=True)
            for line in (v.stdout + v.stderr).strip().splitlines()[-6:]:
                print(f"  {line}")
            print(f"  exit status {v.returncode}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
