"""Log tail cost on a large log (1 GiB by default): unchanged, and after 1 MB vs 10 MB appended.

    .venv/bin/python perf/bench_logtail.py [--size-gb 1] [--dir /tmp]

The file is created sparse (instant, no disk used) and deleted at the end;
every figure names the size it was measured at.  Goals: < 1 ms per call when unchanged; reading appended bytes costs
time proportional to the new bytes only, not to the file size.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backend.supervisor.logtail import LogTailer, read_last, read_tail  # noqa: E402


def append_lines(path: Path, nbytes: int) -> None:
    line = b"2026-01-01 00:00:00 decode batch: accept len 3.12, gen throughput (token/s): 1234.5\n"
    block = line * (1024 * 1024 // len(line) + 1)
    left = nbytes
    with open(path, "ab") as f:
        while left > 0:
            chunk = block[:left]
            f.write(chunk)
            left -= len(chunk)


def timed_read(tailer: LogTailer) -> tuple[float, int]:
    t = time.perf_counter()
    got = 0
    while True:
        c = tailer.read()
        if not c.text:
            break
        got += len(c.text)
    return time.perf_counter() - t, got


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-gb", type=float, default=1.0)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--calls", type=int, default=20000)
    args = ap.parse_args()
    fd, name = tempfile.mkstemp(prefix="specdeck-bench-", suffix=".log", dir=args.dir)
    os.close(fd)
    path = Path(name)
    try:
        size = int(args.size_gb * 1024**3)
        os.truncate(path, size)  # sparse: instant
        append_lines(path, 4096)
        print(f"log: {path} ({path.stat().st_size / 1024**3:.2f} GiB, sparse)")
        label = f"{path.stat().st_size / 1024**3:.2f} GiB"

        tailer = LogTailer(path, path.stat().st_size, max_bytes=16 * 1024 * 1024)
        times = []
        for _ in range(args.calls):
            t = time.perf_counter()
            c = tailer.read()
            times.append((time.perf_counter() - t) * 1e6)
            assert not c.text
        print(f"unchanged {label} log, LogTailer.read(): mean {statistics.mean(times):.2f} us, "
              f"median {statistics.median(times):.2f} us, max {max(times):.1f} us over {args.calls} calls (goal < 1000 us)")
        st = path.stat()
        times = []
        for _ in range(args.calls):
            t = time.perf_counter()
            read_tail(path, st.st_size, inode=st.st_ino)
            times.append((time.perf_counter() - t) * 1e6)
        print(f"unchanged {label} log, read_tail(offset=end): mean {statistics.mean(times):.2f} us, "
              f"median {statistics.median(times):.2f} us")

        for mb in (1, 10, 1, 10):
            append_lines(path, mb * 1024 * 1024)
            dt, got = timed_read(tailer)
            print(f"{mb:>2} MB appended: read in {dt * 1000:.2f} ms ({got / 1024**2:.1f} MiB of text, "
                  f"{dt * 1000 / mb:.2f} ms per MB)")

        t = time.perf_counter()
        c = read_last(path, 200)
        print(f"last 200 lines of the {path.stat().st_size / 1024**3:.2f} GiB log: "
              f"{(time.perf_counter() - t) * 1000:.2f} ms ({len(c.text.splitlines())} lines)")
        t = time.perf_counter()
        c = read_tail(path, 0, 64 * 1024)  # a fresh reader: newest 64 KiB only
        print(f"fresh tail from offset 0 (skip ahead to the newest 64 KiB): "
              f"{(time.perf_counter() - t) * 1000:.2f} ms, skipped {c.skipped / 1024**3:.2f} GiB")
    finally:
        path.unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
