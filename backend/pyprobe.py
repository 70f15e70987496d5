"""Asking another Python interpreter about itself: the version strings it reports, and ending a probe
that hangs.  Shared by every domain that probes a serving or training environment (SGLang's version,
SpecForge's generation)."""

from __future__ import annotations

import os
import re
import signal
import subprocess


def parse_version(text: str) -> tuple[int, ...]:
    """``'0.5.3.post3'`` → ``(0, 5, 3)``; ``'0.5.10rc1'`` → ``(0, 5, 10)``.

    Raises ValueError when the text does not start with a dotted number.
    """
    m = re.match(r"^\s*v?(\d+(?:\.\d+)*)", text or "")
    if not m:
        raise ValueError(f"not a version: {text!r}")
    return tuple(int(p) for p in m.group(1).split("."))



def end_probe_group(proc: subprocess.Popen) -> None:
    """SIGTERM to a probe subprocess's process group (started with start_new_session), a short grace, then SIGKILL."""
    for sig, grace in ((signal.SIGTERM, 2.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except OSError:
            break
        try:
            proc.communicate(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue
