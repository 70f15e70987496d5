"""accept_len and tok/s per dataset, side by side, for one server's benchmark results.

Where benchmark results record the dataset their prompts came from, the same configuration at the same
load is compared across datasets: how well the draft predicts each kind of data is what tells which data
the next draft needs.  One row per configuration and load; per dataset, the newest result's accept_len
and output tok/s (and how many results there are).  Results without a dataset are left out, and so are
invalid ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable

from specdeck_types.bench import BenchResult


@dataclass(frozen=True)
class Cell:
    accept_len: float | None
    tok_s: float | None
    result_id: int | None
    results: int  # results of this configuration, load and dataset (the newest is shown)


@dataclass(frozen=True)
class Row:
    configuration: str
    load: str
    baseline: bool
    cells: dict[str, Cell] = field(default_factory=dict)  # by dataset


@dataclass(frozen=True)
class Table:
    server: str
    datasets: tuple[str, ...]
    rows: tuple[Row, ...]


def servers_with_datasets(results: Iterable[BenchResult], server_of: Callable[[BenchResult], str]) -> list[str]:
    """The servers with at least one valid result that records its dataset, most datasets first."""
    seen: dict[str, set[str]] = {}
    for r in results:
        if r.invalid or not (r.load.dataset or "").strip():
            continue
        seen.setdefault(server_of(r), set()).add(r.load.dataset.strip())
    return sorted(seen, key=lambda s: (-len(seen[s]), s))


def table(results: Iterable[BenchResult], server: str, *, server_of: Callable[[BenchResult], str],
          config_of: Callable[[BenchResult], str], load_of: Callable[[BenchResult], str],
          when: Callable[[BenchResult], float | None]) -> Table:
    """Server ``server``'s results by configuration and load (rows) and dataset (columns)."""
    groups: dict[tuple[str, str, bool], dict[str, list[BenchResult]]] = {}
    datasets: set[str] = set()
    for r in results:
        ds = (r.load.dataset or "").strip()
        if r.invalid or not ds or server_of(r) != server:
            continue
        datasets.add(ds)
        groups.setdefault((config_of(r), load_of(r), r.is_baseline), {}).setdefault(ds, []).append(r)
    rows = []
    for (config, load, is_base), by_ds in groups.items():
        cells = {}
        for ds, rs in by_ds.items():
            newest = max(rs, key=lambda r: (when(r) or 0.0, r.id or 0))
            cells[ds] = Cell(newest.accept_len, newest.results.output_tok_s, newest.id, len(rs))
        rows.append(Row(config, load, is_base, cells))
    # baselines first, then by configuration and load
    rows.sort(key=lambda row: (not row.baseline, row.configuration, row.load))
    return Table(server, tuple(sorted(datasets)), tuple(rows))
