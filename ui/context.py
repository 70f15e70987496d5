"""How a page gets the backend: the runtime of the selected workspace (:func:`runtime`, which also
gates the page), who asks (:func:`actor`), and the dashboard process's start-up settings."""

from __future__ import annotations

import gc
import os
import threading

from backend.train import gcpin
from ui.auth import actor, runtime

__all__ = ["actor", "freeze_startup", "limit_malloc_arenas", "runtime"]

_FROZEN = threading.Lock()
_frozen = False


def freeze_startup() -> bool:
    """Once per dashboard process, after its first full script run: move everything allocated so far (the
    libraries, the workspace's runtime, the first page's modules) out of the garbage collector's reach with
    ``gc.freeze()``.  Streamlit makes a full collection after every script run, and an open tab's live parts
    rerun every few seconds: that collection walked every object the dashboard holds (about 170 ms of CPU a
    run, nearly all of an open tab's cost).  Objects freed by their reference counts are still freed; only
    reference cycles among what was allocated before the freeze are kept.  Not under AppTest (its runtime is a
    stand-in), where the test process's objects must stay collectable.  True when this call froze."""
    global _frozen
    from streamlit import runtime as st_runtime

    if _frozen or not st_runtime.exists() or not isinstance(st_runtime.get_instance(), st_runtime.Runtime):
        return False
    with _FROZEN:
        if _frozen:
            return False
        gc.collect()  # what start-up left as garbage goes first, not into the frozen set
        gc.freeze()
        _frozen = True
        gcpin.enable()  # the Training page's readers pin what they read from now on (backend.train.gcpin)
    return True


STATIC_CHUNK_BYTES = 8 << 20


def serve_static_files_whole(chunk: int = STATIC_CHUNK_BYTES) -> bool:
    """Once per dashboard process: the server sends a static file (the browser's code) in pieces of up to
    ``chunk`` bytes, not 64 KiB.  Each piece costs the server's event loop a few handovers of Python's lock,
    and a page's script run holds that lock between them: Streamlit's plotly code (4.7 MB, 72 pieces), asked
    for by the browser while the page's script was still running, came in 1.40 s instead of 0.02 s; in two
    pieces it came in 0.06 s.  The pages' script runs are the time a first chart waits for that code.  True
    when this call set it."""
    from starlette.responses import FileResponse

    if FileResponse.chunk_size >= chunk:
        return False
    FileResponse.chunk_size = chunk  # a class attribute the library reads per response
    return True


MALLOC_ARENAS = 2
SET_BY_SCRIPT = "SPECDECK_MALLOC_ARENA_MAX_SET"
_ARENAS = threading.Lock()
_arenas_set: bool | None = None


def limit_malloc_arenas(n: int = MALLOC_ARENAS) -> bool:
    """Once per dashboard process: let glibc's malloc keep at most ``n`` arenas.  By default it makes up to
    eight per core, one for each of the server's threads that allocates while another does, and memory freed
    in one is not reused by the others: with three tabs open on the demo the dashboard's malloc heap held a
    flat 139 MB in use while its free but kept part grew 14 -> 23 MB in 7 minutes and its resident memory
    1.4 MB a minute; with two arenas from the process's start the free part stayed at 11 MB and the resident
    memory flat (441.1 -> 441.5 MB from the second minute on).

    scripts/dashboard sets ``MALLOC_ARENA_MAX`` for the process's start, marked by ``SPECDECK_MALLOC_ARENA_MAX_SET``:
    both are taken out of the environment here (before any process is started), so that the servers and jobs
    the dashboard starts keep glibc's default.  Started otherwise (``streamlit run app.py``),
    ``mallopt(M_ARENA_MAX)`` sets it now: the arenas already made stay and the limit stops new ones (+0.83 MB
    a minute against +1.31 on the same soak).  True when this call set it."""
    global _arenas_set
    with _ARENAS:
        if _arenas_set is not None:
            return False
        _arenas_set = False
        if os.environ.pop(SET_BY_SCRIPT, None):
            os.environ.pop("MALLOC_ARENA_MAX", None)  # glibc read it at the start; not for the children
            return False
        if os.environ.get("MALLOC_ARENA_MAX"):
            return False  # the user's own setting, read by glibc at the start
        try:
            import ctypes

            libc = ctypes.CDLL("libc.so.6")
            _arenas_set = bool(libc.mallopt(-8, int(n)))  # M_ARENA_MAX is -8 in glibc's malloc.h
        except (OSError, AttributeError):
            pass  # not glibc (macOS, musl): nothing to set
    return bool(_arenas_set)
