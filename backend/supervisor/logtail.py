"""Read a growing log file by byte offset.

:func:`read_tail` is the one primitive: given an offset (and the inode seen
last time) it returns the new complete lines, the offset to ask for next,
and flags for truncation (the file got shorter than the offset: read again
from 0) and rotation.  It never splits a UTF-8 character or returns a
half-written last line when it can avoid it, and decodes bad bytes with
U+FFFD instead of failing.

A rotated log is followed without losing or repeating a line
(:func:`open_source`): when the name points to another file, the file read
so far is looked for among the names beside it (``NAME.1``, ``NAME.2``,
``NAME-20250101``: the file keeps its inode when it is renamed) and read to
its end; only once the file after it (:func:`~backend.supervisor.logrotate.successor_name`)
holds data, which means its writer has moved on, does reading go on in that
file from its start (``followed``).  A writer that keeps writing to the
moved file (a program whose log was rotated ``create``-style under it) is
followed there for as long as the new file stays empty.  Only when the old
file cannot be found (deleted, compressed) is the new one read from 0 with
``rotated`` set: something may be missing.

An unchanged file costs one ``stat``; new bytes cost a read of only those
bytes (at most ``max_bytes``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from backend.readcap import utf8_cut
from backend.supervisor.logrotate import successor_name

DEFAULT_MAX_BYTES = 64 * 1024
_BLOCK = 64 * 1024


@dataclass(frozen=True)
class TailChunk:
    text: str  # complete lines read (decoded with errors='replace')
    offset: int  # pass this back next time
    inode: int | None  # pass this back next time, to detect rotation
    truncated: bool = False  # the file shrank below the offset; read from 0
    rotated: bool = False  # the path names a different file and the old one is gone; read from 0
    skipped: int = 0  # bytes jumped over to stay within max_bytes
    missing: bool = False  # the file does not exist (yet)
    followed: bool = False  # the old file was rotated and read to its end; this text comes from the next one

    @property
    def reset(self) -> bool:
        """True when earlier text no longer belongs with this text."""
        return self.truncated or self.rotated

    @property
    def flags(self) -> frozenset[str]:
        names = ("truncated", "rotated", "missing", "followed")
        out = {n for n in names if getattr(self, n)}
        if self.skipped:
            out.add("skipped")
        return frozenset(out)


@dataclass
class Source:
    """The file to read next and from where (see :func:`open_source`).  ``file`` is
    open (None when ``missing``); the caller closes it."""

    file: BinaryIO | None
    inode: int | None
    size: int
    offset: int
    truncated: bool = False
    rotated: bool = False
    followed: bool = False
    final: bool = False  # a file moved aside whose writer has moved on: read it to its very end
    missing: bool = False

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


def _open(path: str | os.PathLike[str]) -> tuple[BinaryIO, os.stat_result] | None:
    try:
        f = open(path, "rb")
    except (FileNotFoundError, NotADirectoryError):
        return None
    return f, os.fstat(f.fileno())


def find_moved(path: str | os.PathLike[str], inode: int) -> Path | None:
    """The name beside ``path`` (``NAME.1``, ``NAME-20250101`` …) under which the file
    with ``inode`` now lies, or None."""
    p = Path(path)
    base = p.name
    try:
        entries = list(os.scandir(p.parent))
    except OSError:
        return None
    for e in entries:
        if len(e.name) > len(base) and e.name.startswith(base):
            try:
                if e.stat(follow_symlinks=False).st_ino == inode:
                    return Path(e.path)
            except OSError:
                continue
    return None


def open_source(path: str | os.PathLike[str], offset: int, inode: int | None) -> Source:
    """Which file holds the bytes after ``offset`` of the file ``inode`` that was read at ``path``.

    The file at ``path`` when it is that file (or when ``inode`` is None); the
    same file under the name it was moved to while it may still grow or has
    bytes left; then the file after it, from 0 (``followed``).
    """
    offset = max(0, int(offset))
    cur = _open(path)
    if inode is None or (cur is not None and cur[1].st_ino == inode):
        if cur is None:
            return Source(None, inode, 0, offset, missing=True)
        f, st = cur
        truncated = st.st_size < offset
        return Source(f, st.st_ino, st.st_size, 0 if truncated else offset, truncated=truncated)
    moved = find_moved(path, inode)
    old = _open(moved) if moved is not None else None
    if old is None or old[1].st_ino != inode:
        if old is not None:
            old[0].close()
        if cur is None:
            return Source(None, inode, 0, offset, missing=True)
        f, st = cur
        return Source(f, st.st_ino, st.st_size, 0, rotated=True)
    of, _ = old
    # The file after the old one is looked at before the old one's size is: once it holds
    # data its writer has finished with the old file, so the old file's size read after
    # that is final.
    succ_path = successor_name(path, moved)
    if succ_path == Path(path):
        succ = cur
    else:
        if cur is not None:
            cur[0].close()
        succ = _open(succ_path)
    try:
        still = os.stat(moved).st_ino == inode
    except OSError:
        still = False
    ost = os.fstat(of.fileno())
    final = succ is not None and succ[1].st_size > 0 and still
    if ost.st_size > offset or not final:
        if succ is not None:
            succ[0].close()
        if ost.st_size < offset:  # the moved file shrank: it is not the text read so far
            of.close()
            got = _open(path)
            if got is None:
                return Source(None, inode, 0, offset, missing=True)
            return Source(got[0], got[1].st_ino, got[1].st_size, 0, rotated=True)
        return Source(of, inode, ost.st_size, offset, final=final)
    of.close()
    sf, sst = succ
    return Source(sf, sst.st_ino, sst.st_size, 0, followed=True)


def read_tail(
    path: str | os.PathLike[str],
    offset: int = 0,
    max_bytes: int = DEFAULT_MAX_BYTES,
    *,
    inode: int | None = None,
    skip_ahead: bool = True,
    partial: bool = False,
) -> TailChunk:
    """Read what was appended to ``path`` since ``offset``.

    ``skip_ahead``: when more than ``max_bytes`` are new, return only the
    newest ``max_bytes`` (starting at a line boundary) and report how many
    bytes were skipped; otherwise return the oldest ``max_bytes`` so that a
    reader that must see every line (a readiness pattern) catches up over
    several calls.  ``partial``: also return an unfinished last line (the
    unfinished end of a rotated file is always returned once its writer has
    moved on).  The returned ``offset`` and ``inode`` may name a file that was
    moved aside (see the module text): pass them back as they are.
    """
    if max_bytes <= 0:
        raise ValueError(f"max_bytes must be positive, got {max_bytes}")
    offset = max(0, int(offset))
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    if st is None and inode is None:
        return TailChunk("", offset, inode, missing=True)
    if st is not None and inode == st.st_ino and st.st_size == offset:
        return TailChunk("", offset, inode)  # the common case: nothing new
    src = open_source(path, offset, inode)
    if src.missing:
        return TailChunk("", offset, inode, missing=True)
    with src.file as f:
        truncated, rotated, followed = src.truncated, src.rotated, src.followed
        offset, size = src.offset, src.size
        if size <= offset:
            return TailChunk("", offset, src.inode, truncated, rotated, followed=followed)
        start, skipped = offset, 0
        if size - offset > max_bytes and skip_ahead:
            start = size - max_bytes
            skipped = start - offset
        f.seek(start)
        data = f.read(min(size - start, max_bytes))
        head = 0
        if skipped:
            # Jumped into the middle of a line: begin at the next line.
            f.seek(start - 1)
            if f.read(1) != b"\n":
                nl = data.find(b"\n")
                if nl >= 0:
                    head = nl + 1
        end = len(data)
        if not data.endswith(b"\n"):
            nl = data.rfind(b"\n", head)
            if src.final and start + len(data) == size:
                pass  # the end of a file that gets no more bytes: all of it
            elif nl >= 0:
                end = nl + 1
            elif partial or len(data) >= max_bytes:
                # One line longer than the budget: hand it out in pieces,
                # but never split a character.
                end = head + utf8_cut(data[head:])
            else:
                end = head  # wait for the writer to finish the line
        text = data[head:end].decode("utf-8", errors="replace")
        return TailChunk(text, start + end, src.inode, truncated, rotated, skipped + head, followed=followed)


CUT_KEEP = 4096  # bytes shown of a line longer than read_last's max_bytes
_SCAN_LIMIT = 64 * 1024 * 1024  # how far back read_last looks for the start of a long line


def cut_marker(length: int, shown: int) -> str:
    return f" [... cut: this line has {length:,} bytes; its first {shown:,} are shown]"


def read_last(path: str | os.PathLike[str], n: int, *, max_bytes: int = 4 * 1024 * 1024,
              scan_limit: int = _SCAN_LIMIT) -> TailChunk:
    """The last ``n`` complete lines of ``path``, with the offset and inode to tail from.

    At most ``max_bytes`` of line text are read, newest line first.  A line
    longer than ``max_bytes`` does not hide the lines before it: it is shown
    as its first :data:`CUT_KEEP` bytes and a marker, and the walk goes on
    (its start is looked for up to ``scan_limit`` bytes back).  An
    unfinished last line is left for the next tail, unless it alone is
    longer than ``max_bytes``; then it is shown cut like a long line.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return TailChunk("", 0, None, missing=True)
    with f:
        st = os.fstat(f.fileno())
        size = end = st.st_size
        if size:
            f.seek(size - 1)
            if f.read(1) != b"\n":
                end = _last_newline_end(f, size, max_bytes)
                if end == 0 and size > max_bytes:
                    end = size  # one unfinished line longer than the budget: show it, cut
        if n == 0 or end == 0:
            return TailChunk("", end, st.st_ino)
        f.seek(end - 1)
        back = _Backwards(f)
        out: list[bytes] = []
        budget = max_bytes
        for start, body_end, whole in _last_spans(back, end, f.read(1) == b"\n", n, scan_limit):  # newest first
            length = body_end - start
            if length > max_bytes or not whole:
                if whole:
                    head = back.read(start, start + CUT_KEEP)
                    head = head[:utf8_cut(head)]
                    out.append(head + cut_marker(length, len(head)).encode())
                else:
                    out.append(f"[... cut: a line longer than {scan_limit:,} bytes; its end is shown] ".encode()
                               + _tail_piece(f, body_end))
                continue
            if length > budget:
                break
            budget -= length
            out.append(back.read(start, body_end))
        keep = list(reversed(out))
        text = b"\n".join(keep).decode("utf-8", errors="replace") + "\n" if keep else ""
        return TailChunk(text, end, st.st_ino)


def _tail_piece(f, end: int) -> bytes:
    start = max(0, end - CUT_KEEP)
    f.seek(start)
    data = f.read(end - start)
    # never begin inside a character
    i = 0
    while i < min(3, len(data)) and (data[i] & 0xC0) == 0x80:
        i += 1
    return data[i:]


class _Backwards:
    """Finds newlines going backwards through a file, reading each block once."""

    def __init__(self, f):
        self.f = f
        self.lo = 0
        self.buf = b""  # the file's bytes from self.lo

    def rfind_newline(self, hi: int, floor: int) -> int:
        """Position of the last newline in [floor, hi), or -1."""
        if not self.lo <= hi <= self.lo + len(self.buf):
            self.lo, self.buf = hi, b""
        top = hi - self.lo
        while True:
            i = self.buf.rfind(b"\n", max(0, floor - self.lo), top)
            if i >= 0:
                return self.lo + i
            if self.lo <= floor:
                return -1
            step = min(_BLOCK, self.lo - floor)
            self.f.seek(self.lo - step)
            block = self.f.read(step)
            if len(self.buf) > 4 * _BLOCK:
                # What was searched holds no newline: keep only the new block.
                self.buf, top = block, len(block)
            else:
                self.buf = block + self.buf[:top]
                top = len(self.buf)
            self.lo -= step

    def read(self, start: int, stop: int) -> bytes:
        if self.lo <= start and stop <= self.lo + len(self.buf):
            return self.buf[start - self.lo : stop - self.lo]
        self.f.seek(start)
        return self.f.read(stop - start)


