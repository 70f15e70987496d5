"""Memory of inspecting a checkpoint folder whose config.json is 1 GiB (the Training page's inspection).

    .venv/bin/python perf/bench_readcap.py [--size-gb 1] [--dir /tmp] [--no-plain]

The config.json is ``{`` and then zeros, created sparse (instant, no disk used), in a checkpoint folder
written by hand; everything is deleted at the end.  Each measurement runs in a fresh process, after a
first inspection of a small checkpoint (imports and first-call costs are not counted), so the peak RSS
(``ru_maxrss``) is the call's own: the figure that says what one page view can cost.

* ``inspect_checkpoint`` as the dashboard calls it, with the capped reads of ``backend.readcap``;
* for comparison (unless ``--no-plain``), the same file read the way it was before the caps:
  ``json.loads(Path.read_text())``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.train.ckpt_files import write_checkpoint  # noqa: E402

_PROBE = r"""
import json, resource, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
import psutil
from backend.train.checkpoints import inspect_checkpoint

def plain(folder):
    try:
        return json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except ValueError as exc:
        return f"{type(exc).__name__}: {str(exc)[:120]}"

how = sys.argv[4]
inspect_checkpoint(sys.argv[2]); plain(sys.argv[2])
proc = psutil.Process()
rss0, peak0 = proc.memory_info().rss, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
t = time.perf_counter()
said = inspect_checkpoint(sys.argv[3]).config_error if how == "capped" else plain(sys.argv[3])
dt = time.perf_counter() - t
rss1, peak1 = proc.memory_info().rss, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"rss0": rss0, "rss1": rss1, "peak0": peak0, "peak1": peak1, "seconds": dt, "said": said}))
"""


def mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


def measure(small: Path, big: Path, how: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _PROBE, str(REPO), str(small), str(big), how],
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"{how} probe failed:\n{out.stderr}")
    return json.loads(out.stdout)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-gb", type=float, default=1.0)
    ap.add_argument("--dir", default=tempfile.gettempdir())
    ap.add_argument("--no-plain", action="store_true", help="skip the uncapped read (it needs ~2x the size in RAM)")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="specdeck-bench-readcap-", dir=args.dir))
    try:
        small = write_checkpoint(root / "epoch_0_step_100")
        big = write_checkpoint(root / "epoch_0_step_200")
        size = int(args.size_gb * 2**30)
        with open(big / "config.json", "wb") as f:
            f.write(b"{")
            f.truncate(size)  # sparse: instant
        print(f"checkpoint: {big} with a {size / 2**30:.2f} GiB config.json (sparse)")
        for how in ("capped",) + (() if args.no_plain else ("plain",)):
            r = measure(small, big, how)
            name = ("inspect_checkpoint (capped reads)" if how == "capped"
                    else "json.loads(read_text()) (before the caps)")
            print(f"{name}: RSS {mib(r['rss0'])} before, {mib(r['rss1'])} after; peak RSS {mib(r['peak0'])} -> "
                  f"{mib(r['peak1'])} (+{mib(r['peak1'] - r['peak0'])}) in {r['seconds'] * 1000:.1f} ms")
            print(f"    it said: {r['said']}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
