"""Reading regeneration inputs from Parquet: the same shapes as JSONL, read in record batches."""

from __future__ import annotations

from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.parquet as pq

from backend.regen import datasets
from backend.regen.datasets import RowCounts, Skipped, count_rows, read_rows
from backend.regen.records import Row

ROLE_CONTENT = pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
FROM_VALUE = pa.list_(pa.struct([("from", pa.string()), ("value", pa.string())]))


def test_role_content_structs_with_ids_and_extra_columns(tmp_path):
    table = pa.table({
        "id": ["r1", None, "r3"],
        "conversations": pa.array([
            [{"role": "system", "content": "Answer in C."}, {"role": "user", "content": "Swap two ints."},
             {"role": "assistant", "content": "Use a temp."}],
            [{"role": "user", "content": "Print hello."}],
            [],  # an empty conversation: skipped
        ], type=ROLE_CONTENT),
        "lang": ["c", "python", "go"],
        "added": [datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc)] * 3,
    })
    f = tmp_path / "rc.parquet"
    pq.write_table(table, f)
    items = list(read_rows(f, dataset="pq"))
    rows = [i for i in items if isinstance(i, Row)]
    assert [(r.id, r.line, [(m.role, m.content) for m in r.messages]) for r in rows] == [
        ("r1", 1, [("system", "Answer in C."), ("user", "Swap two ints."), ("assistant", "Use a temp.")]),
        # a null id is no id: "h-" + sha256('[["user","Print hello."]]')[:16], computed by hand
        ("h-099fbf15d8247785", 2, [("user", "Print hello.")]),
    ]
    # other columns stay in the record as plain JSON values; a null is an absent key
    assert rows[0].record["lang"] == "c"
    assert rows[0].record["added"] == "2025-01-02T03:04:05+00:00"
    assert "id" not in rows[1].record
    [s] = [i for i in items if isinstance(i, Skipped)]
    assert (s.line, s.id, s.reason) == (3, "r3", "rc.parquet row 3: conversations: not a non-empty list")


def test_sharegpt_structs_and_prompt_and_text_columns(tmp_path):
    sharegpt = pa.table({
        "id": pa.array([1, 2], type=pa.int64()),
        "conversations": pa.array([
            [{"from": "human", "value": "Explain closures in JS."}, {"from": "gpt", "value": "A function..."}],
            [{"from": "wizard", "value": "?"}],
        ], type=FROM_VALUE),
    })
    pq.write_table(sharegpt, tmp_path / "sg.parquet")
    items = list(read_rows(tmp_path / "sg.parquet", dataset="sg"))
    assert [(i.id, [(m.role, m.content) for m in i.messages]) for i in items if isinstance(i, Row)] == [
        ("1", [("user", "Explain closures in JS."), ("assistant", "A function...")])]
    assert [i.reason for i in items if isinstance(i, Skipped)] == [
        "sg.parquet row 2: conversations[0].role: unknown role 'wizard'"]

    prompts = pa.table({"id": ["p1", "p2", "p3"], "prompt": ["Write quicksort in Haskell.", None, None],
                        "text": [None, "Explain Rust lifetimes.", None]})
    pq.write_table(prompts, tmp_path / "pt.parquet")
    items = list(read_rows(tmp_path / "pt.parquet", dataset="pt"))
    assert [(i.id, i.messages[0].content) for i in items if isinstance(i, Row)] == [
        ("p1", "Write quicksort in Haskell."), ("p2", "Explain Rust lifetimes.")]
    assert [i.reason for i in items if isinstance(i, Skipped)] == [
        "pt.parquet row 3: no conversations, messages, prompt or text field"]


def test_rows_across_batches_keep_their_numbers_and_limit_and_filters_apply(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets, "PARQUET_BATCH_ROWS", 7)
    n = 50
    table = pa.table({"id": [f"q{i}" for i in range(1, n + 1)],
                      "prompt": [("long " * 20 if i % 10 == 0 else f"prompt {i}") for i in range(1, n + 1)]})
    f = tmp_path / "many.parquet"
    pq.write_table(table, f, row_group_size=16)
    rows = [i for i in read_rows(f, dataset="d") if isinstance(i, Row)]
    assert [(r.id, r.line) for r in rows] == [(f"q{i}", i) for i in range(1, n + 1)]
    items = list(read_rows(f, dataset="d", max_prompt_chars=50, limit=25))
    assert [i.id for i in items if isinstance(i, Row)] == [f"q{i}" for i in range(1, 28) if i % 10]
    assert [i.line for i in items if isinstance(i, Skipped)] == [10, 20]
    assert count_rows(f, dataset="d", max_prompt_chars=50) == RowCounts(rows=45, skipped=5)


def test_a_duplicate_names_the_parquet_row_that_gave_the_id_first(tmp_path):
    pq.write_table(pa.table({"id": ["a", "b", "a"], "prompt": ["one", "two", "three"]}), tmp_path / "d.parquet")
    items = list(read_rows(tmp_path / "d.parquet", dataset="pqd"))
    assert [i.reason for i in items if isinstance(i, Skipped)] == [
        "d.parquet row 3: id: duplicate id 'a' (first in pqd row 1)"]


def test_reading_with_a_limit_stops_at_the_row_group_it_needs(tmp_path, monkeypatch):
    f = tmp_path / "groups.parquet"
    pq.write_table(pa.table({"prompt": [f"p{i}" for i in range(1000)]}), f, row_group_size=100)
    monkeypatch.setattr(datasets, "PARQUET_BATCH_ROWS", 100)
    batches = []
    real = pq.ParquetFile.iter_batches

    def counting(self, *a, **kw):
        for b in real(self, *a, **kw):
            batches.append(b.num_rows)
            yield b

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", counting)
    assert len([i for i in read_rows(f, dataset="d", limit=150)]) == 150
    assert batches == [100, 100]  # two of ten row groups read

