"""How far `processes log NAME -f` falls behind a fast writer.

    .venv/bin/python perf/bench_cli_follow.py [--rate-mb 50] [--seconds 20] [--dir /tmp]

A writer process appends lines stamped with the time they were written, at
``--rate-mb`` MB/s.  Two followers run side by side in this process, each
printing to a sink that remembers the last line: the previous follow loop
(read the oldest 64 KB, sleep 0.5 s) and the current one
(backend.cli.processes.follow: skip ahead to the newest lines with a marker).
Every second it prints how old the newest line each follower has shown is;
at the end, how far behind the writer's last line each is, and how many
bytes the current one skipped (each jump is marked in its output).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from backend.cli.processes import follow  # noqa: E402
from backend.supervisor.logtail import LogTailer  # noqa: E402

WRITER = r"""
import sys, time
path, rate, seconds = sys.argv[1], float(sys.argv[2]) * 1e6, float(sys.argv[3])
pad = b"x" * 100
with open(path, "ab") as f:
    t0 = time.time()
    written = 0
    while time.time() - t0 < seconds:
        target = (time.time() - t0) * rate
        while written < target:
            line = b"%.6f %s\n" % (time.time(), pad)
            f.write(line * 64)
            written += len(line) * 64
        f.flush()
        time.sleep(0.001)
"""


class LastLine:
    """A text sink that keeps only the newest complete line and counts skip markers."""

    def __init__(self) -> None:
        self.last = ""
        self.skipped = 0
        self.lock = threading.Lock()

    def write(self, text: str) -> int:
        lines = text.rstrip("\n").rsplit("\n", 1)
        with self.lock:
            if text.startswith("----- skipped "):
                self.skipped += int(text.split()[2].replace(",", ""))
            self.last = lines[-1]
        return len(text)

    def flush(self) -> None:
        pass

    def lag_s(self, now: float) -> float | None:
        """``now`` minus the write time of the newest line shown."""
        with self.lock:
            try:
                return now - float(self.last.split(" ", 1)[0])
            except ValueError:
                return None


def old_follow(path: str, out: LastLine, stop: threading.Event) -> None:
    """The follow loop as it was: the oldest 64 KB after the offset, every 0.5 s."""
    tailer = LogTailer(path, 0)
    while not stop.is_set():
        c = tailer.read()
        if c.text:
            out.write(c.text)
        time.sleep(0.5)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate-mb", type=float, default=50.0, help="writer speed, MB/s (default 50)")
    ap.add_argument("--seconds", type=float, default=20.0, help="how long the writer writes (default 20)")
    ap.add_argument("--dir", default=None, help="where the log goes (default: a temp dir)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        path = os.path.join(d, "fast.log")
        Path(path).write_bytes(b"")
        old, new = LastLine(), LastLine()
        stop = threading.Event()
        threads = [threading.Thread(target=old_follow, args=(path, old, stop), daemon=True),
                   threading.Thread(target=follow, args=(path, 0, new), kwargs={"should_stop": stop.is_set},
                                    daemon=True)]
        for t in threads:
            t.start()
        writer = subprocess.Popen([sys.executable, "-c", WRITER, path, str(args.rate_mb), str(args.seconds)])
        print(f"writer: {args.rate_mb:g} MB/s for {args.seconds:g} s -> {path}")
        print(f"{'t (s)':>6} {'file (MB)':>10} {'old lag (s)':>12} {'new lag (s)':>12}")
        t0 = time.time()
        try:
            while writer.poll() is None:
                time.sleep(1.0)
                now = time.time()

                def fmt(x):
                    return "n/a" if x is None else f"{x:.2f}"
                print(f"{now - t0:6.1f} {os.path.getsize(path) / 1e6:10.1f} {fmt(old.lag_s(now)):>12} "
                      f"{fmt(new.lag_s(now)):>12}", flush=True)
        finally:
            if writer.poll() is None:
                writer.terminate()
                writer.wait(timeout=10)
        time.sleep(1.0)  # one more read for each follower after the writer's last line
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            f.seek(max(0, size - 4096))
            last = float(f.read().rstrip(b"\n").rsplit(b"\n", 1)[-1].split(b" ", 1)[0])
        print(f"after the writer's end ({size / 1e6:.1f} MB written), behind its last line: "
              f"old {old.lag_s(last):.2f} s, new {new.lag_s(last):.2f} s; "
              f"new skipped {new.skipped / 1e6:.1f} MB, each jump marked")
        stop.set()
        for t in threads:
            t.join(timeout=5)


if __name__ == "__main__":
    main()
