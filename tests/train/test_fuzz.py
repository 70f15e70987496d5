"""Fuzz: thousands of mutated real training lines through the parser and the reader.  No exception
escapes; every line is counted exactly once (parsed, ignored or unparsed with a reason); every value
kept is finite and in its range.  Seeded, so a failure reproduces."""

from __future__ import annotations

import math
import random
import re

from backend.train.logparse import BadTrainLine, check_value, parse_line
from backend.train.reader import TrainLogReader
from tests.train.test_logparse import GEN3
from tests.train.test_reader import GEN2_RESUMED

SEED = 20261130
N_LINES = 4000

REAL = [line for line in re.split(r"\r|\n", GEN2_RESUMED) if line.strip()] + [
    GEN3,
    "Train Epoch [6/6], position 0,  Acc: 0.68",
    "Eval Epoch [1/6], position 2, pLoss: 0.49",
    "Training Epoch 0:  27%|▌ | 457/1667 [09:28<21:09,  1.05s/it, loss=1.11, acc=0.34]",
    "Training:  10%|█         | 100/1000 [01:00<09:00,  1.67step/s]",
    "step 1000: {'eval/avg_loss': 2.2, 'eval/simulated_acc_len': 1.9, 'eval/per_position_acc': [0.7, 0.5]}",
    "[rank0]: 2026-03-20 10:00:01,250 - INFO - Eval - Step 50 [51/10], position 1,  Acc: 0.45",
    "Training completed at step 16670, saving final checkpoint...",
]
_NUM = re.compile(r"[0-9]+(?:\.[0-9]+)?")
WEIRD = ["-1", "nan", "inf", "-inf", "1e999", "１２", "٣", "9" * 40, "99999999999999999999999", "", "1.2.3",
         "0x10", "+3", " 7", "1e-400", "-0.0", "00001"]


def mutate(rng: random.Random, line: str) -> str:
    op = rng.randrange(8)
    if op == 0:
        nums = list(_NUM.finditer(line))
        if nums:
            m = rng.choice(nums)
            return line[:m.start()] + rng.choice(WEIRD) + line[m.end():]
    if op == 1:
        return line[:rng.randrange(len(line) + 1)]
    if op == 2:
        i = rng.randrange(len(line) + 1)
        return line[:i] + rng.choice(["{", "}", "[", "]", "'", ":", ",", "|", "\x1b[A", "\ufffd", "=", "%"]) + line[i:]
    if op == 3:
        i = rng.randrange(len(line) + 1)
        return line[:i] + line[i:][::-1]
    if op == 4:
        return line * rng.randrange(2, 4)
    if op == 5:
        return rng.choice(["[rank3]: ", "rank 1: ", "2026-01-01 00:00:00 ", ""]) + line
    if op == 6:
        b = bytearray(line.encode())
        for _ in range(rng.randrange(1, 4)):
            if b:
                b[rng.randrange(len(b))] = rng.randrange(256)
        return b.decode("utf-8", "replace")
    return line


def lines() -> list[str]:
    rng = random.Random(SEED)
    out = []
    for _ in range(N_LINES):
        line = rng.choice(REAL)
        for _ in range(rng.randrange(1, 3)):
            line = mutate(rng, line)
        out.append(line.replace("\r", " ").replace("\n", " "))
    return out


def _check_record(r) -> None:
    for name, v in r.metrics.items():
        assert isinstance(v, float) and math.isfinite(v), (name, v)
        assert check_value(name, v) == v
    for v in (r.step, r.epoch, r.position):
        assert v is None or (isinstance(v, int) and 0 <= v <= 10 ** 12)


def test_parse_line_never_raises_anything_else():
    bad = 0
    for line in lines():
        try:
            recs = parse_line(line)
        except BadTrainLine as exc:
            assert str(exc)
            bad += 1
            continue
        for r in recs:
            _check_record(r)
    assert bad > 100  # the mutations do reach the error paths


BARS = [
    "Training Epoch 0:  27%|▌ | 457/1667 [09:28<21:09,  1.05s/it, loss=1.11, acc=0.34, acceptance_rate=0.52, "
    "time=1.05s, grad_norm=0.87]",
    "Training Epoch 12:  99%|█████████▉| 1666/1667 [1:02:03<00:01,  2.00s/it, loss=0.5, acc=0.9]",
    "Training:  10%|█         | 100/1000 [01:00<09:00,  1.67step/s, loss=2.3, acc_0=0.61]",
    "Evaluating Epoch 3: 100%|██████████| 10/10 [00:05<00:00,  2.00it/s, avg_loss=1.2]",
    "Training Epoch 0:   0%|          | 0/1667 [00:00<?, ?it/s]",
    "Training: 1000step [10:00, 1.67step/s]",
]


