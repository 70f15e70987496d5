"""Benchmark: ``specdeck servers preflight NAME`` from the command line, with and without a
dashboard lending its warm SGLang parser.

    python perf/preflight_cli.py [--python .venv-serve/bin/python] [--runs 3]

Makes a workspace with one EAGLE3 server (``--tp 2`` in its extra arguments) served by
``--python``, then runs the command line's preflight ``--runs`` times in each of two settings,
interleaved:

* no dashboard: the command line starts SGLang's parser itself and waits for sglang's import
  (what every call cost before the dashboard lent its parser);
* dashboard: a stand-in dashboard process (backend.sglang.argshare.serve plus the warm parser the
  servers page keeps) serves the workspace's run/argparser.sock; the check is parsed there.

Prints the median wall time and CPU time (the command line and every process it waited for) of
each, side by side, and checks that both print the same findings.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from backend.sglang.version import detect_version  # noqa: E402
from backend.sim.models import make_draft_dir, make_target_dir  # noqa: E402

DASHBOARD = r'''
import json, sys, tomllib
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from backend.sglang import argcheck, argshare, argworker
from backend.sglang.config import ServerConfig
from backend.sglang.launch import build_env
from backend.sglang.version import resolve_capabilities
ws = Path(sys.argv[2])
cfg = ServerConfig.model_validate(tomllib.loads((ws / "specdeck.toml").read_text())["server"][0])
server = argshare.serve(ws / "run")
additions = build_env(cfg, resolve_capabilities(cfg))
warm = argworker.ask(cfg.python, additions, {"base": [], "groups": [], "fields": []}, 120)
print(json.dumps({"serving": server is not None, "warm": warm.get("kind")}), flush=True)
sys.stdin.read()
'''


def workspace(root: Path, python: str, version: str) -> Path:
    target = make_target_dir(root / "m" / "target", hidden_size=4096, num_hidden_layers=32, vocab_size=128256)
    draft = make_draft_dir(root / "m" / "draft", target_hidden_size=4096, vocab_size=128256, draft_vocab_size=32000)
    ws = root / "ws"
    ws.mkdir()
    (ws / "specdeck.toml").write_text(f"""
[workspace]
name = "preflight-cli"

[[server]]
name = "srv"
model_path = "{target}"
python = "{python}"
port = 39251
sglang_version = "{version}"
extra_args = ["--tp", "2"]

[server.speculative]
algorithm = "EAGLE3"
draft_model_path = "{draft}"
num_steps = 3
eagle_topk = 1
num_draft_tokens = 4
""")
    return ws


def one_preflight(ws: Path) -> tuple[float, float, str, str]:
    """(wall s, CPU s, stdout, stderr) of one command-line preflight."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "backend.cli", "--workspace", str(ws), "servers", "preflight",
                          "srv"], cwd=REPO, capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, out.stdout, out.stderr


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=str(REPO / ".venv-serve" / "bin" / "python"))
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    version = detect_version(a.python)
    if version is None:
        print(f"no sglang for {a.python}: build the serving environment or pass --python")
        return 1
    ws = workspace(Path(tempfile.mkdtemp(prefix="perf-preflight-cli-")), a.python, version)
    print(f"sglang {version} in {a.python}; `servers preflight srv` (EAGLE3, extra_args --tp 2), {a.runs} run(s) each")
    dash = subprocess.Popen([sys.executable, "-c", DASHBOARD, str(REPO), str(ws)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    t0 = time.perf_counter()
    info = json.loads(dash.stdout.readline() or "null")
    print(f"stand-in dashboard up, parser warm in {time.perf_counter() - t0:.1f} s: {info}")
    sock = ws / "run" / "argparser.sock"
    hidden = ws / "run" / "argparser.sock.away"
    own: list[tuple[float, float]] = []
    lent: list[tuple[float, float]] = []
    outputs: dict[str, set[str]] = {"own": set(), "lent": set()}
    notes: dict[str, set[str]] = {"own": set(), "lent": set()}
    try:
        for _ in range(a.runs):
            os.rename(sock, hidden)  # the command line finds no dashboard
            try:
                wall, cpu, out, err = one_preflight(ws)
            finally:
                os.rename(hidden, sock)
            own.append((wall, cpu))
            outputs["own"].add(out)
            notes["own"].add(err.strip())
            wall, cpu, out, err = one_preflight(ws)
            lent.append((wall, cpu))
            outputs["lent"].add(out)
            notes["lent"].add(err.strip())
    finally:
        dash.stdin.close()
        dash.wait(timeout=30)
        dash.stdout.close()

    def med(xs: list[tuple[float, float]], i: int) -> float:
        return statistics.median(x[i] for x in xs)

    w = 34
    print(f"{'':14}{'no dashboard (parser here)':>{w}}{'dashboard lends its parser':>{w}}")
    print(f"{'wall, median':14}{med(own, 0):>{w - 2}.2f} s{med(lent, 0):>{w - 2}.2f} s")
    print(f"{'CPU, median':14}{med(own, 1):>{w - 2}.2f} s{med(lent, 1):>{w - 2}.2f} s")
    print(f"{'each wall':14}{' '.join(f'{x[0]:.2f}' for x in own):>{w}}{' '.join(f'{x[0]:.2f}' for x in lent):>{w}}")
    print(f"{'each CPU':14}{' '.join(f'{x[1]:.2f}' for x in own):>{w}}{' '.join(f'{x[1]:.2f}' for x in lent):>{w}}")
    print(f"speed-up: {med(own, 0) / med(lent, 0):.1f}x wall, {med(own, 1) / med(lent, 1):.1f}x CPU "
          "(CPU of the command line and its children; a lent check's parse runs in a fork of the dashboard's "
          "parser, not counted here)")
    same = len(outputs["own"]) == 1 and outputs["own"] == outputs["lent"]
    print(f"same findings printed in both settings: {same}")
    print(f"note without a dashboard: {sorted(notes['own'])[0][:110]}...")
    print(f"note with the dashboard: {sorted(notes['lent'])[0] or '(none)'}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
