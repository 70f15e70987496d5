"""Wake-ups when a log file changes (watchdog), for the monitor's refresh loop."""

from __future__ import annotations

import os
import threading
from pathlib import Path


class FileWatcher:
    """Sets ``event`` whenever watchdog reports a change to ``path``.

    Watches the file's directory (so a file created later, or replaced, is still
    seen), and also wakes on changes to the names beside it that begin with its
    name (``NAME.1``, ``NAME-20250101``): a rotated log may still be written
    under its new name, and readers follow it there.  ``start()`` returns False when watching is impossible (missing
    directory, no inotify); callers then rely on their polling timer.
    """

    def __init__(self, path: str | Path, event: threading.Event):
        self.path = Path(path).resolve()
        self.event = event
        self._observer = None

    def start(self) -> bool:
        try:
            from watchdog.events import FileSystemEventHandler
            from watchdog.observers import Observer
        except ImportError:
            return False
        target = str(self.path)
        wake = self.event

        def ours(p) -> bool:
            p = os.fsdecode(p) if p else ""
            return p == target or (p.startswith(target) and len(p) > len(target))

        class _Handler(FileSystemEventHandler):
            def on_any_event(self, ev):  # noqa: N802 (watchdog's name)
                if ours(ev.src_path) or ours(getattr(ev, "dest_path", None)):
                    wake.set()

        if not self.path.parent.is_dir():
            return False
        try:
            obs = Observer()
            obs.schedule(_Handler(), str(self.path.parent), recursive=False)
            obs.daemon = True
            obs.start()
        except Exception:
            return False
        self._observer = obs
        return True

    @property
    def active(self) -> bool:
        return self._observer is not None and self._observer.is_alive()

    def stop(self) -> None:
        obs, self._observer = self._observer, None
        if obs is not None:
            obs.stop()
            obs.join(timeout=5)
