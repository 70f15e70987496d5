"""What the tiny trainer prints and records, in SpecForge Gen-2's shapes (reference §2.1, §2.4).

* :class:`Bar` draws tqdm's default bar to a stream that is not a terminal, redraw by redraw, each after
  a carriage return: ``Training Epoch 0:  27%|██▋       | 4/15 [00:01<00:02,  3.52it/s, loss=…, acc=…,
  acceptance_rate=…, time=0.28s, grad_norm=…]``.  Like ``for batch in tqdm(…)`` with ``set_postfix`` in the
  loop body it draws once when created, once as each iteration starts (the count of the iterations done)
  and once more when the postfix is set, and ends with a newline.  Log lines written while it is open
  follow the bar on the same line, as they do under SpecForge.
* :func:`setup_logger`: ``2026-11-30 12:00:00,123 - INFO - message`` lines on the same stream.
* :func:`print_args`: SpecForge's ``-----------【args】-----------`` block of ``name ····· value`` lines.
* :class:`TensorboardWriter`: scalar events in ``<output_dir>/runs/events.out.tfevents.*`` (TFRecord
  framing with masked CRC-32C around ``Event`` protocol buffers), the file ``SummaryWriter`` writes.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import sys
import time
from pathlib import Path
from typing import TextIO

from backend.train.trackers import masked_crc

_BLOCKS = " ▏▎▍▌▋▊▉█"
BAR_WIDTH = 10


def format_interval(seconds: float) -> str:
    """tqdm's ``mm:ss`` / ``h:mm:ss``."""
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h:d}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


def _bar(frac: float) -> str:
    frac = min(max(frac, 0.0), 1.0)
    eighths = int(frac * BAR_WIDTH * 8)
    full, part = divmod(eighths, 8)
    s = "█" * full
    if full < BAR_WIDTH:
        s += _BLOCKS[part] if part else ""
    return s.ljust(BAR_WIDTH)


class Bar:
    """tqdm's bar for ``total`` iterations, starting at ``initial`` (a resume within the epoch)."""

    def __init__(self, desc: str, total: int, stream: TextIO, *, initial: int = 0, smoothing: float = 0.3,
                 clock=time.monotonic):
        self.desc, self.total, self.n, self.stream, self.clock = desc, total, initial, stream, clock
        self.start = self._last_t = clock()
        self._last_n = initial
        self._rate: float | None = None  # iterations per second, exponentially smoothed as tqdm does
        self._smoothing = smoothing
        self.postfix = ""
        self._last_len = 0
        self.draw()

    def _line(self) -> str:
        elapsed = self.clock() - self.start
        rate = self._rate
        pct = 100.0 * self.n / self.total if self.total else 0.0
        if rate:
            inv = 1.0 / rate
            rate_s = f"{inv:5.2f}s/it" if inv > 1 else f"{rate:5.2f}it/s"
            remaining = format_interval((self.total - self.n) / rate)
        else:
            rate_s, remaining = "?it/s", "?"
        post = f", {self.postfix}" if self.postfix else ""
        return (f"{self.desc}: {pct:3.0f}%|{_bar(self.n / self.total if self.total else 0)}| {self.n}/{self.total} "
                f"[{format_interval(elapsed)}<{remaining}, {rate_s}{post}]")

    def draw(self) -> None:
        s = self._line()
        self.stream.write("\r" + s + " " * max(self._last_len - len(s), 0))
        self.stream.flush()
        self._last_len = len(s)

    def update(self, n: int = 1) -> None:
        self.n += n
        now = self.clock()
        dt = now - self._last_t
        if dt > 0:
            inst = (self.n - self._last_n) / dt
            a = self._smoothing
            self._rate = inst if self._rate is None else a * inst + (1 - a) * self._rate
            self._last_t, self._last_n = now, self.n
        self.draw()

    def set_postfix(self, values: dict[str, str]) -> None:
        self.postfix = ", ".join(f"{k}={v}" for k, v in values.items())
        self.draw()

    def close(self) -> None:
        self.draw()
        self.stream.write("\n")
        self.stream.flush()


def setup_logger(stream: TextIO) -> logging.Logger:
    log = logging.getLogger("backend.flows.tiny")
    log.handlers.clear()
    h = logging.StreamHandler(stream)
    h.setFormatter(logging.Formatter("%(asctime)s - %(levelname)s - %(message)s"))
    log.addHandler(h)
    log.setLevel(logging.INFO)
    log.propagate = False
    return log


def print_args(args: dict, stream: TextIO = sys.stdout) -> None:
    lines = ["", " -----------【args】-----------"]
    for k in sorted(args):
        lines.append(f"{k} {'·' * max(3, 32 - len(k))} {args[k]}")
    stream.write("\n".join(lines) + "\n")
    stream.flush()


# -- TensorBoard ----------------------------------------------------------------------------------

def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field_bytes(num: int, data: bytes) -> bytes:
    return _varint(num << 3 | 2) + _varint(len(data)) + data


def encode_event(wall_time: float, step: int | None = None, scalars: dict[str, float] | None = None,
                 file_version: str | None = None) -> bytes:
    buf = _varint(1 << 3 | 1) + struct.pack("<d", wall_time)
    if step is not None:
        buf += _varint(2 << 3 | 0) + _varint(step)
    if file_version is not None:
        buf += _field_bytes(3, file_version.encode())
    if scalars:
        summary = b"".join(
            _field_bytes(1, _field_bytes(1, tag.encode()) + _varint(2 << 3 | 5) + struct.pack("<f", value))
            for tag, value in scalars.items())
        buf += _field_bytes(5, summary)
    return buf


class TensorboardWriter:
    def __init__(self, log_dir: Path, clock=time.time):
        log_dir.mkdir(parents=True, exist_ok=True)
        self.clock = clock
        name = f"events.out.tfevents.{int(clock())}.{socket.gethostname()}.{os.getpid()}.0"
        self.path = log_dir / name
        self._f = open(self.path, "ab")
        self._write(encode_event(clock(), file_version="brain.Event:2"))

    def _write(self, body: bytes) -> None:
        head = struct.pack("<Q", len(body))
        self._f.write(head + struct.pack("<I", masked_crc(head)) + body + struct.pack("<I", masked_crc(body)))
        self._f.flush()

    def log(self, scalars: dict[str, float], step: int) -> None:
        self._write(encode_event(self.clock(), step, scalars))

    def close(self) -> None:
        self._f.close()
