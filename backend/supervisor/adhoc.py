"""Jobs started from the dashboard: process specs that are not in the workspace file.

The workspace's ``[[process]]`` tables are one source of specs; a job built from a form (a
regeneration with its inputs, servers and output) is another.  Each such job is saved as
``<run dir>/.jobs/<name>.json`` (its spec plus a small ``meta`` dict, e.g. the output path)
before it starts, and the runtime adds these specs to the workspace's, so after a dashboard
restart the supervisor still knows the job: it re-adopts the running process by pid and create
time like any other, and a finished job can be started again (a resume) with the same argv.

Files are written whole to a temporary name and renamed.  A file that cannot be read is skipped
with a warning naming it; the others still load.  Deleting a job's file (while it is not running)
forgets it at the next config reload or dashboard start.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from backend.filemodes import make_private_dirs
from backend.readcap import CONFIG_JSON_MAX, load_json_capped
from specdeck_types.process import ProcessSpec

log = logging.getLogger(__name__)

JOBS_DIR = ".jobs"


@dataclass(frozen=True)
class AdhocJob:
    spec: ProcessSpec
    meta: dict[str, Any] = field(default_factory=dict)
    created_at: float = 0.0

    @property
    def name(self) -> str:
        return self.spec.name


def _dir(run_dir: str | os.PathLike[str]) -> Path:
    return Path(run_dir) / JOBS_DIR


def save_job(run_dir: str | os.PathLike[str], spec: ProcessSpec, meta: dict[str, Any] | None = None) -> AdhocJob:
    """Write (or replace) the job ``spec.name``; returns what was saved."""
    d = _dir(run_dir)
    make_private_dirs(d)
    job = AdhocJob(spec, dict(meta or {}), time.time())
    text = json.dumps({"spec": json.loads(spec.to_json()), "meta": job.meta, "created_at": job.created_at},
                      indent=2, sort_keys=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{spec.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, d / f"{spec.name}.json")
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return job


def load_jobs(run_dir: str | os.PathLike[str]) -> list[AdhocJob]:
    """Every saved job, oldest first."""
    jobs = []
    d = _dir(run_dir)
    if not d.is_dir():
        return []
    for p in sorted(d.glob("*.json")):
        try:
            obj = load_json_capped(p, CONFIG_JSON_MAX, "a job file")
            jobs.append(AdhocJob(ProcessSpec.from_dict(obj["spec"]), dict(obj.get("meta") or {}),
                                 float(obj.get("created_at") or 0.0)))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("%s: not a job file, skipped: %s", p, exc)
    return sorted(jobs, key=lambda j: j.created_at)
