"""Start ``sglang_router.launch_router`` with the arguments given, run by the cluster environment's
interpreter (the dashboard's environment has no sglang-router).

When ``$SPECDECK_ROUTER_KEY_FILE`` names a file, its first line is the control-plane secret: it is
passed to the router as an admin key in memory, so it is never on a command line that every local
user can read (``/proc/<pid>/cmdline``), nor in the supervisor's stored spec.  Standard library
only: this file is run by path, outside Specdeck's package.
"""

import os
import runpy
import sys

KEY_FILE_ENV = "SPECDECK_ROUTER_KEY_FILE"


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
    runpy.run_module("sglang_router.launch_router", run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
