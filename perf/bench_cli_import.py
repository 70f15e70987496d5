"""CPU time of starting the command line: each command in fresh interpreters, this tree beside another.

    python perf/bench_cli_import.py [--against DIR] [-n 7]

Every command line that tests, the supervisor and the wrappers start pays for the imports of the
modules it loads.  This runs each case ``-n`` times in a fresh interpreter (the project's own Python,
the working folder the tree, so the tree's ``backend`` is the one imported) and prints the median CPU
time (user + sys, from ``wait4``) of each.  With ``--against DIR`` (a checkout of another revision, e.g.
``git worktree add /tmp/oldtree REV``) both trees run, interleaved run by run so a change in the load of
the machine falls on both, and the ratio is printed beside them.

The cases: ``--help``, ``bench --help``, ``regen --help``, ``supervise --help``, ``processes list`` and
``bench list`` on a fresh workspace (``init`` writes it into a temporary folder), importing
``backend.cli.bench`` alone, and importing the wrapper module every managed process runs in
(``backend.supervisor.wrapper``).  Each case's exit status must be 0 in both trees.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def cases(ws: str) -> list[tuple[str, list[str]]]:
    cli = ["-m", "backend.cli"]
    return [
        ("--help", cli + ["--help"]),
        ("bench --help", cli + ["bench", "--help"]),
        ("regen --help", cli + ["regen", "--help"]),
        ("supervise --help", cli + ["supervise", "--help"]),
        ("processes list", cli + ["-w", ws, "processes", "list"]),
        ("bench list", cli + ["-w", ws, "bench", "list"]),
        ("import backend.cli.bench", ["-c", "import backend.cli.bench"]),
        ("import backend.supervisor.wrapper", ["-c", "import backend.supervisor.wrapper"]),
    ]


def cpu_seconds(python: str, args: list[str], tree: Path) -> float:
    """User + sys CPU seconds of ``python args`` run in ``tree``; raises when it fails."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    p = subprocess.Popen([python, *args], cwd=str(tree), env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    err = p.stderr.read() if p.stderr is not None else b""
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise SystemExit(f"{tree}: {' '.join(args)} exited {p.returncode}: {err.decode(errors='replace')[-500:]}")
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", metavar="DIR", help="another checkout to measure beside this one")
    ap.add_argument("-n", type=int, default=7, help="runs of each case in each tree (default 7)")
    ap.add_argument("--python", default=str(REPO / ".venv" / "bin" / "python"), help="the interpreter")
    a = ap.parse_args()
    trees = [("this", REPO)] + ([("against", Path(a.against).resolve())] if a.against else [])
    for _, tree in trees:
        if not (tree / "backend" / "cli" / "__init__.py").is_file():
            raise SystemExit(f"{tree}: no backend/cli/__init__.py; give a checkout of this project")
    with tempfile.TemporaryDirectory(prefix="sd-cli-import-") as tmp:
        ws = str(Path(tmp) / "ws")
        subprocess.run([a.python, "-m", "backend.cli", "init", ws], cwd=str(REPO), check=True,
                       stdout=subprocess.DEVNULL)
        for _, tree in trees:  # a first run of each case writes its bytecode and warms the disk cache
            for _, args in cases(ws):
                cpu_seconds(a.python, args, tree)
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(a.n):
            for name, args in cases(ws):
                for label, tree in trees:
                    times.setdefault((name, label), []).append(cpu_seconds(a.python, args, tree))
    head = f"{'case':36} {'this (CPU s)':>13}"
    if a.against:
        head += f" {'against':>10} {'this/against':>13}"
    print(f"median of {a.n} fresh interpreters each, user+sys; this = {REPO}"
          + (f", against = {trees[1][1]}" if a.against else ""))
    print(head)
    for name, _ in cases(""):
        this = statistics.median(times[(name, "this")])
        line = f"{name:36} {this:13.3f}"
        if a.against:
            other = statistics.median(times[(name, "against")])
            line += f" {other:10.3f} {this / other:13.2f}"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
