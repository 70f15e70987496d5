"""Reads with a size cap: no file the dashboard opens to show or inspect costs more memory than its cap.

The files a page reads are named by whoever can write into a model folder, a checkpoint folder or an
output path, so their size is not ours to choose: a checkpoint folder with a 1 GB ``config.json`` took
the dashboard from 0.46 to 2.18 GB of memory through one ``read_text``.  Every such read goes through
here and reads at most ``limit + 1`` bytes, whatever ``stat`` says (a file may grow between the
``stat`` and the read, and ``/proc`` files report size 0):

* :func:`read_text_capped` / :func:`read_bytes_capped`: text to show, cut at the cap; the result says
  whether it was cut, so the page can say so;
* :func:`read_bytes_whole` / :func:`load_json_capped`: a file that is only useful whole (JSON, a
  benchmark file): over the cap it is not read at all and :class:`TooLarge` names the file, its size
  and the cap (``…/config.json: 1.0 GiB, over the 16 MiB read limit for a model config; not read``);
* :func:`readline_capped`: one line of a JSONL file, at most the cap, the rest of a longer line
  skipped without keeping it (:func:`skip_line`).

A FIFO or socket is refused rather than read: opening one for reading would wait for a writer.

The caps below are far above any real file of each kind and far below what hurts a dashboard that
holds a few of them at once.  Standard library only: the supervisor's wrapper and the command line
use the same caps.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from typing import IO, Any

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

# A model's config.json is kilobytes (a large MoE's a few hundred KB with its quantisation table);
# model.safetensors.index.json of a 1T model is a few MB; best_meta.json, job and state files are small.
CONFIG_JSON_MAX = 16 * MiB
# tokenizer.json of a 256k-vocabulary model is 20-35 MB.
TOKENIZER_JSON_MAX = 64 * MiB
# The safetensors header of a real checkpoint is a few hundred KB at most; its 8-byte length prefix is
# checked against this before anything is allocated.
SAFETENSORS_HEADER_MAX = 100 * MiB
# torch.save's data.pkl of a training state holds only the structure (storages are separate entries).
TORCH_PICKLE_MAX = 64 * MiB
# A benchmark file is kilobytes; a console log with many reports a few megabytes.
BENCH_FILE_MAX = 64 * MiB
# One row of a regeneration output (an input line is at most 8 MiB, plus the regenerated answer), or one
# snapshot of a progress log.
JSONL_ROW_MAX = 16 * MiB
# A metrics file read whole (an MLflow metric file: ~30 bytes per logged step).
METRICS_FILE_MAX = 64 * MiB
# A one-line marker file (version.txt, a job's control file, a Gen-3 ``-latest`` link file).
SMALL_TEXT_MAX = 64 * KiB

_CHUNK = 1 * MiB


class TooLarge(ValueError):
    """A file over its read cap, left unread; the message names the file, its size and the cap."""

    def __init__(self, path: str | os.PathLike[str], size: int | None, limit: int, what: str = ""):
        self.path = os.fspath(path)
        self.size = size
        self.limit = limit
        self.what = what
        super().__init__(too_large_message(self.path, size, limit, what))


def size_text(n: int) -> str:
    """``1.0 GiB``, ``16 MiB``, ``512 KiB``, ``900 bytes``: whole units without decimals."""
    for unit, name in ((GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB")):
        if n >= unit:
            return f"{n // unit} {name}" if n % unit == 0 else f"{n / unit:.1f} {name}"
    return f"{n:,} bytes"


def too_large_message(path: str | os.PathLike[str], size: int | None, limit: int, what: str = "") -> str:
    how_big = size_text(size) if size is not None else "larger than that"
    cap = f"the {size_text(limit)} read limit" + (f" for {what}" if what else "")
    return f"{os.fspath(path)}: {how_big}, over {cap}; not read"


def cut_note(path: str | os.PathLike[str], size: int | None, limit: int) -> str:
    """What a page shows under text that was cut at ``limit``."""
    of = f" of {size_text(size)}" if size is not None and size > limit else ""
    return f"{os.fspath(path)}: only the first {size_text(limit)}{of} read (the read limit)"


def _open(path: str | os.PathLike[str]) -> tuple[IO[bytes], int]:
    """The file opened for reading and its size; a FIFO or socket is refused (it would block)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if stat.S_ISFIFO(st.st_mode) or stat.S_ISSOCK(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file (a pipe or socket)", os.fspath(path))
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "is a folder", os.fspath(path))
        f = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    return f, st.st_size


