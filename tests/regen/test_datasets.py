"""Reading regeneration inputs: the three row shapes in JSONL, bad rows, ids, filters, limit, mixes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from backend.regen.catalog import MixConfig, MixEntry
from backend.regen.datasets import (
    DatasetError,
    RowCounts,
    Skipped,
    count_mix,
    count_rows,
    read_mix,
    read_rows,
)
from backend.regen.records import Message, Row


def write_lines(path: Path, lines: list[str | bytes]) -> Path:
    with open(path, "wb") as f:
        for line in lines:
            f.write((line if isinstance(line, bytes) else line.encode("utf-8")) + b"\n")
    return path


def rows_of(items) -> list[Row]:
    return [i for i in items if isinstance(i, Row)]


def skipped_of(items) -> list[Skipped]:
    return [i for i in items if isinstance(i, Skipped)]


def test_the_three_shapes_become_role_content_messages(tmp_path):
    f = write_lines(tmp_path / "mixed.jsonl", [
        '{"id": "sf-1", "conversations": [{"role": "system", "content": "Be brief."},'
        ' {"role": "user", "content": "Sort a list in Rust."}, {"role": "assistant", "content": "v.sort();"}]}',
        '{"id": 42, "conversations": [{"from": "human", "value": "Reverse a string in Go."},'
        ' {"from": "gpt", "value": "use runes"}]}',
        '{"id": "p-1", "prompt": "Write FizzBuzz in Ruby."}',
        '{"id": "t-1", "text": "Explain Python generators."}',
        '{"id": "m-1", "messages": [{"role": "user", "content": "Hello in Java?"}]}',
    ])
    items = list(read_rows(f, dataset="code"))
    assert skipped_of(items) == []
    got = [(r.id, r.dataset, r.line, [(m.role, m.content) for m in r.messages]) for r in items]
    assert got == [
        ("sf-1", "code", 1, [("system", "Be brief."), ("user", "Sort a list in Rust."), ("assistant", "v.sort();")]),
        ("42", "code", 2, [("user", "Reverse a string in Go."), ("assistant", "use runes")]),
        ("p-1", "code", 3, [("user", "Write FizzBuzz in Ruby.")]),
        ("t-1", "code", 4, [("user", "Explain Python generators.")]),
        ("m-1", "code", 5, [("user", "Hello in Java?")]),
    ]
    # the record is the input object as read (the output keeps its other keys)
    assert items[1].record == {"id": 42, "conversations": [{"from": "human", "value": "Reverse a string in Go."},
                                                           {"from": "gpt", "value": "use runes"}]}


def test_a_row_without_id_gets_the_documented_content_hash(tmp_path):
    # Documented formula (records.stable_id): "h-" + the first 16 hex digits of SHA-256 over the
    # compact JSON of [[role, content], ...]. For the prompt below that JSON is
    #   [["user","Write a haiku about Go."]]
    # whose SHA-256 starts with cce8c76176270405 (computed by hand with hashlib, not with this code).
    f = write_lines(tmp_path / "p.jsonl", ['{"prompt": "Write a haiku about Go."}'])
    [row] = read_rows(f, dataset="d")
    assert row.id == "h-cce8c76176270405"
    # [["system","Be brief."],["user","Sort a list in Rust."]] -> d1621abd8c314b8d
    g = write_lines(tmp_path / "c.jsonl", [json.dumps({"conversations": [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Sort a list in Rust."}]})])
    [row] = read_rows(g, dataset="d")
    assert row.id == "h-d1621abd8c314b8d"


def test_ids_are_stable_across_runs_files_and_shapes(tmp_path):
    a = write_lines(tmp_path / "a.jsonl", ['{"prompt": "Same prompt"}', '{"prompt": "Other"}'])
    b = write_lines(tmp_path / "b.jsonl", ['{"note": "x", "conversations": [{"from": "human", "value": "Same prompt"}]}'])
    first = [r.id for r in read_rows(a, dataset="a")]
    again = [r.id for r in read_rows(a, dataset="a")]
    other_file = [r.id for r in read_rows(b, dataset="b")]
    assert first == again
    assert first[0] == other_file[0]  # same turns -> same id, whatever the shape or file
    assert first[0] != first[1]
    assert all(i.startswith("h-") and len(i) == 18 for i in first)


def test_bad_rows_are_skipped_with_a_reason_naming_line_and_field(tmp_path):
    f = write_lines(tmp_path / "bad.jsonl", [
        '{"id": "ok-1", "prompt": "fine"}',
        b'{"prompt": "caf\xe9"}',                      # 2: Latin-1 byte, not UTF-8
        '{"prompt": "unterminated',                     # 3: bad JSON
        '["a", "list"]',                                # 4: not an object
        '{"id": "r-5", "conversations": [{"from": "robot", "value": "hi"}]}',  # 5: unknown role
        '{"conversations": [{"role": "user", "content": 7}]}',                 # 6: content not a string
        '{"conversations": [{"role": "assistant", "content": "only an answer"}]}',  # 7: no user turn
        '{"prompt": ""}',                               # 8: empty prompt
        '{"question": "no usable field"}',              # 9
        '',                                             # 10: blank line: not a row
        '{"id": "ok-11", "text": "also fine"}',
    ])
    items = list(read_rows(f, dataset="bad"))
    assert [r.id for r in rows_of(items)] == ["ok-1", "ok-11"]
    reasons = {s.line: s.reason for s in skipped_of(items)}
    assert reasons == {
        2: "bad.jsonl:2: not valid UTF-8 (byte 0xe9 at column 16)",
        3: "bad.jsonl:3: not valid JSON: Unterminated string starting at (column 12)",
        4: "bad.jsonl:4: not a JSON object (list)",
        5: "bad.jsonl:5: conversations[0].role: unknown role 'robot'",
        6: "bad.jsonl:6: conversations[0].content: not a string or a list of text parts",
        7: "bad.jsonl:7: conversations: no user turn with text",
        8: "bad.jsonl:8: prompt: not a non-empty string",
        9: "bad.jsonl:9: no conversations, messages, prompt or text field",
    }
    by_line = {s.line: s for s in skipped_of(items)}
    assert by_line[3].record == '{"prompt": "unterminated'  # raw text when it is not JSON
    assert by_line[4].record == ["a", "list"]                # the decoded object otherwise
    assert by_line[5].id == "r-5" and by_line[6].id is None  # the id when the row gives one
    assert all(s.dataset == "bad" for s in by_line.values())
    assert count_rows(f, dataset="bad") == RowCounts(rows=2, skipped=8)


def test_a_bad_line_keeps_its_whole_text_for_the_skipped_file(tmp_path):
    line = '{"prompt": "' + "z" * 5000 + '", oops}'
    f = write_lines(tmp_path / "long-bad.jsonl", [line, b'{"prompt": "\xff' + b"q" * 3000 + b'"}'])
    first, second = read_rows(f, dataset="d")
    assert first.record == line
    assert second.record == '{"prompt": "\ufffd' + "q" * 3000 + '"}'


def test_a_line_over_8_mib_is_skipped_and_counted(tmp_path):
    big = '{"prompt": "' + "x" * (9 * 1024 * 1024) + '"}'
    f = write_lines(tmp_path / "big.jsonl", ['{"id": "a", "prompt": "before"}', big, '{"id": "b", "prompt": "after"}'])
    items = list(read_rows(f, dataset="d"))
    assert [r.id for r in rows_of(items)] == ["a", "b"]
    [s] = skipped_of(items)
    assert s.line == 2
    assert s.reason == f"big.jsonl:2: line is {len(big) + 1:,} bytes, over the limit of 8 MiB for one row (not read)"
    assert len(s.record) <= 2000 and s.record.startswith('{"prompt": "xxx')


def test_utf8_bom_and_crlf_line_ends_are_accepted(tmp_path):
    f = tmp_path / "win.jsonl"
    f.write_bytes(b'\xef\xbb\xbf{"id": "a", "prompt": "one"}\r\n{"id": "b", "prompt": "two"}\r\n')
    assert [r.id for r in read_rows(f, dataset="d")] == ["a", "b"]


def test_first_turn_only_keeps_system_and_the_first_user_turn(tmp_path):
    f = write_lines(tmp_path / "multi.jsonl", [json.dumps({"id": "c1", "conversations": [
        {"role": "system", "content": "You write Go."},
        {"role": "user", "content": "Parse JSON."},
        {"role": "assistant", "content": "Use encoding/json."},
        {"role": "user", "content": "And YAML?"},
        {"role": "assistant", "content": "Use a library."},
    ]})])
    [full] = read_rows(f, dataset="d")
    [first] = read_rows(f, dataset="d", first_turn_only=True)
    assert full.user_turns == 2
    assert first.messages == (Message("system", "You write Go."), Message("user", "Parse JSON."))
    assert first.id == full.id == "c1"
    assert first.record["conversations"][3]["content"] == "And YAML?"  # the input record is untouched


def test_max_prompt_chars_counts_characters_not_bytes(tmp_path):
    f = write_lines(tmp_path / "len.jsonl", [
        json.dumps({"id": "ten", "prompt": "é" * 10}, ensure_ascii=False),   # 10 characters, 20 bytes
        json.dumps({"id": "eleven", "prompt": "é" * 11}, ensure_ascii=False),
        json.dumps({"id": "sys", "conversations": [{"role": "system", "content": "1234567"},
                                                   {"role": "user", "content": "1234"}]}),  # 7 + 4 = 11
    ])
    items = list(read_rows(f, dataset="d", max_prompt_chars=10))
    assert [r.id for r in rows_of(items)] == ["ten"]
    assert [(s.line, s.id, s.reason) for s in skipped_of(items)] == [
        (2, "eleven", "len.jsonl:2: prompt: 11 characters, over max_prompt_chars = 10"),
        (3, "sys", "len.jsonl:3: prompt: 11 characters, over max_prompt_chars = 10"),
    ]


def test_the_length_filter_applies_after_the_first_turn_filter(tmp_path):
    f = write_lines(tmp_path / "t.jsonl", [json.dumps({"id": "x", "conversations": [
        {"role": "user", "content": "short"}, {"role": "assistant", "content": "a"},
        {"role": "user", "content": "y" * 100}]})])
    assert [r.id for r in rows_of(read_rows(f, dataset="d", max_prompt_chars=50))] == []
    assert [r.id for r in rows_of(read_rows(f, dataset="d", first_turn_only=True, max_prompt_chars=50))] == ["x"]


def test_limit_takes_the_first_usable_rows_and_stops_reading(tmp_path):
    f = write_lines(tmp_path / "l.jsonl", [
        '{"id": "1", "prompt": "a"}',
        '{not json',
        '{"id": "2", "prompt": "b"}',
        '{"id": "1", "prompt": "dup of 1"}',
        '{"id": "3", "prompt": "c"}',
        '{also not json',   # after the limit: never read, so not reported
        '{"id": "4", "prompt": "d"}',
    ])
    items = list(read_rows(f, dataset="d", limit=3))
    assert [r.id for r in rows_of(items)] == ["1", "2", "3"]
    assert [s.line for s in skipped_of(items)] == [2, 4]
    assert skipped_of(items)[1].reason == "l.jsonl:4: id: duplicate id '1' (first in d line 1)"
    assert [r.id for r in rows_of(read_rows(f, dataset="d", limit=3))] == ["1", "2", "3"]  # deterministic
    assert list(read_rows(f, dataset="d", limit=0)) == []
    assert count_rows(f, dataset="d", limit=3) == RowCounts(rows=3, skipped=2)


def test_a_mix_reads_entries_in_order_and_skips_ids_an_earlier_dataset_gave(tmp_path):
    (tmp_path / "data").mkdir()
    write_lines(tmp_path / "data" / "a.jsonl", ['{"prompt": "shared prompt"}', '{"id": "a2", "prompt": "a two"}',
                                                 '{"id": "a3", "prompt": "a three"}'])
    write_lines(tmp_path / "data" / "b.jsonl", ['{"conversations": [{"from": "human", "value": "shared prompt"}]}',
                                                 '{"id": "a2", "prompt": "same id, other text"}',
                                                 '{"id": "b3", "prompt": "b three"}', '{"id": "b4", "prompt": "b four"}'])
    mix = MixConfig(name="m", entries=[
        MixEntry(name="m", dataset="alpha", file="data/a.jsonl", samples=2),
        MixEntry(name="m", dataset="beta", file=str(tmp_path / "data" / "b.jsonl"), samples=2),
    ])
    items = list(read_mix(mix, tmp_path))
    shared = "h-94799e9c800c7037"  # sha256('[["user","shared prompt"]]')[:16], by hand
    assert [(i.dataset, i.id) for i in rows_of(items)] == [
        ("alpha", shared), ("alpha", "a2"), ("beta", "b3"), ("beta", "b4")]
    assert [(s.dataset, s.line, s.reason) for s in skipped_of(items)] == [
        ("beta", 1, f"b.jsonl:1: id: duplicate id {shared!r} (first in alpha line 1)"),
        ("beta", 2, "b.jsonl:2: id: duplicate id 'a2' (first in alpha line 2)"),
    ]
    # duplicates do not count towards an entry's samples: beta still gives two rows
    assert count_mix(mix, tmp_path) == {"alpha": RowCounts(2, 0), "beta": RowCounts(2, 2)}


def test_files_that_cannot_be_read_raise_naming_the_file(tmp_path):
    with pytest.raises(DatasetError, match=r"nope\.jsonl: cannot open"):
        list(read_rows(tmp_path / "nope.jsonl", dataset="d"))
    (tmp_path / "x.csv").write_text("a,b\n")
    with pytest.raises(DatasetError, match=r"x\.csv: unknown input type '\.csv'"):
        list(read_rows(tmp_path / "x.csv", dataset="d"))
    (tmp_path / "fake.parquet").write_text("not parquet")
    with pytest.raises(DatasetError, match=r"fake\.parquet: not a readable Parquet file"):
        list(read_rows(tmp_path / "fake.parquet", dataset="d"))
    mix = MixConfig(entries=[MixEntry(dataset="alpha")])
    with pytest.raises(DatasetError, match="'alpha' has no file"):
        list(read_mix(mix, tmp_path))
