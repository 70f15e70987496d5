"""Start-up of ``regen run``: what it imports before it reads a row (figures printed, not a test).

    .venv/bin/python perf/regen_startup.py [--repeat 9] [--root DIR ...]

Each line is a fresh interpreter, timed from process start to exit; best and median of
``--repeat`` runs, side by side:

1. ``python -c pass``: the interpreter alone.
2. the job's own modules: ``backend.regen.job`` and ``backend.regen.config`` with the input read
   (what a run of input files uses).
3. the command line's path: ``backend.cli``'s parser with every command registered, then the
   job's modules, as ``python -m backend.cli regen run`` imports them before it reads a row.
4. ``python -m backend.cli regen run`` of one row against the simulator answering at once, end to
   end (start, read, ask, write, exit).

``--root DIR`` (repeatable) measures other checkouts of the project (e.g. one exported from an
earlier commit with ``git archive``) with the same interpreter and the same simulator, so that a
change can be measured before and after in one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.regen.jobkit import SimServer  # noqa: E402

JOB_MODULES = ("import backend.regen.job as j, backend.regen.config as c\n"
               "cfg = c.JobConfig(out='{out}', servers=[], inputs=['{inp}'])\n"
               "list(j.read_mix(cfg.mix_config(), '.'))\n")
CLI_PATH = "from backend.cli import build_parser\nbuild_parser(['regen', 'run'])\n" + JOB_MODULES


def timed(argv: list[str], cwd: Path, repeat: int) -> tuple[float, float]:
    """(best, median) seconds of ``argv`` from start to exit; a failing run stops the measurement."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        r = subprocess.run(argv, cwd=str(cwd), capture_output=True, text=True, timeout=300)
        times.append(time.perf_counter() - t0)
        if r.returncode != 0:
            raise SystemExit(f"{' '.join(argv)} in {cwd} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    return min(times), statistics.median(times)


def measure(root: Path, sim: SimServer, work: Path, repeat: int) -> dict[str, tuple[float, float]]:
    py = sys.executable
    inp = work / "one.jsonl"
    inp.write_text(json.dumps({"id": "r0", "prompt": "say hi"}) + "\n")
    job = JOB_MODULES.format(out=work / "x.jsonl", inp=inp)
    cli = CLI_PATH.format(out=work / "x.jsonl", inp=inp)
    rows: dict[str, tuple[float, float]] = {}
    rows["python -c pass"] = timed([py, "-c", "pass"], root, repeat)
    rows["the job's modules"] = timed([py, "-c", job], root, repeat)
    rows["the CLI path (parser + job)"] = timed([py, "-c", cli], root, repeat)

    def one_run() -> list[str]:
        out = Path(tempfile.mkdtemp(dir=work)) / "o.jsonl"
        return [py, "-m", "backend.cli", "regen", "run", "--input", str(inp), "--server", sim.url,
                "--out", str(out), "--max-tokens", "8"]

    times = []
    for _ in range(repeat):
        argv = one_run()
        t0 = time.perf_counter()
        r = subprocess.run(argv, cwd=str(root), capture_output=True, text=True, timeout=300)
        times.append(time.perf_counter() - t0)
        if r.returncode != 0:
            raise SystemExit(f"regen run in {root} failed ({r.returncode}):\n{r.stdout}{r.stderr}")
    rows["regen run, 1 row, end to end"] = (min(times), statistics.median(times))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--root", action="append", default=[], metavar="DIR",
                    help="another checkout to measure beside this one (repeat)")
    args = ap.parse_args()
    roots = [ROOT] + [Path(r).resolve() for r in args.root]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        sim = SimServer(work).start()
        try:
            results = {str(r): measure(r, sim, work, args.repeat) for r in roots}
        finally:
            sim.stop()
    names = list(next(iter(results.values())))
    width = max(len(n) for n in names)
    print(f"regen run start-up, best / median of {args.repeat} fresh interpreters, seconds")
    print(f"{'':{width}}  " + "  ".join(f"{Path(r).name or r:>22}" for r in results))
    for n in names:
        print(f"{n:{width}}  " + "  ".join(f"{results[r][n][0]:>10.3f} / {results[r][n][1]:<9.3f}"
                                           for r in results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
