"""Training logs in a folder: what the Training page overlays when it is given a folder (a workspace of
its own, a run's folder) rather than a log."""

from __future__ import annotations

from pathlib import Path

from backend.train.logparse import BadTrainLine, parse_line

HEAD_BYTES = 256 * 1024  # how much of a file is read to tell whether it is a training log
MAX_LOGS = 20
TRAINING_KINDS = frozenset(("metrics", "progress", "total_steps", "start", "resume"))


def looks_like_training_log(path: Path) -> bool:
    """Whether the head of ``path`` holds a line of a training run (a bar, a metrics line, SpecForge's
    start-up lines)."""
    try:
        with open(path, "rb") as f:
            head = f.read(HEAD_BYTES).decode("utf-8", "replace")
    except OSError:
        return False
    for seg in head.replace("\r", "\n").split("\n"):
        if not seg.strip():
            continue
        try:
            if any(r.kind in TRAINING_KINDS for r in parse_line(seg)):
                return True
        except BadTrainLine:
            continue
    return False


def training_logs(folder: Path, *, limit: int = MAX_LOGS) -> list[Path]:
    """The training logs of ``folder``: its ``*.log`` files and those of its ``logs/`` folder (a workspace's
    runs write ``logs/<name>.log``), by name, at most ``limit``."""
    found: list[Path] = []
    for d in (folder, folder / "logs"):
        try:
            files = sorted(p for p in d.glob("*.log") if p.is_file())
        except OSError:
            continue
        for p in files:
            if looks_like_training_log(p):
                found.append(p)
                if len(found) >= limit:
                    return found
    return found


def overlay_label(log: Path) -> str:
    """A short name for a log overlaid by path: its stem and the folder it belongs to (the workspace's, for
    ``<workspace>/logs/<name>.log``)."""
    parent = log.parent
    if parent.name == "logs" and parent.parent.name:
        parent = parent.parent
    return f"{log.stem} · {parent.name}" if parent.name else log.stem
