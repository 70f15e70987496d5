"""launch_problem finds the program the way exec does (PATH of the child's environment; a path
with a slash taken from the working folder)."""

from __future__ import annotations

from pathlib import Path

from backend.supervisor.prestart import launch_problem


def _exe(path: Path, mode: int = 0o755) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(mode)
    return path


def test_program_on_the_childs_path(tmp_path):
    _exe(tmp_path / "bin" / "tool")
    assert launch_problem(["tool"], str(tmp_path), {"PATH": str(tmp_path / "bin")}) is None
    assert launch_problem(["tool"], str(tmp_path), {"PATH": "/nowhere"}) == \
        "the program (argv[0]) 'tool' was not found on PATH (/nowhere)"


def test_relative_path_entries_count_from_cwd(tmp_path):
    _exe(tmp_path / "work" / "bin" / "tool")
    assert launch_problem(["tool"], str(tmp_path / "work"), {"PATH": "bin"}) is None


def test_a_slash_makes_it_a_path_from_cwd(tmp_path):
    _exe(tmp_path / "jobs" / "run.sh")
    assert launch_problem(["./run.sh"], str(tmp_path / "jobs")) is None
    assert launch_problem(["jobs/run.sh"], str(tmp_path)) is None
    assert launch_problem(["./run.sh"], str(tmp_path)) == (
        f"the program (argv[0]) {tmp_path}/./run.sh does not exist (taken from the working folder {tmp_path})")


def test_not_executable_folder_and_missing_cwd(tmp_path):
    _exe(tmp_path / "plain.sh", 0o644)
    assert launch_problem([str(tmp_path / "plain.sh")], str(tmp_path)) == \
        f"the program (argv[0]) {tmp_path / 'plain.sh'} is not executable"
    assert launch_problem([str(tmp_path)], str(tmp_path)) == f"the program (argv[0]) {tmp_path} is a folder"
    assert launch_problem(["true"], str(tmp_path / "gone")) == \
        f"its working folder (cwd) {tmp_path / 'gone'} does not exist"
    assert launch_problem(["true"], str(tmp_path / "plain.sh")) == \
        f"its working folder (cwd) {tmp_path / 'plain.sh'} is not a folder"
