"""TensorBoard event files (TFRecord + Event protobuf, encoded here by hand) and MLflow file-store runs."""

from __future__ import annotations

import struct

import pytest

from backend.train.trackers import TensorboardReader, crc32c, read_mlflow_run


def _crc32c_bitwise(data: bytes) -> int:
    c = 0xFFFFFFFF
    for b in data:
        c ^= b
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 & -(c & 1))
    return c ^ 0xFFFFFFFF


def _masked(data: bytes) -> int:
    c = _crc32c_bitwise(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(n: int) -> bytes:
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def _ld(field: int, payload: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def scalar_event(wall: float, step: int, values: list[tuple[str, float]], tensor: bool = False) -> bytes:
    summary = b""
    for tag, x in values:
        if tensor:  # TensorProto: dtype DT_FLOAT (1), tensor_content 4 bytes
            val = _ld(1, tag.encode()) + _ld(8, _varint(1 << 3 | 0) + _varint(1) + _ld(4, struct.pack("<f", x)))
        else:  # simple_value, field 2, fixed32
            val = _ld(1, tag.encode()) + _varint(2 << 3 | 5) + struct.pack("<f", x)
        summary += _ld(1, val)
    return (_varint(1 << 3 | 1) + struct.pack("<d", wall) + _varint(2 << 3 | 0) + _varint(step)
            + _ld(5, summary))


def frame(body: bytes) -> bytes:
    head = struct.pack("<Q", len(body))
    return head + struct.pack("<I", _masked(head)) + body + struct.pack("<I", _masked(body))


def version_event() -> bytes:
    return _varint(1 << 3 | 1) + struct.pack("<d", 1.0) + _ld(3, b"brain.Event:2")


def test_crc32c_check_value():
    assert crc32c(b"123456789") == 0xE3069283  # the standard CRC-32C check value


def test_scalars_incrementally(tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    f = runs / "events.out.tfevents.1700000000.host.123.0"
    e1 = frame(scalar_event(1700000001.5, 10, [("train/acc_0", 0.5), ("train/lr", 0.0001)]))
    e2 = frame(scalar_event(1700000002.5, 20, [("eval/avg_loss", 2.25)], tensor=True))
    f.write_bytes(frame(version_event()) + e1 + e2[:7])  # the second event is being written
    tb = TensorboardReader(runs)
    got = tb.poll()
    assert [(r.step, r.split, r.wall_time) for r in got] == [(10, "train", 1700000001.5)]
    assert got[0].metrics == {"acc_0": 0.5, "lr": pytest.approx(0.0001)}
    with open(f, "ab") as fh:
        fh.write(e2[7:])
    got = tb.poll()
    assert [(r.step, r.split, r.metrics) for r in got] == [(20, "eval", {"loss": 2.25})]
    assert tb.stats.events == 3 and tb.poll() == []


def test_bad_value_and_corrupt_record(tmp_path):
    f = tmp_path / "events.out.tfevents.1.h"
    good = frame(scalar_event(1.0, 1, [("train/acc_0", 1.5), ("train/ploss_0", 0.75)]))
    bad = bytearray(frame(scalar_event(2.0, 2, [("train/acc_0", 0.5)])))
    bad[-6] ^= 0xFF  # flip a byte of the data: its CRC no longer matches
    f.write_bytes(good + bytes(bad))
    tb = TensorboardReader(tmp_path)
    got = tb.poll()
    assert [r.metrics for r in got] == [{"ploss_0": 0.75}]
    assert got[0].rejected == ("acc_0: 1.5 is outside 0..1",)
    assert tb.stats.broken_files == 1
    assert any("data CRC mismatch" in k for k in tb.stats.problems)


def test_mlflow_file_store(tmp_path):
    m = tmp_path / "metrics"
    (m / "train").mkdir(parents=True)
    (m / "train" / "acc_0").write_text("1700000000000 0.5 10\n1700000060000 0.6 20\n")
    (m / "train" / "lr").write_text("1700000000000 0.0001 10\nbroken line\n1700000060000 nan 20\n")
    recs, problems = read_mlflow_run(tmp_path)
    assert [(r.step, r.split, r.metrics, r.wall_time) for r in recs] == [
        (10, "train", {"acc_0": 0.5, "lr": 0.0001}, 1700000000.0), (20, "train", {"acc_0": 0.6}, 1700000060.0)]
    assert len(problems) == 2
    assert problems[0].endswith("lr:2: expected 'timestamp value step', found 'broken line'")
    assert "lr:3: lr: nan is not a finite number" in problems[1]


def test_find_tracker_files(tmp_path):
    from backend.train.trackers import find_tracker_files

    out_dir = tmp_path / "out"
    (out_dir / "runs" / "x").mkdir(parents=True)
    (out_dir / "runs" / "x" / "events.out.tfevents.1.host").write_bytes(b"")
    (out_dir / "swanlog").mkdir()
    cwd = tmp_path / "repo"
    (cwd / "mlruns" / "0" / "abc" / "metrics").mkdir(parents=True)
    (cwd / "wandb" / "offline-run-20260101_000000-xyz").mkdir(parents=True)
    found = [(f.kind, f.path.relative_to(tmp_path).as_posix(), f.readable) for f in find_tracker_files(out_dir, cwd)]
    assert found == [("tensorboard", "out/runs", True), ("swanlab", "out/swanlog", False),
                     ("mlflow", "repo/mlruns/0/abc", True),
                     ("wandb", "repo/wandb/offline-run-20260101_000000-xyz", False)]
    assert find_tracker_files(tmp_path / "empty") == []


def test_files_written_by_a_real_tensorboard_writer(tmp_path):
    """tensorboardX writes the same event files as torch's SummaryWriter, which SpecForge uses: its scalars
    come back with their steps (the tensor form of a scalar is covered by the hand-encoded test above).
    A resumed run writes a second file into the same folder; the next poll reads only what is new."""
    import time

    from tensorboardX import SummaryWriter

    runs = tmp_path / "runs"
    w = SummaryWriter(logdir=str(runs))
    w.add_scalar("train/acc_0", 0.5, 10)
    w.add_scalar("train/ploss_0", 1.25, 10)
    w.close()  # its writer thread writes the queued events by close at the latest
    tb = TensorboardReader(runs)
    assert [(r.step, r.split, r.metrics) for r in tb.poll()] == [(10, "train", {"acc_0": 0.5}),
                                                               (10, "train", {"ploss_0": 1.25})]
    t0 = time.time()
    w = SummaryWriter(logdir=str(runs), filename_suffix=".resumed")
    w.add_scalar("eval/avg_loss", 2.25, 20)
    w.add_scalar("train/lr", 0.0001, 20)
    w.close()
    got = tb.poll()
    assert [(r.step, r.split) for r in got] == [(20, "eval"), (20, "train")]
    assert got[0].metrics == {"loss": 2.25} and got[1].metrics["lr"] == pytest.approx(0.0001)
    assert all(r.wall_time >= t0 - 1 for r in got)
    assert len(tb.files) == 2 and tb.stats.broken_files == 0 and tb.poll() == []
