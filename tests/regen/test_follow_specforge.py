"""Following SpecForge's regenerate_train_data.py by its three output files; the sample reads."""

from __future__ import annotations

import json

from backend.regen.follow_specforge import SpecForgeFollower, error_class
from backend.regen.samples import find_original, find_row, last_row, row_at, row_before, turns
from tests.regen.regen_fixtures import append, in_row, out_row

T0 = 1_764_000_000.0


class Clock:
    def __init__(self, t: float = T0):
        self.t = t

    def __call__(self) -> float:
        return self.t


def _sf_row(rid, answer, status="success", **extra):
    # SpecForge keeps the input keys and adds status (no regen block, no token counts)
    d = {"id": rid, "conversations": [{"role": "user", "content": "q"}, {"role": "assistant", "content": answer}],
         "status": status}
    d.update(extra)
    return d


def _files(tmp_path, n_input=10):
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(json.dumps(in_row(f"r{i}", "q", "old")) + "\n" for i in range(n_input)))
    out = tmp_path / "out.jsonl"
    return inp, out, tmp_path / "out_error.jsonl", tmp_path / "out_skipped.jsonl"


def test_counts_come_from_the_three_files_by_distinct_id(tmp_path):
    inp, out, err, skp = _files(tmp_path)
    append(out, _sf_row("r0", "a" * 100), _sf_row("r1", "b" * 300))
    append(err, {"id": "r2", "status": "error", "error": "Error code: 400 - maximum context length is 4096"})
    append(skp, {"id": "r3", "status": "skipped"})
    clock = Clock()
    f = SpecForgeFollower(inp, out, clock=clock).poll()
    assert f.total == 10
    assert (f.done, f.failed, f.skipped, f.remaining) == (2, 1, 1, 6)
    assert f.errors == {"context_length": {"count": 1, "example": "Error code: 400 - maximum context length is 4096"}}
    # answer lengths 100 and 300 characters: the 64-128 and 256-512 bins
    assert f.length_counts[1] == 1 and f.length_counts[3] == 1
    # a duplicate written by a count-based resume is not progress
    append(out, _sf_row("r1", "again"))
    clock.t += 10
    f.poll()
    assert f.done == 2 and f.duplicates == 1


def test_rate_and_eta_from_polls_once_caught_up(tmp_path):
    inp, out, err, skp = _files(tmp_path, n_input=100)
    clock = Clock()
    f = SpecForgeFollower(inp, out, clock=clock)
    append(out, *[_sf_row(f"r{i}", "x") for i in range(10)])
    f.poll()  # the rows already there were not written at this rate
    assert f.rate() is None and f.last_completion_t is None
    for k in range(1, 6):
        clock.t = T0 + 10 * k
        append(out, *[_sf_row(f"r{10 * k + i}", "x") for i in range(10)])  # 1 row/s
        f.poll()
    assert f.done == 60
    assert abs(f.rate() - 1.0) < 1e-9
    eta = f.eta(now=clock.t)
    assert abs(eta.point_s - 40.0) < 1e-6  # 40 rows left at 1 row/s
    assert f.last_completion_t == T0 + 50


def test_torn_last_line_and_truncation(tmp_path):
    inp, out, err, skp = _files(tmp_path)
    append(out, _sf_row("r0", "a"), raw=b'{"id": "r1", "conversations": [')
    f = SpecForgeFollower(inp, out).poll()
    assert f.done == 1
    append(out, raw=b'], "status": "success"}\n')
    f.poll()
    assert f.done == 2
    out.write_text(json.dumps(_sf_row("r5", "z")) + "\n")  # the script started over with "w"
    f.poll()
    assert f.done == 1 and f.files["success"].ids == {"r5"} and f.resets == 1


def test_attaching_to_a_large_output_reads_it_in_pieces(tmp_path):
    inp, out, err, skp = _files(tmp_path, n_input=2000)
    append(out, *[_sf_row(f"r{i}", "y" * 200) for i in range(2000)])
    f = SpecForgeFollower(inp, out, budget_bytes=64 * 1024)
    f.poll()
    assert f.catching_up and 0 < f.read_fraction < 1 and 0 < f.done < 2000
    for _ in range(50):
        if not f.catching_up:
            break
        f.poll()
    f.poll()
    assert f.done == 2000 and f.remaining == 0 and not f.catching_up


def test_input_without_trailing_newline_counts_its_last_line(tmp_path):
    inp = tmp_path / "in.jsonl"
    inp.write_text('{"id": "a"}\n{"id": "b"}')
    f = SpecForgeFollower(inp, tmp_path / "out.jsonl").poll()
    assert f.total == 2 and not f.exists


def test_error_classes():
    assert error_class("Request timed out.") == "timeout"
    assert error_class("Connection error.") == "connection"
    assert error_class("Error code: 429 - rate limit") == "rate_limited"
    assert error_class("Error code: 503 - Service Unavailable") == "server_error"
    assert error_class("Error code: 400 - {'message': 'bad'}") == "bad_request"
    assert error_class("something else") == "other"


# -- the sample viewer's reads --------------------------------------------------------------------


def test_rows_by_offset_forwards_and_backwards(tmp_path):
    p = tmp_path / "out.jsonl"
    rows = [out_row(f"id{i}", f"answer {i}") for i in range(3)]
    append(p, *rows, raw=b'{"id": "torn')
    last = last_row(p)
    assert last.record["id"] == "id2"  # the torn line is not a row yet
    prev = row_before(p, last.start)
    assert prev.record["id"] == "id1"
    assert row_before(p, prev.start).record["id"] == "id0"
    assert row_before(p, 0) is None
    assert row_at(p, prev.end).record["id"] == "id2"
    assert row_at(p, last.end) is None
    assert row_at(p, prev.start + 5).record["id"] == "id2"  # the middle of a line: the next one
    assert find_row(p, "id1").start == prev.start
    assert find_row(p, "nope") is None


def test_original_found_by_id_and_by_content_hash(tmp_path):
    ds = tmp_path / "ds.jsonl"
    ds.write_text(json.dumps(in_row("a1", "p1", "original one")) + "\n"
                  + json.dumps({"conversations": [{"role": "user", "content": "p2"},
                                                  {"role": "assistant", "content": "original two"}]}) + "\n")
    entries = [{"dataset": "ds", "file": ds, "first_turn_only": False, "max_prompt_chars": None}]
    assert turns(find_original(entries, "a1", "ds"))[1]["content"] == "original one"
    from backend.regen.records import Message, stable_id

    hid = stable_id((Message("user", "p2"), Message("assistant", "original two")))
    assert turns(find_original(entries, hid, "ds"))[1]["content"] == "original two"
    assert find_original(entries, "missing", "ds") is None
