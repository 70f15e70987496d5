"""A training log rotated under the reader (create style: the file moved aside, a new one made) is read
on: every step once, and the bytes read are what the two files hold."""

from __future__ import annotations

import os

from backend.train.reader import TrainLogReader


def _steps(a: int, b: int) -> str:
    return "".join(f"step {s}: {{'loss': {5 - s / 100:.3f}, 'acc_0': 0.5, 'lr': 0.0001}}\n" for s in range(a, b))


def test_every_step_once_and_the_bytes_of_both_files_across_a_create_rotation(tmp_path):
    log = tmp_path / "train.log"
    first, second = _steps(1, 41), _steps(41, 101)
    log.write_text(first)
    reader = TrainLogReader(log)
    got = list(reader.poll().records)
    os.rename(log, tmp_path / "train.log.1")
    log.write_text(second)
    while True:
        before = reader.stats.bytes_read
        chunk = reader.poll()
        assert not chunk.reset
        got.extend(chunk.records)
        if reader.stats.bytes_read == before:
            break
    got.extend(reader.flush())
    assert [r.step for r in got] == list(range(1, 101))
    assert reader.stats.bytes_read == len(first) + len(second)
