"""A supervised process's log and run files are its user's only: the supervisor and the wrapper create
them 0600 in 0700 folders, whatever the umask lets through; the child itself keeps the umask it was
given (its own files are its business)."""

from __future__ import annotations

import os
import stat

import pytest

from specdeck_types.process import ProcState as S
from tests.supervisor.conftest import wait_for


def mode(p) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


@pytest.fixture
def usual_umask():
    old = os.umask(0o022)  # the wrapper and the child inherit it
    yield
    os.umask(old)


@pytest.mark.timeout(60)
def test_a_supervised_processs_log_and_run_files_are_private(real, usual_umask):
    sup = real.supervisor()
    code = "import os; m = os.umask(0); os.umask(m); print(oct(m), flush=True); open('child-file', 'w').close()"
    sup.sync_specs([real.spec("quick", code)])
    sup.start("quick")
    wait_for(lambda: sup.view("quick").state == S.EXITED, poll=sup.poll)
    log = real.logs / "quick.log"
    assert "0o22" in log.read_text()  # the child runs under the umask it was started with
    assert mode(real.logs) == 0o700 and mode(log) == 0o600
    assert mode(real.run_dir) == 0o700 and mode(real.run_dir / "quick") == 0o700
    for name in ("launch.json", "identity.json", "exit.json"):
        assert mode(real.run_dir / "quick" / name) == 0o600, name
    assert mode(real.root / "state.db") == 0o600
    assert mode(real.root / "child-file") == 0o644  # the program's own file: not Specdeck's to decide
