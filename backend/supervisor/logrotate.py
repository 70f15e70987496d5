"""The log file of one managed process, written by its wrapper and rotated by it.

The wrapper reads the child's stdout and stderr from a pipe and writes them
through :class:`RotatingLog`, which:

- rotates by size, numbered as logrotate numbers them: ``NAME`` is the live
  file, ``NAME.1`` the one before it, up to ``NAME.<keep>`` (older ones are
  removed).  A rotation happens at a line end when one comes within
  :data:`OVERSHOOT` bytes of the limit, so a line is split across two files
  only when it is longer than that;
- notices an outside rotation: before each write it checks that the name
  still points to the file it holds open (same inode).  When ``logrotate``
  (``create`` style) or a person moved the file away, the log is reopened by
  name, so what comes next goes to the new file, not to the moved one.

Readers follow both (:mod:`backend.supervisor.logtail`): a file moved aside
is read to its end before the file that follows it, which is
:func:`successor_name` of its name.

Standard library only: the wrapper imports this module.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

from backend.filemodes import open_private
from specdeck_types.process import LOG_KEEP, LOG_MAX_BYTES

OVERSHOOT = 1024 * 1024  # how far past the size limit a line is finished before the file is rotated anyway


def rotated_path(path: str | os.PathLike[str], n: int) -> Path:
    """The name of the ``n``-th older file of the log at ``path`` (1 is the newest of them)."""
    return Path(f"{os.fspath(path)}.{n}")


def successor_name(path: str | os.PathLike[str], moved: str | os.PathLike[str]) -> Path:
    """The file written after the one now named ``moved`` (a file moved aside from ``path``).

    In the numbered scheme ``NAME.2`` is followed by ``NAME.1`` and ``NAME.1``
    by ``NAME``; a file moved under any other name (``NAME-20250101``,
    ``NAME.old``) is followed by ``NAME``.
    """
    base = os.fspath(path)
    m = re.fullmatch(re.escape(os.path.basename(base)) + r"\.(\d+)", os.path.basename(os.fspath(moved)))
    if m and int(m.group(1)) > 1:
        return rotated_path(base, int(m.group(1)) - 1)
    return Path(base)


class RotatingLog:
    """Append-only writer of one log file, rotating it by size and reopening it
    when the name was moved to another file.  Thread-safe."""

    def __init__(self, path: str | os.PathLike[str], max_bytes: int = LOG_MAX_BYTES, keep: int = LOG_KEEP):
        self.path = Path(path)
        self.max_bytes = max(0, int(max_bytes))  # 0: never rotate
        self.keep = max(1, int(keep))
        self.rotations = 0  # rotations done here
        self.reopened = 0  # times the name was found pointing elsewhere and the log reopened
        self.dropped = 0  # bytes that could not be written (the error is in last_error)
        self.last_error: str | None = None
        self._lock = threading.Lock()
        self._f = None
        self._ino = -1
        self._size = 0
        self._ends_nl = True
        self._open()

    # -- the file --------------------------------------------------------------

    def _open(self) -> None:
        f = open_private(self.path, "ab", buffering=0)  # 0600: a log holds prompts and paths
        st = os.fstat(f.fileno())
        self._f, self._ino, self._size = f, st.st_ino, st.st_size
        self._ends_nl = True
        if st.st_size:
            with open(self.path, "rb") as r:
                if os.fstat(r.fileno()).st_ino == st.st_ino:
                    r.seek(st.st_size - 1)
                    self._ends_nl = r.read(1) == b"\n"

    def _close(self) -> None:
        f, self._f = self._f, None
        if f is not None:
            f.close()

    def _check_name(self) -> None:
        """Reopen by name when the name no longer points to the open file."""
        try:
            ino = os.stat(self.path).st_ino
        except FileNotFoundError:
            ino = None
        if ino != self._ino:
            self._close()
            self._open()
            self.reopened += 1

    def _rotate(self) -> bool:
        """NAME.<keep-1> → NAME.<keep>, …, NAME → NAME.1, then a new NAME.  False (and
        the live file kept) when the files cannot be renamed."""
        try:
            for n in range(self.keep - 1, 0, -1):
                try:
                    os.replace(rotated_path(self.path, n), rotated_path(self.path, n + 1))
                except FileNotFoundError:
                    pass
            os.replace(self.path, rotated_path(self.path, 1))
        except OSError as exc:
            self.last_error = f"could not rotate {self.path}: {exc}"
            return False
        self._close()
        self._open()
        self.rotations += 1
        return True

    def _put(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            n = self._f.write(view)
            view = view[n:]
            self._size += n
        self._ends_nl = data.endswith(b"\n")

    # -- writing -------------------------------------------------------------

    @property
    def size(self) -> int:
        """Bytes in the live file."""
        with self._lock:
            return self._size

    def write(self, data: bytes) -> None:
        """Append ``data``, rotating or reopening first where needed.  A write that
        fails (a full disk) is counted in :attr:`dropped`, never raised: the child's
        output keeps being read either way."""
        if not data:
            return
        with self._lock:
            try:
                self._check_name()
                self._write(data)
            except OSError as exc:
                self.dropped += len(data)
                self.last_error = str(exc)
                if self._f is None:
                    try:
                        self._open()
                    except OSError:
                        pass

    def begin_line(self) -> None:
        """Make the next write start on a fresh line."""
        with self._lock:
            if not self._ends_nl:
                try:
                    self._check_name()
                    if not self._ends_nl:
                        self._put(b"\n")
                except OSError as exc:
                    self.last_error = str(exc)

    def _write(self, data: bytes) -> None:
        limit = self.max_bytes
        while data:
            if self._f is None:
                self._open()
            if not limit:
                self._put(data)
                return
            if self._size >= limit and (self._ends_nl or self._size >= limit + OVERSHOOT):
                if not self._rotate():
                    self._put(data)  # keep the output in the live file rather than lose it
                    return
            if self._size < limit:
                room = limit - self._size
                if len(data) <= room:
                    self._put(data)
                    return
                nl = data.rfind(b"\n", 0, room)
                if nl >= 0:  # the lines that fit, then a new file for the next one
                    self._put(data[:nl + 1])
                    data = data[nl + 1:]
                    if not self._rotate():
                        self._put(data)
                        return
                    continue
                if self._size and self._ends_nl:  # the next line does not fit: it starts the next file
                    if not self._rotate():
                        self._put(data)
                        return
                    continue
            # the line in hand runs past the limit: finish it (up to OVERSHOOT past the limit)
            most = limit + OVERSHOOT - self._size
            nl = data.find(b"\n", 0, most)
            cut = nl + 1 if nl >= 0 else min(len(data), most)
            self._put(data[:cut])
            data = data[cut:]

    def close(self) -> None:
        with self._lock:
            self._close()
