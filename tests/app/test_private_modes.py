"""What a workspace holds is private to its user: a fresh workspace, its state database and the files
a regeneration or a benchmark writes are 0600 (files) and 0700 (folders) under the usual umask."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from backend.flows.workspace import load_workspace
from state.store import Store


def mode(p) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


@pytest.fixture(autouse=True)
def usual_umask():
    old = os.umask(0o022)  # under which a plain mkdir or open makes 0755 / 0644
    yield
    os.umask(old)


def test_a_new_demo_workspace_is_private(tmp_path: Path):
    root = tmp_path / "new" / "demo"
    ws = load_workspace(root, create_demo=True)
    assert mode(tmp_path / "new") == 0o700 and mode(root) == 0o700  # made by Specdeck: both private
    assert mode(ws.config_path) == 0o600
    for d in (ws.logs_dir, ws.run_dir, ws.outputs_dir):
        assert mode(d) == 0o700, d
    assert mode(ws.store_path) == 0o600  # the demo's benchmark history is in it already
    # everything Specdeck wrote there (the simulated model folders aside: public files, inside the 0700 root)
    leaky = [str(p.relative_to(root)) for p in root.rglob("*")
             if mode(p) & 0o077 and not p.is_symlink() and p.relative_to(root).parts[0] != "models"]
    assert leaky == []


def test_the_state_database_and_its_wal_and_shm_are_0600(tmp_path: Path):
    path = tmp_path / "state.db"
    with Store(path) as s:
        s.execute("CREATE TABLE t (x)")
        s.execute("INSERT INTO t VALUES (1)")
        wal, shm = Path(f"{path}-wal"), Path(f"{path}-shm")
        assert wal.exists() and shm.exists()  # WAL mode: both there while it is open
        assert (mode(path), mode(wal), mode(shm)) == (0o600, 0o600, 0o600)


def test_a_database_an_earlier_version_left_readable_is_tightened(tmp_path: Path):
    path = tmp_path / "state.db"
    with Store(path):
        pass
    path.chmod(0o644)
    with Store(path) as s:
        s.execute("CREATE TABLE t (x)")
        assert mode(path) == 0o600 and mode(f"{path}-wal") == 0o600


def test_logs_and_run_left_0755_are_tightened_but_a_users_outputs_folder_is_not(tmp_path: Path):
    mine = tmp_path / "shared-outputs"
    mine.mkdir(mode=0o755)
    root = tmp_path / "ws"
    (root / "logs").mkdir(parents=True, mode=0o755)
    (root / "run").mkdir(mode=0o755)
    (root / "specdeck.toml").write_text(f'[workspace]\nname = "lab"\noutputs_dir = "{mine}"\n')
    ws = load_workspace(root)
    assert mode(ws.logs_dir) == 0o700 and mode(ws.run_dir) == 0o700
    assert ws.outputs_dir == mine and mode(mine) == 0o755  # the user's own folder: left as it is


def test_an_outputs_folder_specdeck_makes_is_0700(tmp_path: Path):
    root = tmp_path / "ws"
    root.mkdir()
    (root / "specdeck.toml").write_text(f'[workspace]\nname = "lab"\noutputs_dir = "{tmp_path / "out" / "deep"}"\n')
    ws = load_workspace(root)
    assert mode(tmp_path / "out") == 0o700 and mode(ws.outputs_dir) == 0o700


def test_a_regeneration_writes_its_files_0600(tmp_path: Path):
    from backend.regen.config import JobConfig, write_job_json
    from backend.regen.output import OutputWriter, RunFiles
    from backend.regen.progress import ProgressLog

    files = RunFiles.of(tmp_path / "outputs" / "regen" / "run.jsonl")
    w = OutputWriter(files)
    w.close()
    log = ProgressLog(files.progress)
    log.write({"t": 1.0, "done": 0})
    log.close()
    write_job_json(files, JobConfig.from_json({"out": str(files.out), "servers": [], "inputs": []}))
    assert mode(tmp_path / "outputs") == 0o700 and mode(files.out.parent) == 0o700
    for p in (files.out, files.error, files.skipped, files.progress, files.job):
        assert mode(p) == 0o600, p
    assert json.loads(files.job.read_text())["out"] == str(files.out)


def test_a_benchmark_jobs_progress_and_a_sweeps_lock_are_0600(tmp_path: Path):
    from backend.flows.bench_job import Progress, ProgressWriter
    from backend.flows.sweep import take_lock

    p = tmp_path / "outputs" / "bench" / "s-1" / "progress.json"
    ProgressWriter(p, Progress("server", "builtin", [])).update(force=True, phase="running")
    assert mode(p.parent) == 0o700 and mode(p) == 0o600

    class Ws:
        run_dir = tmp_path / "run"

    lock = take_lock(Ws(), "server", tmp_path / "state.json")
    assert mode(lock) == 0o600 and mode(Ws.run_dir) == 0o700
