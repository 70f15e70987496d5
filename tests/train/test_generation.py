"""SpecForge generation detection against environments and checkouts made here: a venv with a ``specforge``
package (version in its dist-info, ``cli.py``, the console script), SpecForge checkouts with the scripts of
each generation, a python that is missing, and one that never answers."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from backend.train.generation import clear_cache, detect_generation, probe_env


@pytest.fixture(autouse=True)
def _fresh_cache():
    clear_cache()
    yield
    clear_cache()


def make_venv(root: Path, *, version: str | None = None, cli: bool = False, console_script: bool = False) -> str:
    """A venv (no pip) with, when ``version`` is given, a ``specforge`` package as its wheel installs it."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    site = next((root / "lib").glob("python3*/site-packages"))
    if version is not None:
        pkg = site / "specforge"
        pkg.mkdir()
        # importing the package would fail: detection must never import it
        (pkg / "__init__.py").write_text("raise ImportError('specforge must not be imported by the probe')\n")
        if cli:
            (pkg / "cli.py").write_text("def main():\n    return 0\n")
        dist = site / f"specforge-{version}.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: specforge\nVersion: {version}\n")
        if console_script:
            (dist / "entry_points.txt").write_text("[console_scripts]\nspecforge = specforge.cli:main\n")
            script = root / "bin" / "specforge"
            script.write_text(f"#!{root / 'bin' / 'python'}\nimport sys\nfrom specforge.cli import main\n"
                              "sys.exit(main())\n")
            script.chmod(0o755)
    return str(root / "bin" / "python")


def make_checkout(root: Path, *files: str, version: str | None = None) -> str:
    for f in files:
        p = root / f
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("# stand-in\n")
    root.mkdir(parents=True, exist_ok=True)
    if version is not None:
        (root / "version.txt").write_text(version + "\n")
    return str(root)


def test_wheel_with_the_unified_cli_is_gen3(tmp_path):
    py = make_venv(tmp_path / "venv", version="0.2.0", cli=True, console_script=True)
    info = detect_generation(py)
    assert (info.generation, info.version, info.chosen) == ("gen3", "0.2.0", False)
    assert info.console_script == str(tmp_path / "venv" / "bin" / "specforge")
    assert info.problems == ()
    assert info.label == "Gen-3 (detected, SpecForge 0.2.0)"


def test_gen2_checkout_with_the_package_installed_from_it(tmp_path):
    py = make_venv(tmp_path / "venv", version="0.2.0")
    sf = make_checkout(tmp_path / "SpecForge", "scripts/train_eagle3.py", "scripts/prepare_data.py", version="0.2.0")
    info = detect_generation(py, sf)
    assert (info.generation, info.version, info.console_script) == ("gen2", "0.2.0", None)
    assert info.evidence[1] == f"{sf}: scripts/train_eagle3.py"


def test_checkout_version_when_the_package_is_not_installed(tmp_path):
    py = make_venv(tmp_path / "venv")
    sf = make_checkout(tmp_path / "SpecForge", "scripts/train_eagle3.py", version="0.1.0")
    info = detect_generation(py, sf)
    assert (info.generation, info.version) == ("gen2", "0.1.0")
    assert info.evidence[0] == f"{py}: no specforge package installed"


def test_gen1_checkout(tmp_path):
    py = make_venv(tmp_path / "venv")
    sf = make_checkout(tmp_path / "SpecForge", "scripts/train_eagle3_online.py", "scripts/train_eagle3_offline.py")
    assert detect_generation(py, sf).generation == "gen1"


def test_head_checkout_has_cli_and_no_scripts(tmp_path):
    py = make_venv(tmp_path / "venv")
    assert detect_generation(py, make_checkout(tmp_path / "a", "specforge/cli.py")).generation == "gen3"
    # the reference's rule: cli.py together with scripts/train_eagle3.py is still Gen-2
    both = make_checkout(tmp_path / "b", "specforge/cli.py", "scripts/train_eagle3.py")
    assert detect_generation(py, both).generation == "gen2"


def test_nothing_found_says_where_it_looked(tmp_path):
    py = make_venv(tmp_path / "venv")
    sf = make_checkout(tmp_path / "empty")
    info = detect_generation(py, sf)
    assert info.generation is None
    assert info.problems == (f"no SpecForge entry point found: {py} has no specforge with cli.py and {sf}/scripts "
                             "has neither train_eagle3.py nor train_eagle3_online.py; set specforge_dir or choose "
                             "the generation",)


def test_chosen_generation_wins_and_the_version_is_still_read(tmp_path):
    py = make_venv(tmp_path / "venv", version="0.2.0", cli=True)
    info = detect_generation(py, None, "gen2")
    assert (info.generation, info.version, info.chosen) == ("gen2", "0.2.0", True)
    assert info.label == "Gen-2 (chosen, SpecForge 0.2.0)"


def test_missing_python(tmp_path):
    missing = str(tmp_path / "nope" / "python")
    info = detect_generation(missing, None)
    assert info.generation is None
    assert info.problems[0] == f"cannot run {missing}: No such file or directory"


def test_python_that_never_answers_is_ended(tmp_path):
    pidfile = tmp_path / "pid"
    hang = tmp_path / "python"
    hang.write_text(f"#!/bin/sh\necho $$ > {pidfile}\nexec sleep 60\n")
    hang.chmod(0o755)
    t0 = time.monotonic()
    env = probe_env(str(hang), timeout_s=1.0)
    assert time.monotonic() - t0 < 15
    assert not env.ok and env.error == f"{hang} did not answer within 1 s"
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the probe's process was left running"
        time.sleep(0.05)


def test_answers_are_cached_per_interpreter(tmp_path):
    py = make_venv(tmp_path / "venv", version="0.1.0", cli=True)
    assert probe_env(py).version == "0.1.0"
    site = next((tmp_path / "venv" / "lib").glob("python3*/site-packages"))
    (site / "specforge-0.1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: specforge\n"
                                                                 "Version: 0.3.0\n")
    assert probe_env(py).version == "0.1.0"
    assert probe_env(py, use_cache=False).version == "0.3.0"


def test_refresh_asks_one_interpreter_again(tmp_path):
    from backend.train.runs import TrainRuns

    py = make_venv(tmp_path / "venv")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "specdeck.toml").write_text(f'[[train]]\nname = "r"\npython = "{py}"\ntarget_model = "/t"\n'
                                      'train_data = "/d"\n')
    from backend.flows.workspace import load_workspace

    runs = TrainRuns(load_workspace(ws), supervisor=None)
    assert runs.generation("r").generation is None
    site = next((tmp_path / "venv" / "lib").glob("python3*/site-packages"))
    (site / "specforge").mkdir()
    (site / "specforge" / "cli.py").write_text("")
    assert runs.generation("r").generation is None  # the cached answer
    assert runs.generation("r", refresh=True).generation == "gen3"
