"""Training data of the tiny trainer: SpecForge-format conversations tokenized, shuffled per epoch, batched.

Rows are read by the regeneration's own reader (:func:`backend.regen.datasets.read_rows`: JSON lines,
a JSON array or Parquet; SpecForge role/content records, ShareGPT turns, ``messages``), so anything a
regeneration writes or reads trains here too.  A row that cannot be used is reported with its file,
line and field and left out; the rest trains.  A conversation with no assistant token within
``--max-length`` teaches nothing and is left out too (counted).

The order of an epoch depends only on the seed and the epoch, so a resumed run sees the same batches as
an uninterrupted one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from backend.regen.datasets import DatasetError, Skipped, read_rows
from backend.flows.tiny.tokenizer import Sample, encode_chat, specials


class DataError(ValueError):
    """Training data that cannot be used at all; the message names the file."""


@dataclass
class Dataset:
    path: Path
    samples: list[Sample]
    skipped: list[str] = field(default_factory=list)  # reasons, each naming file, line and field
    no_loss: int = 0  # rows without an assistant token within max_length

    @property
    def tokens(self) -> int:
        return sum(len(s.ids) for s in self.samples)


def load(path: str | Path, max_length: int, *, only_last_turn: bool = False) -> Dataset:
    p = Path(path)
    if not p.is_file():
        raise DataError(f"{p}: {'not a file' if p.exists() else 'training data file not found'}")
    ds = Dataset(p, [])
    try:
        for row in read_rows(p, dataset=p.stem):
            if isinstance(row, Skipped):
                ds.skipped.append(row.reason)
                continue
            sample = encode_chat(((m.role, m.content) for m in row.messages), max_length,
                                 only_last_turn=only_last_turn)
            if sample.loss_tokens == 0:
                ds.no_loss += 1
                continue
            ds.samples.append(sample)
    except DatasetError as exc:
        raise DataError(str(exc)) from None
    except OSError as exc:
        raise DataError(f"{p}: cannot read: {exc.strerror or exc}") from None
    if not ds.samples:
        why = f"; {len(ds.skipped)} unusable, the first: {ds.skipped[0]}" if ds.skipped else ""
        raise DataError(f"{p}: no conversation with an assistant reply to train on "
                        f"({ds.no_loss} without one within --max-length {max_length}{why})")
    return ds


def epoch_batches(n: int, batch_size: int, seed: int, epoch: int) -> list[list[int]]:
    """Sample indices of each batch of ``epoch`` (shuffled by seed and epoch; the last batch may be short)."""
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    order = torch.randperm(n, generator=g).tolist()
    return [order[i:i + batch_size] for i in range(0, n, batch_size)]


def steps_per_epoch(n: int, batch_size: int) -> int:
    return (n + batch_size - 1) // batch_size


def collate(samples: list[Sample], device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """ids (B, T) right-padded (with ``<|end_of_text|>``) and loss mask (B, T), T the longest sample of the batch."""
    t = max(len(s.ids) for s in samples)
    ids = torch.full((len(samples), t), specials().pad, dtype=torch.int64)
    mask = torch.zeros((len(samples), t), dtype=torch.float32)
    for i, s in enumerate(samples):
        ids[i, :len(s.ids)] = torch.tensor(s.ids, dtype=torch.int64)
        mask[i, :len(s.loss_mask)] = torch.tensor(s.loss_mask, dtype=torch.float32)
    return ids.to(device), mask.to(device)
