"""A ``.json`` file holding one JSON array (ShareGPT's own dumps) is streamed item by item."""

from __future__ import annotations

import json
import tracemalloc

import pytest

from backend.regen import datasets
from backend.regen.datasets import RowCounts, Skipped, count_rows, read_rows
from backend.regen.records import Row

# Strings full of the characters that separate items, escaped quotes, and a backslash before a
# closing quote, pretty-printed over many lines: a split that ignored strings would break here.
TRICKY = """[
  {"id": "sg-1", "conversations": [
    {"from": "human", "value": "Split \\"a,b],c}\\" on commas, then [brackets] {braces}"},
    {"from": "gpt", "value": "ends with a backslash \\\\"}
  ]},
  {"id": "sg-2", "conversations": [{"from": "human", "value": "C:\\\\path\\\\to\\\\file, please \\u00e9"}]},
  {"prompt": "Unicode: 中文, ünïcödé, emoji \\ud83d\\ude00"}
]
"""


@pytest.mark.parametrize("chunk", [1, 2, 3, 5, 7, 64, 1024 * 1024])
def test_items_split_correctly_at_any_chunk_size(tmp_path, monkeypatch, chunk):
    monkeypatch.setattr(datasets, "ARRAY_READ_CHUNK", chunk)
    f = tmp_path / "sharegpt.json"
    f.write_text(TRICKY, encoding="utf-8")
    expected = json.loads(TRICKY)  # the whole file decoded at once, as the reference
    items = list(read_rows(f, dataset="sg"))
    assert all(isinstance(i, Row) for i in items)
    assert [i.record for i in items] == expected
    assert [i.line for i in items] == [1, 2, 3]
    assert items[0].messages[0].content == 'Split "a,b],c}" on commas, then [brackets] {braces}'
    assert items[0].messages[1].content == "ends with a backslash \\"
    assert items[1].messages[0].content == "C:\\path\\to\\file, please é"
    assert items[2].messages[0].content == "Unicode: 中文, ünïcödé, emoji 😀"


def test_a_bad_item_is_skipped_and_the_rest_are_read(tmp_path):
    f = tmp_path / "a.json"
    f.write_bytes(b'\xef\xbb\xbf [{"id": "1", "prompt": "one"}, {"id": "2", "prompt": }, "just a string",'
                  b' {"id": "4", "prompt": "caf\xe9"}, {"id": "5", "prompt": "five"},]')
    items = list(read_rows(f, dataset="d"))
    assert [i.id for i in items if isinstance(i, Row)] == ["1", "5"]
    assert [(s.line, s.reason) for s in items if isinstance(s, Skipped)] == [
        (2, "a.json item 2: not valid JSON: Expecting value (column 23)"),
        (3, "a.json item 3: not a JSON object (str)"),
        (4, "a.json item 4: not valid UTF-8 (byte 0xe9 at column 27)"),
    ]


def test_an_oversized_item_and_a_cut_off_file(tmp_path, monkeypatch):
    monkeypatch.setattr(datasets, "MAX_LINE_BYTES", 200)
    monkeypatch.setattr(datasets, "ARRAY_READ_CHUNK", 16)
    f = tmp_path / "b.json"
    big = json.dumps({"id": "big", "prompt": "x" * 500})
    f.write_text('[{"id": "a", "prompt": "small"}, ' + big + ', {"id": "c", "prompt": "after"}, {"id": "d", "pro',
                 encoding="utf-8")
    items = list(read_rows(f, dataset="d"))
    assert [i.id for i in items if isinstance(i, Row)] == ["a", "c"]
    skipped = [(s.line, s.reason) for s in items if isinstance(s, Skipped)]
    assert skipped == [
        (2, f"b.json item 2: item is {len(big) + 1:,} bytes, over the limit of 200 bytes for one row (not read)"),
        (4, "b.json item 4: the file ends inside this item (cut off?)"),
    ]


def test_empty_arrays_and_json_lines_named_json(tmp_path):
    (tmp_path / "empty.json").write_text("  [ ]\n")
    assert list(read_rows(tmp_path / "empty.json", dataset="d")) == []
    (tmp_path / "lines.json").write_text('{"id": "a", "prompt": "one"}\n{"id": "b", "prompt": "two"}\n')
    assert [r.id for r in read_rows(tmp_path / "lines.json", dataset="d")] == ["a", "b"]
    assert count_rows(tmp_path / "lines.json", dataset="d") == RowCounts(rows=2, skipped=0)


def test_a_20_mb_json_array_is_read_with_bounded_memory(tmp_path):
    f = tmp_path / "big.json"
    body = "Explain this Go code, line by line: " + "for i, v := range xs { sum += v * i }\n" * 200
    n = 0
    with open(f, "w", encoding="utf-8") as out:
        out.write("[\n")
        while out.tell() < 20 * 1024 * 1024:
            n += 1
            out.write(("" if n == 1 else ",\n") + json.dumps({"id": f"r{n}", "conversations": [
                {"from": "human", "value": f"{n} {body}"}, {"from": "gpt", "value": "ok"}]}, indent=1))
        out.write("\n]\n")
    size = f.stat().st_size
    tracemalloc.start()
    try:
        got = sum(1 for i in read_rows(f, dataset="d") if isinstance(i, Row))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got == n
    # a 1 MiB read chunk and the item being decoded, whatever the file's size
    assert peak < 5 * 2**20, f"peak {peak / 2**20:.1f} MiB for a {size / 2**20:.0f} MiB file"
