"""Files a wrapper leaves in the workspace run dir, one folder per process.

``launch.json``   what to run (written by the supervisor before spawning)
``identity.json`` the child's pid and create time, the wrapper's pid, run id
``exit.json``     the child's exit code (negative: signal) and end time, and
                  how many leftovers of its process group the wrapper ended

Each is written whole to a temporary name and renamed, so a reader sees
either nothing or a complete file.  Every file carries the run id, so a
file left over from an earlier run is never mistaken for the current one.

The folder and the files are 0600/0700 (:mod:`backend.filemodes`): launch.json
holds the argv and environment, which may carry keys.

Standard library only: the wrapper imports this module.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from backend.filemodes import make_private_dirs, write_private
from backend.readcap import CONFIG_JSON_MAX, load_json_capped


@dataclass(frozen=True)
class RunPaths:
    dir: Path

    @classmethod
    def for_name(cls, run_dir: str | os.PathLike[str], name: str) -> "RunPaths":
        return cls(Path(run_dir) / name)

    @property
    def launch(self) -> Path:
        return self.dir / "launch.json"

    @property
    def identity(self) -> Path:
        return self.dir / "identity.json"

    @property
    def exit(self) -> Path:
        return self.dir / "exit.json"

    def clear(self) -> None:
        """Remove the previous run's files (before a new start)."""
        make_private_dirs(self.dir)
        for p in (self.launch, self.identity, self.exit):
            try:
                p.unlink()
            except FileNotFoundError:
                pass


@dataclass(frozen=True)
class Identity:
    run_id: str
    pid: int
    create_time: float | None
    wrapper_pid: int
    wrapper_create_time: float | None
    started_at: float
    log_offset: int  # where the child's own output begins in the log


@dataclass(frozen=True)
class ExitRecord:
    run_id: str
    exit_code: int | None  # negative: killed by that signal
    ended_at: float
    pid: int | None
    error: str = ""  # set when the child could not be started at all
    leftovers: int = 0  # members of the child's process group still alive after it ended
    leftovers_killed: int = 0  # of those, how many were still there after the grace period (SIGKILL)


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    make_private_dirs(path.parent)
    write_private(path, json.dumps(data, sort_keys=True), fsync=True)


def read_json(path: Path) -> dict[str, Any] | None:
    """The file's object, or None if it is missing, not a JSON object or over the read limit."""
    try:
        data = load_json_capped(path, CONFIG_JSON_MAX)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (ValueError, OSError):
        return None
    return data if isinstance(data, dict) else None


def write_identity(paths: RunPaths, ident: Identity) -> None:
    write_json_atomic(paths.identity, asdict(ident))


def write_exit(paths: RunPaths, rec: ExitRecord) -> None:
    write_json_atomic(paths.exit, asdict(rec))


def read_identity(paths: RunPaths, run_id: str | None) -> Identity | None:
    data = read_json(paths.identity)
    if not data or data.get("run_id") != run_id:
        return None
    try:
        return Identity(**data)
    except TypeError:
        return None


def read_exit(paths: RunPaths, run_id: str | None) -> ExitRecord | None:
    """The exit record of run ``run_id``; one failed ``open`` when there is none."""
    data = read_json(paths.exit)
    if not data or data.get("run_id") != run_id:
        return None
    try:
        return ExitRecord(**data)
    except TypeError:
        return None
