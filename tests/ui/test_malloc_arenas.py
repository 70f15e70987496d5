"""The dashboard process limits glibc's malloc arenas once (ui.context.limit_malloc_arenas): in a fresh
interpreter, since the setting is per process."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CODE = ("import os; from ui.context import limit_malloc_arenas as f; print(f(), f(), "
        "sorted(k for k in os.environ if 'MALLOC_ARENA' in k))")


def _run(env_extra: dict[str, str]) -> str:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    env.update(env_extra)
    r = subprocess.run([sys.executable, "-c", CODE], cwd=str(REPO), env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_the_limit_is_set_once_on_glibc():
    assert _run({}) == "True False []"


def test_an_arena_limit_set_at_start_by_the_user_is_left_alone():
    assert _run({"MALLOC_ARENA_MAX": "4"}) == "False False ['MALLOC_ARENA_MAX']"


def test_the_scripts_setting_is_taken_out_of_the_environment_the_dashboards_processes_get():
    assert _run({"MALLOC_ARENA_MAX": "2", "SPECDECK_MALLOC_ARENA_MAX_SET": "1"}) == "False False []"


def test_scripts_dashboard_sets_it_only_when_the_user_has_not():
    text = (REPO / "scripts" / "dashboard").read_text()
    assert 'if [ -z "${MALLOC_ARENA_MAX:-}" ]; then\n  export MALLOC_ARENA_MAX=2 SPECDECK_MALLOC_ARENA_MAX_SET=1' in text
