"""Start ``sglang_router.launch_router`` with the arguments given, run by the cluster environment's
interpreter (the dashboard's environment has no sglang-router).

When ``$SPECDECK_ROUTER_KEY_FILE`` names a file, its first line is the control-plane secret: it is
passed to the router as an admin key in memory, so it is never on a command line that every local
user can read (``/proc/<pid>/cmdline``), nor in the supervisor's stored spec.

The router colours its log lines whatever ``NO_COLOR`` says; its output goes through a pipe to a small
child process that copies it to the log without the terminal's escape sequences.  Standard library only: this file is run by
path, outside Specdeck's package.
"""

import os
import re
import runpy
import signal
import sys

KEY_FILE_ENV = "SPECDECK_ROUTER_KEY_FILE"
ANSI = re.compile(rb"\x1b\[[0-9;]*[A-Za-z]")


def plain_output() -> int:
    """Send fds 1 and 2 through a pipe that a child process copies to the original output, escape
    sequences removed; the child (its pid is returned) ends when every writer has closed the pipe.
    A process, not a thread: the router holds the interpreter's lock while it runs."""
    read_end, write_end = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the copier: ends at the pipe's end, not at the stop signal (the last lines get through)
        os.close(write_end)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            with os.fdopen(read_end, "rb") as src, os.fdopen(1, "wb", buffering=0) as dst:
                for line in src:
                    dst.write(ANSI.sub(b"", line))
        finally:
            os._exit(0)
    os.close(read_end)
    os.dup2(write_end, 1)
    os.dup2(write_end, 2)
    os.close(write_end)
    return pid


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
    copier = plain_output()
    try:
        runpy.run_module("sglang_router.launch_router", run_name="__main__", alter_sys=True)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.close(1)
        os.close(2)
        os.waitpid(copier, 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