def test_a_plain_bar_reads_the_same_by_the_short_path_and_the_general_one():
    """Bar redraws, most of a log, are read without the general path's tests for prefixes, timestamps
    and other shapes; mutated bars (rank words, timestamps, ANSI, glued text, dicts, odd numbers and clocks)
    must give the same records, or the same refusal, either way."""
    from backend.train.logparse import _parse_any

    rng = random.Random(SEED + 1)
    short = 0
    for k in range(6000):
        line = rng.choice(BARS)
        for _ in range(rng.randrange(0, 3)):
            line = mutate(rng, line)
        if k % 5 == 0:
            line += rng.choice([" rank 2: x", " step 3: {'loss': 1.0}", " 2026-01-01 00:00:00 Saved model configuration to /x",
                                "Eval - Step 5 [6/1], position 0,  Acc: 0.5", "   ", "]"])
        line = line.replace("\r", " ").replace("\n", " ")
        outcomes = []
        for read in (parse_line, _parse_any):
            try:
                outcomes.append([r.to_dict() for r in read(line)])
            except BadTrainLine as exc:
                outcomes.append(f"refused: {exc}")
        assert outcomes[0] == outcomes[1], line
        short += line.startswith(("Training", "Evaluating"))
    assert short > 3000  # the short path was tried on most lines


def test_reader_counts_every_line(tmp_path):
    data = lines()
    log = tmp_path / "fuzz.log"
    log.write_text("\n".join(data) + "\n", encoding="utf-8")
    r = TrainLogReader(log, keep_unparsed=N_LINES)
    recs = r.read_all()
    st = r.stats
    non_empty = sum(1 for line in data if line.strip())
    assert st.lines == non_empty
    assert st.parsed + st.ignored + st.unparsed == st.lines
    assert st.unparsed == len([u for u in r.unparsed if not u.reason.startswith("value dropped")])
    assert all(u.reason and 1 <= u.line_no <= len(data) for u in r.unparsed)
    assert not any(u.reason.startswith("parser error") for u in r.unparsed)
    for rec in recs:
        _check_record(rec)


def test_nested_dict_bomb_is_a_reason_not_a_crash():
    import pytest

    for body in ("{'a': " + "[" * 5000 + "]" * 5000 + "}", "{'a': " + "(" * 150 + ")" * 150 + "}",
                 "{" + ", ".join(f"'k{i}': {i}" for i in range(3000)) + "}"):
        with pytest.raises(BadTrainLine):
            parse_line("step 1: " + body)


def test_tensorboard_reader_on_damaged_files(tmp_path):
    from backend.train.trackers import TensorboardReader
    from tests.train.test_trackers import frame, scalar_event

    good = b"".join(frame(scalar_event(1.0 + i, i, [("train/acc_0", 0.5), ("train/loss", 2.0)])) for i in range(40))
    rng = random.Random(SEED)
    for n in range(150):
        data = bytearray(good)
        for _ in range(rng.randrange(1, 6)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        if n % 3 == 0:
            data = data[:rng.randrange(len(data))]
        d = tmp_path / f"r{n}"
        d.mkdir()
        (d / "events.out.tfevents.1.h").write_bytes(bytes(data))
        tb = TensorboardReader(d)
        for rec in tb.poll():
            _check_record(rec)
        assert tb.stats.events <= 40


def test_training_state_reader_on_damaged_pickles(tmp_path):
    import pickle
    import zipfile

    from backend.train.torchstate import StateReadError, read_training_state

    good = pickle.dumps({"epoch": 1, "global_step": 2, "args": {"lr": 1e-4}, "opt": [[1.0] * 10] * 5}, protocol=2)
    rng = random.Random(SEED)
    p = tmp_path / "training_state.pt"
    for _ in range(300):
        data = bytearray(good)
        for _ in range(rng.randrange(1, 5)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        with zipfile.ZipFile(p, "w") as z:
            z.writestr("archive/data.pkl", bytes(data))
        try:
            st = read_training_state(p)
        except StateReadError:
            continue
        assert st.epoch is None or isinstance(st.epoch, int)
