"""``--dist loadgroup`` as scripts/test runs it: a module whose tests share a module-scoped fixture runs on
one worker, so the fixture (a Ray head, a trained checkpoint, a simulator in the real suite) is set up
once, and a slow test of a module without one is a unit of its own.  Run in a pytest of its own, on two
small generated modules, with tests/conftest.py's hooks as a plugin."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

SHARED = textwrap.dedent("""
    import os
    import pytest

    @pytest.fixture(scope="module")
    def head():
        with open(os.environ["SETUPS"], "a") as f:
            f.write(os.environ.get("PYTEST_XDIST_WORKER", "-") + "\\n")
        return 1

    def test_a_quick_one_first(head):
        with open(os.environ["RAN"], "a") as f:
            f.write(f"shared {os.environ['PYTEST_XDIST_WORKER']} quick\\n")

    @pytest.mark.slow
    @pytest.mark.parametrize("i", range(8))
    def test_on_the_shared_fixture(head, i):
        with open(os.environ["RAN"], "a") as f:
            f.write(f"shared {os.environ['PYTEST_XDIST_WORKER']} slow\\n")
""")

ALONE = textwrap.dedent("""
    import os
    import time
    import pytest

    @pytest.mark.slow
    @pytest.mark.parametrize("i", range(4))
    def test_alone(i):
        time.sleep(0.3)
        with open(os.environ["RAN"], "a") as f:
            f.write(f"alone {os.environ['PYTEST_XDIST_WORKER']}\\n")
""")


def test_a_module_fixture_is_set_up_once_and_lone_slow_tests_spread(tmp_path):
    (tmp_path / "test_shared.py").write_text(SHARED)
    (tmp_path / "test_alone.py").write_text(ALONE)
    setups, ran = tmp_path / "setups.txt", tmp_path / "ran.txt"
    env = dict(os.environ, SETUPS=str(setups), RAN=str(ran), PYTHONPATH=str(REPO))
    env.pop("PYTEST_XDIST_WORKER", None)
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "3", "--dist", "loadgroup", "-p", "tests.conftest", "-q",
         "-p", "no:cacheprovider", "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path)],
        cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "13 passed" in proc.stdout, proc.stdout[-3000:]
    assert len(setups.read_text().split()) == 1, setups.read_text()  # one worker set the fixture up
    lines = [line.split()[:2] for line in ran.read_text().splitlines()]
    assert len({w for kind, w in lines if kind == "shared"}) == 1, lines
    # in the order of the file: the slow tests on the module's fixture do not go before the quick one, which
    # may leave the fixture as they expect it
    shared = [line.split()[2] for line in ran.read_text().splitlines() if line.startswith("shared ")]
    assert shared == ["quick"] + ["slow"] * 8, shared
    # the four lone slow tests are four units: more than one worker takes them
    assert len({w for kind, w in lines if kind == "alone"}) > 1, lines


def test_a_second_suite_on_the_machine_holds_another_block_of_demo_ports(monkeypatch):
    """Each run's controller holds a block of ports bound for its whole run; its workers' demo workspaces take
    their ports inside it.  A second suite started at the same time (its controller claims while the first's
    block is held) gets another block, so that two suites' workers never give their demos the same ports."""
    import socket

    from tests import conftest

    monkeypatch.delenv(conftest._PORT_BLOCK_ENV, raising=False)
    held = len(conftest._held)
    try:
        conftest._claim_port_block()  # as this run's controller did, in whichever process holds its block
        first = int(os.environ[conftest._PORT_BLOCK_ENV])
        conftest._claim_port_block()  # another suite's controller, while the first block is held
        second = int(os.environ[conftest._PORT_BLOCK_ENV])
        assert first in conftest.PORT_BLOCKS and second in conftest.PORT_BLOCKS and first != second
        with socket.socket() as s, pytest.raises(OSError):
            s.bind(("127.0.0.1", first))  # held: a third suite passes it over
        # ten workers' hundreds fit in a block without reaching the next, all above Ray's worker ports and
        # below the ephemeral ones
        blocks = sorted(conftest.PORT_BLOCKS)
        assert all(b - a >= 1000 for a, b in zip(blocks, blocks[1:]))
        assert 20000 <= blocks[0] and blocks[-1] + 1000 <= 32768
    finally:
        for sock in conftest._held[held:]:
            sock.close()
        del conftest._held[held:]
