"""When a process started: the half of its identity that tells it apart from a
later process given the same pid.

A start is the kernel's start ticks of the process (``/proc/<pid>/stat``, which
never change) counted from this boot's *reference* boot time.  psutil's
``create_time()`` counts them from the boot time as Linux gives it: whole seconds
of the wall clock, recomputed at each read, so a step of the clock (NTP, a
resumed VM, ``date -s``) moves every create time read afterwards by a second or
more, and a supervisor that recorded its child's create time before the step
would take its own child for a stranger and never signal it.

The reference is the boot time the first process of this boot to ask read; it
is kept in a file named by the kernel's boot id (in ``/dev/shm``, emptied at each
boot, else the temp folder), so the wrapper, the dashboard and the command line
all count from the same moment however the clock moves afterwards.  Starts stay
wall-clock values, so a process of another boot never matches one of this boot,
and identities recorded earlier as psutil create times still match while the
clock has not been stepped.  Without ``/proc`` a start is psutil's create time.
"""

from __future__ import annotations

import os
import tempfile
import threading

TOLERANCE_S = 0.05

_HAS_PROC_STAT = os.path.exists("/proc/self/stat")
_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_BOOT_ID = "/proc/sys/kernel/random/boot_id"
_REF_DIRS = ("/dev/shm", tempfile.gettempdir())
_ref: float | None = None
_ref_lock = threading.Lock()


def _boot_id() -> str | None:
    try:
        with open(_BOOT_ID, encoding="ascii") as f:
            return f.read().strip() or None
    except OSError:
        return None


def _read_ref(path: str) -> float | None:
    """The reference in ``path``, when the file is ours and holds a number."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    try:
        if os.fstat(fd).st_uid != os.geteuid():
            return None  # another user's file: not a reference to trust
        return float(os.read(fd, 64).decode("ascii"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None
    finally:
        os.close(fd)


def _store_ref(path: str, value: float) -> float | None:
    """Record ``value`` at ``path`` unless a reference is there already; the reference now there."""
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}"
    try:
        with open(tmp, "x", encoding="ascii") as f:
            f.write(repr(value))
        try:
            os.link(tmp, path)  # atomic: the first process of this boot wins
        except FileExistsError:
            pass
    except OSError:
        return None
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass
    return _read_ref(path)


def boot_reference() -> float:
    """This boot's reference boot time (see the module text)."""
    global _ref
    if _ref is not None:
        return _ref
    import psutil

    with _ref_lock:
        if _ref is None:
            boot_id = _boot_id()
            found = None
            if boot_id is not None:
                name = f"specdeck-boot-{os.geteuid()}-{boot_id}"
                for d in _REF_DIRS:
                    path = os.path.join(d, name)
                    found = _read_ref(path)
                    if found is None and os.path.isdir(d) and os.access(d, os.W_OK):
                        found = _store_ref(path, psutil.boot_time())
                    if found is not None:
                        break
            _ref = found if found is not None else psutil.boot_time()
        return _ref


def proc_stat(pid: int) -> tuple[bytes, float] | None:
    """(state letter, start) from one read of ``/proc/<pid>/stat``; state ``X``
    when there is no such process; None without ``/proc``."""
    if not _HAS_PROC_STAT:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return (b"X", 0.0)
    try:
        # the command name may hold spaces and parentheses: fields start after the last ')'
        fields = data[data.rfind(b")") + 2 :].split()
        return fields[0], boot_reference() + int(fields[19]) / _CLK_TCK
    except (IndexError, ValueError):
        return None


def start_of(pid: int) -> float | None:
    """The start of the process now holding ``pid``, or None when there is none."""
    st = proc_stat(pid)
    if st is not None:
        state, start = st
        return None if state in (b"X", b"x") else start
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except (psutil.Error, ValueError):
        return None


def same_start(recorded: float | None, observed: float | None) -> bool:
    """Whether two starts are the same moment (both known)."""
    return recorded is not None and observed is not None and abs(recorded - observed) <= TOLERANCE_S
