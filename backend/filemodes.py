"""Private modes for what Specdeck writes into a workspace: files 0600, folders 0700.

A workspace holds what no other account on the machine should read: the state database (audit log,
benchmark results, processes' argv), process logs (prompts, paths, tokens printed by a server), run
files (each process's argv and environment, which may carry keys), regeneration outputs (the training
data) and the workspace file itself.  Under the usual umask (022) every one of them would be
world-readable, so Specdeck gives each file and folder it creates its mode explicitly rather than
trusting the umask (which can still only take bits away).

Only what Specdeck creates gets these modes.  A folder that is already there is left as it is (an
``outputs_dir`` pointing at a user's own folder keeps its mode), except for folders that only Specdeck
makes and that earlier versions created 0755: :func:`tighten_dir` takes group and other access away
from those (``logs/``, ``run/``, the state database), and only when this user owns them.

Programs Specdeck starts keep their own umask: their files (checkpoints, SGLang's caches) are theirs.

Standard library only: the supervisor's wrapper imports this module.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import IO, Any

PRIVATE_FILE = 0o600
PRIVATE_DIR = 0o700

_FLAGS = {
    "a": os.O_WRONLY | os.O_CREAT | os.O_APPEND,
    "w": os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
    "x": os.O_WRONLY | os.O_CREAT | os.O_EXCL,
}


def make_private_dirs(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` and any missing parents, each 0700 (as ``mkdir -p`` would, with that mode);
    folders already there are left as they are.  ``FileExistsError`` when a file is in the way."""
    p = Path(path)
    try:
        os.mkdir(p, PRIVATE_DIR)
    except FileNotFoundError:
        if p.parent == p:
            raise
        make_private_dirs(p.parent)
        try:
            os.mkdir(p, PRIVATE_DIR)
        except FileExistsError:
            if not p.is_dir():
                raise
    except FileExistsError:
        if not p.is_dir():
            raise
    return p


def tighten(path: str | os.PathLike[str], mode: int) -> bool:
    """Take away the permission bits that ``mode`` lacks from ``path``, if this user owns it and it is
    not a symlink (a link may point at a folder that is not Specdeck's); never adds a bit.  True when
    the mode changed."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    if stat.S_ISLNK(st.st_mode) or st.st_uid != os.geteuid():
        return False
    now = stat.S_IMODE(st.st_mode)
    want = now & mode
    if want == now:
        return False
    try:
        os.chmod(path, want)
    except OSError:
        return False
    return True


def tighten_dir(path: str | os.PathLike[str]) -> bool:
    """:func:`tighten` a folder Specdeck made to 0700 (a folder an earlier version left 0755)."""
    return tighten(path, PRIVATE_DIR)


def tighten_file(path: str | os.PathLike[str]) -> bool:
    """:func:`tighten` a file Specdeck made to 0600 (the state database an earlier version left 0644)."""
    return tighten(path, PRIVATE_FILE)


def open_private(path: str | os.PathLike[str], mode: str = "ab", **kwargs: Any) -> IO[Any]:
    """``open(path, mode)`` that creates a missing file 0600 (``a``, ``w`` or ``x`` modes, text or
    binary); an existing file keeps its mode.  ``kwargs`` go to :func:`os.fdopen` (buffering,
    encoding, newline)."""
    kind = mode.replace("b", "").replace("t", "")
    if kind not in _FLAGS:
        raise ValueError(f"open_private: mode {mode!r} does not write (use a, w or x)")
    fd = os.open(path, _FLAGS[kind] | getattr(os, "O_CLOEXEC", 0), PRIVATE_FILE)
    try:
        return os.fdopen(fd, mode, **kwargs)
    except BaseException:
        os.close(fd)
        raise


def create_private(path: str | os.PathLike[str]) -> bool:
    """Create ``path`` empty and 0600 unless something is there already; True when it was created."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), PRIVATE_FILE)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def write_private(path: str | os.PathLike[str], data: str | bytes, *, encoding: str = "utf-8",
                  fsync: bool = False) -> None:
    """Write ``data`` to ``path`` whole, through a 0600 temporary file in the same folder renamed over
    it: a reader sees the old file or the new one, never part of either, and the new one is 0600."""
    p = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode(encoding) if isinstance(data, str) else data)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
