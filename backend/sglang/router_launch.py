"""Start ``sglang_router.launch_router`` with the arguments given, run by the cluster environment's
interpreter (the dashboard's environment has no sglang-router).

When ``$SPECDECK_ROUTER_KEY_FILE`` names a file, its first line is the control-plane secret: it is
passed to the router as an admin key in memory, so it is never on a command line that every local
user can read (``/proc/<pid>/cmdline``), nor in the supervisor's stored spec.

The router colours its log lines whatever ``NO_COLOR`` says; its output goes through a pipe here and
reaches the log without the terminal's escape sequences.  Standard library only: this file is run by
path, outside Specdeck's package.
"""

import os
import re
import runpy
import sys
import threading

KEY_FILE_ENV = "SPECDECK_ROUTER_KEY_FILE"
ANSI = re.compile(rb"\x1b\[[0-9;]*[A-Za-z]")


def plain_output() -> threading.Thread:
    """Send fds 1 and 2 through a pipe that a thread copies to the original output, escape sequences
    removed; the thread ends when every writer has closed the pipe."""
    read_end, write_end = os.pipe()
    original = os.dup(1)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(write_end, 1)
    os.dup2(write_end, 2)
    os.close(write_end)

    def pump() -> None:
        with os.fdopen(read_end, "rb") as src, os.fdopen(original, "wb", buffering=0) as dst:
            for line in src:
                dst.write(ANSI.sub(b"", line))

    t = threading.Thread(target=pump, name="plain-output")
    t.start()
    return t


def main() -> int:
    path = os.environ.get(KEY_FILE_ENV)
    args = sys.argv[1:]
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                key = (f.read().strip().splitlines() or [""])[0].strip()
        except OSError as exc:
            sys.stderr.write(f"{path}: cannot read the control-plane key: {exc.strerror or exc}\n")
            return 2
        if not key:
            sys.stderr.write(f"{path}: the control-plane key file is empty\n")
            return 2
        args += ["--control-plane-api-keys", f"specdeck:specdeck:admin:{key}"]
    sys.argv = ["sglang_router.launch_router", *args]
    pump = plain_output()
    try:
        runpy.run_module("sglang_router.launch_router", run_name="__main__", alter_sys=True)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.close(1)
        os.close(2)
        pump.join(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
