"""The command line loads only the module of the command it runs, knows which module registers each
command, and ends with 130 on a SIGTERM that arrives while it starts."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from backend.cli import COMMANDS, DOMAINS, build_parser, command_of

REPO = Path(__file__).resolve().parents[2]


def test_every_command_is_mapped_to_the_module_that_registers_it():
    seen: dict[str, str] = {}
    for module in DOMAINS:
        sub = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(module).register(sub)
        for name in sub.choices:
            seen[name] = module
    assert seen == COMMANDS


@pytest.mark.parametrize("argv, expected", [
    (["regen", "run"], "regen"),
    (["--workspace", "/ws", "bench", "list"], "bench"),
    (["-w", "/ws", "train", "runs"], "train"),
    (["--workspace=/ws", "servers", "list"], "servers"),
    (["-w/ws", "processes", "list"], "processes"),
    (["--help"], None),
    ([], None),
    (["--workspace"], None),
])
def test_the_command_is_found_after_the_workspace_option(argv, expected):
    assert command_of(argv) == expected


def test_a_command_line_parser_holds_its_command_and_help_holds_all():
    assert set(build_parser(["regen", "run"])._subparsers._group_actions[0].choices) == {"regen"}
    assert set(build_parser(["--help"])._subparsers._group_actions[0].choices) == set(COMMANDS)
    assert set(build_parser(["nonsense"])._subparsers._group_actions[0].choices) == set(COMMANDS)


def test_regen_loads_neither_the_supervisor_nor_the_benchmark_client():
    code = ("import sys\nfrom backend.cli import build_parser\nbuild_parser(['regen', 'run'])\n"
            "import backend.regen.job\n"
            "print(sorted(m for m in sys.modules if m.startswith(('backend.supervisor', 'backend.bench', "
            "'backend.flows', 'state', 'backend.sglang'))))")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def test_a_sigterm_while_the_command_line_starts_exits_130(tmp_path):
    """The handler is set before any command's modules load; a SIGTERM landing right then ends the
    command line with 130 and says so (the child signals itself the moment the handler is set)."""
    child = ("import os, runpy, signal, sys\n"
             "sys.argv = ['backend.cli', '--workspace', sys.argv[1], 'processes', 'list']\n"
             "real = signal.signal\n"
             "def setting(sig, handler):\n"
             "    old = real(sig, handler)\n"
             "    if sig == signal.SIGTERM:\n"
             "        loaded = [m for m in sys.modules if m.startswith(('backend.cli.', 'backend.supervisor'))]\n"
             "        print('loaded before the handler:', loaded, flush=True)\n"
             "        os.kill(os.getpid(), signal.SIGTERM)\n"
             "    return old\n"
             "signal.signal = setting\n"
             "runpy.run_module('backend.cli.__main__', run_name='__main__')\n")
    r = subprocess.run([sys.executable, "-c", child, str(tmp_path / "ws")], cwd=REPO, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 130, (r.stdout, r.stderr)
    assert "loaded before the handler: []" in r.stdout
    assert "stopped (SIGTERM) while starting" in r.stderr