def _read_at_most(f: IO[bytes], n: int) -> bytes:
    """Up to ``n`` bytes, in chunks, so a short count never asks for one huge buffer it may not fill."""
    parts: list[bytes] = []
    left = n
    while left > 0:
        got = f.read(min(_CHUNK, left))
        if not got:
            break
        parts.append(got)
        left -= len(got)
    return b"".join(parts)


def read_bytes_capped(path: str | os.PathLike[str], limit: int) -> tuple[bytes, bool]:
    """The first ``limit`` bytes of ``path`` and whether there were more (never more than ``limit + 1``
    bytes read).  ``OSError`` as ``open`` raises it."""
    if limit < 0:
        raise ValueError(f"limit must be 0 or more, got {limit}")
    f, _ = _open(path)
    with f:
        data = _read_at_most(f, limit + 1)
    if len(data) > limit:
        return data[:limit], True
    return data, False


def utf8_cut(data: bytes) -> int:
    """Length of the longest prefix of ``data`` that does not end inside a UTF-8 sequence."""
    n = len(data)
    i = n - 1
    while i >= 0 and n - i <= 4 and (data[i] & 0xC0) == 0x80:
        i -= 1
    if i < 0 or n - i > 4:
        return n
    lead = data[i]
    need = 4 if lead >= 0xF0 else 3 if lead >= 0xE0 else 2 if lead >= 0xC0 else 1
    return i if n - i < need else n


def read_text_capped(path: str | os.PathLike[str], limit: int, *, encoding: str = "utf-8",
                     errors: str = "replace") -> tuple[str, bool]:
    """The text of ``path`` up to ``limit`` bytes and whether it was cut there (a cut never splits a
    UTF-8 character).  Bad bytes become U+FFFD unless ``errors`` says otherwise."""
    data, cut = read_bytes_capped(path, limit)
    if cut and encoding.replace("-", "").lower() in ("utf8", "utf8sig"):
        data = data[:utf8_cut(data)]
    return data.decode(encoding, errors), cut


def read_bytes_whole(path: str | os.PathLike[str], limit: int, what: str = "") -> bytes:
    """All of ``path``, or :class:`TooLarge` (nothing read) when it is over ``limit`` bytes.

    The size is taken from ``stat`` first; a file that says it is small but is not (it grew, or it is
    a device or a ``/proc`` file) is stopped at ``limit + 1`` bytes all the same."""
    f, size = _open(path)
    with f:
        if size > limit:
            raise TooLarge(path, size, limit, what)
        data = _read_at_most(f, limit + 1)
    if len(data) > limit:
        raise TooLarge(path, None if size <= limit else size, limit, what)
    return data


def read_text_whole(path: str | os.PathLike[str], limit: int, what: str = "", *, encoding: str = "utf-8") -> str:
    """:func:`read_bytes_whole` decoded strictly (``UnicodeDecodeError`` on bad bytes, as ``read_text``)."""
    return read_bytes_whole(path, limit, what).decode(encoding)


def load_json_capped(path: str | os.PathLike[str], limit: int = CONFIG_JSON_MAX, what: str = "") -> Any:
    """``json.loads`` of the whole file, which must be at most ``limit`` bytes (:class:`TooLarge` names
    file and cap otherwise).  ``OSError``, ``UnicodeDecodeError`` and ``json.JSONDecodeError`` as the
    plain reads raise them, so callers keep their own messages for those."""
    return json.loads(read_text_whole(path, limit, what))


def readline_capped(f: IO[bytes], limit: int) -> tuple[bytes, int, bool]:
    """The next line of ``f``, its full length in bytes and whether it ended with a newline (not the
    end of the file).

    A line longer than ``limit`` is returned as its first ``limit`` bytes and the rest of it is read
    past in 1 MiB pieces without being kept: its length is then more than ``limit``.  The newline is
    part of the line and of its length.  ``(b"", 0, False)`` at the end of the file."""
    line = f.readline(limit + 1)
    if len(line) <= limit or line.endswith(b"\n"):
        return line, len(line), line.endswith(b"\n")
    passed, ended = skip_line(f)
    return line[:limit], len(line) + passed, ended


def skip_line(f: IO[bytes]) -> tuple[int, bool]:
    """Read past the rest of the current line (its newline included) in 1 MiB pieces, keeping none of
    it: the number of bytes passed and whether a newline ended them (not the end of the file).  ``f``
    is left just after the newline, or at the end of the file."""
    n = 0
    while True:
        more = f.read(_CHUNK)
        if not more:
            return n, False
        i = more.find(b"\n")
        if i >= 0:
            f.seek(i + 1 - len(more), os.SEEK_CUR)
            return n + i + 1, True
        n += len(more)
