"""Who is left in a process group: what a stop waits on before it calls a group empty.

Used by the wrapper (leftovers of a child that ended) and by anything that ends a
process group it started, before it reaps the leader (whose pid is the group id).
"""

from __future__ import annotations

import os


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes in group ``pgid``, leader excluded."""
    out: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        entries = None
    if entries is not None:
        for entry in entries:
            if not entry.isdigit() or int(entry) == pgid:
                continue
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    data = f.read()
                fields = data[data.rfind(b")") + 2 :].split()
                if int(fields[2]) == pgid and fields[0] not in (b"Z", b"X", b"x"):
                    out.append(int(entry))
            except (OSError, IndexError, ValueError):
                continue
        return out
    import psutil

    for proc in psutil.process_iter():
        try:
            if proc.pid != pgid and os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                out.append(proc.pid)
        except (OSError, psutil.Error):
            continue
    return out
