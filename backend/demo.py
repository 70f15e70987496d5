"""The small programs the demo workspace runs, plain command-line entries the supervisor runs like any
other process (standard library only)::

    python -m backend.demo ticker [--interval S]
    python -m backend.demo batch [--seconds S] [--exit-code N]
"""

from __future__ import annotations

import argparse
import signal
import sys
import time


def _ticker(interval: float) -> int:
    stop = False

    def on_term(signum, frame):  # noqa: ARG001
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    print("ticker ready", flush=True)
    n = 0
    while not stop:
        n += 1
        print(f"tick {n} at {time.strftime('%Y-%m-%d %H:%M:%S')}", flush=True)
        time.sleep(interval)
    print("ticker stopping on SIGTERM", flush=True)
    return 0


def _batch(seconds: float, exit_code: int) -> int:
    steps = max(1, int(seconds * 2))
    for i in range(1, steps + 1):
        print(f"batch step {i}/{steps}", flush=True)
        time.sleep(seconds / steps)
    print(f"batch done, exiting with {exit_code}", flush=True)
    return exit_code


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m backend.demo")
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("ticker", help="print a line every interval until SIGTERM")
    t.add_argument("--interval", type=float, default=1.0)
    b = sub.add_parser("batch", help="work for a while, then exit")
    b.add_argument("--seconds", type=float, default=5.0)
    b.add_argument("--exit-code", type=int, default=0)
    args = ap.parse_args(argv)
    if args.cmd == "ticker":
        return _ticker(args.interval)
    return _batch(args.seconds, args.exit_code)


if __name__ == "__main__":
    sys.exit(main())
