"""A [[process]]'s log settings reach the process's log writer: started through the command line, a
process writing far more than log_max_mb leaves its log rotated into at most log_keep older files, and
every line it printed is in them once."""

from __future__ import annotations

import json
import textwrap

from tests.supervisor.conftest import PY, wait_for
from tests.supervisor.test_cli import run, write_ws

LINES = 4000


def test_log_max_mb_and_log_keep_of_the_workspace_rotate_the_log(tmp_path):
    code = f"import sys\nfor i in range({LINES}):\n    print(f'line {{i:06d}} ' + 'x' * 40)\nsys.stdout.flush()\n"
    ws = write_ws(tmp_path / "ws", textwrap.dedent(f"""
        [[process]]
        name = "chatty"
        argv = [{json.dumps(PY)}, "-c", {json.dumps(code)}]
        log_max_mb = 0.05
        log_keep = 3
    """))
    w = str(ws)
    try:
        assert run("-w", w, "processes", "start", "chatty")[0] == 0

        def ended() -> bool:
            rc, out, _ = run("-w", w, "processes", "list", "--json")
            return rc == 0 and json.loads(out)[0]["state"] == "EXITED"

        wait_for(ended, timeout_s=60)
    finally:
        run("-w", w, "processes", "stop-all")
    logs = ws / "logs"
    names = sorted(p.name for p in logs.iterdir() if p.name.startswith("chatty.log"))
    assert names == ["chatty.log", "chatty.log.1", "chatty.log.2", "chatty.log.3"], names
    for p in logs.glob("chatty.log*"):
        assert p.stat().st_size <= 0.05 * 1024 * 1024 + 64 * 1024  # the limit, and at most the line that crossed it
    seen = [ln.split()[1] for p in sorted(logs.glob("chatty.log*"), reverse=True)
            for ln in p.read_text().splitlines() if ln.startswith("line ")]
    assert len(seen) == len(set(seen))  # no line twice
    assert seen[-1] == f"{LINES - 1:06d}"  # the newest is in the live file
