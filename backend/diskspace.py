"""Free space of the folders jobs write to, and a full disk said plainly.

:func:`low_space` checks folders (the workspace's outputs folder, a job's folder) against a
threshold: ``min_free_bytes`` when given, else ``SPECDECK_MIN_FREE_GB`` from the environment
(gigabytes, fractions allowed), else :data:`DEFAULT_MIN_FREE_GB`.  A folder that does not exist
yet is checked at its nearest existing parent, where its files will land.

:func:`disk_error` turns an ``OSError`` of a write into the sentence a page or a command line
shows: ``no space left on device in PATH`` for ENOSPC (``disk quota exceeded in PATH`` for
EDQUOT), else the error's own words with its file.

Standard library only: the pages, the command line and the jobs all use it.
"""

from __future__ import annotations

import errno
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

ENV = "SPECDECK_MIN_FREE_GB"
DEFAULT_MIN_FREE_GB = 5.0
GB = 1024 ** 3
FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


@dataclass(frozen=True)
class Space:
    """One folder's file system: where it was measured, free and total bytes, the threshold."""

    path: Path  # the folder asked about
    measured_at: Path  # the folder (or its nearest existing parent) measured
    free: int
    total: int
    min_free: int

    @property
    def low(self) -> bool:
        return self.free < self.min_free

    def describe(self) -> str:
        return (f"{self.path}: {gib(self.free)} free of {gib(self.total)} "
                f"(the alert is below {gib(self.min_free)}; set {ENV} to change it)")


def gib(n: int | float) -> str:
    return f"{n / GB:.1f} GiB"


def min_free_bytes(value: float | None = None, environ: dict[str, str] | None = None) -> int:
    """The threshold in bytes: ``value`` (GB), else ``SPECDECK_MIN_FREE_GB``, else the default.
    An unreadable or negative setting falls back to the default."""
    if value is None:
        raw = (os.environ if environ is None else environ).get(ENV, "").strip()
        try:
            value = float(raw) if raw else DEFAULT_MIN_FREE_GB
        except ValueError:
            value = DEFAULT_MIN_FREE_GB
        if not value >= 0:  # also NaN
            value = DEFAULT_MIN_FREE_GB
    return int(max(0.0, value) * GB)


def _existing(path: Path) -> Path:
    p = Path(path).absolute()
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def space(path: Path, min_free: int | None = None) -> Space | None:
    """The free space where ``path``'s files land; None when it cannot be measured."""
    at = _existing(Path(path))
    try:
        usage = shutil.disk_usage(at)
    except OSError:
        return None
    return Space(Path(path), at, int(usage.free), int(usage.total),
                 min_free_bytes() if min_free is None else int(min_free))


def low_space(paths, min_free: int | None = None) -> list[Space]:
    """The folders of ``paths`` with less free space than the threshold, one per file system."""
    out: list[Space] = []
    seen: set[int] = set()
    for path in paths:
        s = space(Path(path), min_free)
        if s is None or not s.low:
            continue
        try:
            dev = os.stat(s.measured_at).st_dev
        except OSError:
            dev = hash(str(s.measured_at))
        if dev not in seen:
            seen.add(dev)
            out.append(s)
    return out


def is_full(exc: BaseException) -> bool:
    """Whether ``exc`` is a write that failed because the disk (or quota) is full."""
    return isinstance(exc, OSError) and exc.errno in FULL_ERRNOS


def disk_error(exc: OSError, where: Path | str | None = None) -> str:
    """The error as a page or a command line says it.  ``where`` is the folder (or file) written,
    used when the error does not name one."""
    name = exc.filename if exc.filename is not None else where
    if exc.errno == errno.ENOSPC:
        return f"no space left on device in {_folder(name)}" if name is not None else "no space left on device"
    if exc.errno == errno.EDQUOT:
        return f"disk quota exceeded in {_folder(name)}" if name is not None else "disk quota exceeded"
    why = exc.strerror or str(exc)
    return f"{why}: {name}" if name is not None else why


def _folder(name) -> Path:
    """The folder of a file written (a temporary name beside it included), or the folder itself."""
    p = Path(os.fsdecode(name))
    return p if p.is_dir() else p.parent