def _last_spans(back: _Backwards, end: int, ends_with_newline: bool, n: int,
                scan_limit: int) -> list[tuple[int, int, bool]]:
    """(start, end of text, start_found) of the last ``n`` lines ending at
    ``end``, newest first (the text excludes the newline).  The start of a
    line more than ``scan_limit`` bytes long is not looked for further back."""
    spans: list[tuple[int, int, bool]] = []
    stop = end - 1 if ends_with_newline else end  # only the newest line may lack its newline
    while len(spans) < n and stop >= 0:
        floor = max(0, stop - scan_limit)
        nl = back.rfind_newline(stop, floor)
        if nl >= 0:
            spans.append((nl + 1, stop, True))
            stop = nl
        else:
            spans.append((floor, stop, floor == 0))
            break
    return spans


def _last_newline_end(f, size: int, max_bytes: int) -> int:
    pos = size
    while pos > 0 and size - pos < max_bytes:
        step = min(_BLOCK, pos)
        pos -= step
        f.seek(pos)
        nl = f.read(step).rfind(b"\n")
        if nl >= 0:
            return pos + nl + 1
    return 0


def last_lines(path: str | os.PathLike[str], n: int) -> list[str]:
    """The last ``n`` complete lines of ``path`` as strings."""
    return read_last(path, n).text.splitlines()


class LogTailer:
    """Follow one log file: each :meth:`read` returns what was appended since
    the previous call, across truncation and rotation.

    >>> t = LogTailer("server.log")
    >>> chunk = t.read()
    >>> chunk.text, chunk.reset
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        offset: int = 0,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        skip_ahead: bool = False,
    ):
        self.path = Path(path)
        self.offset = offset
        self.inode: int | None = None
        self.max_bytes = max_bytes
        self.skip_ahead = skip_ahead
        if offset:
            try:
                self.inode = os.stat(self.path).st_ino
            except FileNotFoundError:
                self.inode = None

    def read(self) -> TailChunk:
        chunk = read_tail(self.path, self.offset, self.max_bytes, inode=self.inode, skip_ahead=self.skip_ahead)
        self.offset, self.inode = chunk.offset, chunk.inode
        return chunk
