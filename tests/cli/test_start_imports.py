"""What the command line imports before a command runs: building the parser (``--help``, or the
parser of one command) loads neither the supervisor, the state store, the workspace reader, the cost,
the telemetry nor the benchmark job and sweep, nor their libraries (polars, psutil, prometheus_client, numpy, aiohttp);
a command imports those when it runs.  Each case in a fresh interpreter, since the test process has
them loaded already."""

from __future__ import annotations

import json

import pytest

from tests.helpers import fresh_python


NOT_AT_START = ("backend.supervisor", "state", "backend.workspace", "backend.flows.workspace", "backend.flows.cost",
                "backend.telemetry", "backend.flows.bench_job", "backend.flows.bench_runner", "backend.flows.sweep",
                "backend.sglang.fleet", "polars", "psutil", "prometheus_client", "numpy", "aiohttp")


def loaded_at_start(argv: list[str]) -> list[str]:
    code = ("import json, sys\nfrom backend.cli import build_parser\n"
            f"build_parser({argv!r})\n"
            f"names = {NOT_AT_START!r}\n"
            "print(json.dumps(sorted(m for m in sys.modules if any(m == n or m.startswith(n + '.') for n in names))))")
    return json.loads(fresh_python(code))


@pytest.mark.parametrize("argv", [["--help"], ["bench", "list"], ["processes", "list"], ["cluster", "status"],
                                  ["supervise"], ["alerts", "list"], ["workspace", "backup"], ["servers", "list"]])
def test_building_the_parser_leaves_what_the_commands_use_to_them(argv):
    assert loaded_at_start(argv) == []


def test_a_session_loads_them(tmp_path):
    """The check above can fail: opening a session is what loads the supervisor and the store."""
    code = ("import sys\nfrom backend.cli.session import Session\n"
            "print('backend.supervisor.supervisor' in sys.modules, 'state.store' in sys.modules)\n"
            f"try:\n    Session({str(tmp_path / 'no-workspace')!r})\nexcept Exception:\n    pass\n"
            "print('backend.supervisor.supervisor' in sys.modules, 'state.store' in sys.modules)")
    out = fresh_python(code)
    assert out.split() == ["False", "False", "True", "True"]


def test_a_command_that_reads_no_log_in_bulk_leaves_polars_out(tmp_path):
    """Every session opens the server fleet, and with it the log ingester; polars (a third of a command's
    start-up) is imported when a log is first read in bulk, not with them."""
    ws = tmp_path / "ws"
    code = ("import io, sys\nfrom backend.cli import main\n"
            f"main(['init', {str(ws)!r}], out=io.StringIO(), err=io.StringIO())\n"
            f"rc = main(['--workspace', {str(ws)!r}, 'processes', 'list'], out=io.StringIO(), err=io.StringIO())\n"
            "print(rc, 'backend.sglang.fleet' in sys.modules, 'backend.sglang.bulkparse' in sys.modules,"
            " 'polars' in sys.modules)\n"
            "from backend.sglang import bulkparse\n"
            "frame = bulkparse.pl.DataFrame({'line': [1, 2]})\n"
            "print(bulkparse.AVAILABLE, 'polars' in sys.modules, bulkparse.pl is sys.modules['polars'], frame.height)")
    out = fresh_python(code)
    assert out.split() == ["0", "True", "True", "False", "True", "True", "True", "2"]
