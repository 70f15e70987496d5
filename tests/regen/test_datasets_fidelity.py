"""Input that other tools write and that Specdeck used to misread: OpenAI's developer role and
content parts, text that is not valid Unicode, identical rows without ids, binary files and
folders given as inputs."""

from __future__ import annotations

import gzip
import json

import pytest

from backend.regen.datasets import DatasetError, Skipped, read_mix, read_rows
from backend.regen.config import JobConfig
from backend.regen.records import Message, RowError, to_row
from tests.helpers import fresh_python


def _rows(items):
    return [i for i in items if not isinstance(i, Skipped)]


def test_developer_role_and_text_parts_are_read_as_openai_writes_them():
    row = to_row({"messages": [{"role": "developer", "content": [{"type": "text", "text": "Be brief."}]},
                               {"role": "user", "content": [{"type": "text", "text": "one"},
                                                            {"type": "text", "text": "two"}]},
                               {"role": "assistant", "content": "old"}]}, dataset="d")
    assert row.messages == (Message("system", "Be brief."), Message("user", "one\ntwo"), Message("assistant", "old"))
    with pytest.raises(RowError, match=r"^messages\[0\]\.content\[1\]\.type: 'image_url' part; only text parts"):
        to_row({"messages": [{"role": "user", "content": [{"type": "text", "text": "look"},
                                                          {"type": "image_url", "image_url": {"url": "x"}}]}]},
               dataset="d")
    with pytest.raises(RowError, match=r"^conversations\[0\]\.content\[0\]\.text: not a string"):
        to_row({"conversations": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}, dataset="d")


def test_a_lone_surrogate_in_a_turn_skips_the_row_with_the_field_and_in_an_id_is_not_used(tmp_path):
    p = tmp_path / "in.jsonl"
    p.write_text(json.dumps({"id": "a", "conversations": [{"role": "user", "content": "ok"},
                                                          {"role": "assistant", "content": "x\udc80"}]}) + "\n"
                 + json.dumps({"id": "b", "prompt": "\ud83d\ude00 a pair is fine"}) + "\n"
                 + json.dumps({"id": "c\ud800", "prompt": "the id is not valid Unicode"}) + "\n")
    items = list(read_rows(p, dataset="d"))
    assert isinstance(items[0], Skipped) and items[0].reason == (
        "in.jsonl:1: conversations[1].content: a lone surrogate U+DC80 at character 2 (not valid Unicode; it "
        "cannot be sent or written as UTF-8)")
    assert items[1].id == "b" and items[1].messages[0].content.startswith("\U0001F600")
    assert items[2].id.startswith("h-")  # an id that cannot be written is replaced by the hash id


def test_identical_rows_without_ids_are_each_asked_with_numbered_ids(tmp_path):
    p = tmp_path / "in.jsonl"
    same = {"conversations": [{"role": "user", "content": "same"}]}
    p.write_text("\n".join(json.dumps(r) for r in [same, {"id": "x", "prompt": "p"}, same,
                                                   {"id": "x", "prompt": "p"}, same]) + "\n")
    items = list(read_rows(p, dataset="d"))
    rows = _rows(items)
    base = rows[0].id
    assert [(r.id, r.repeat, r.line) for r in rows] == [(base, 0, 1), ("x", 0, 2), (f"{base}-2", 1, 3),
                                                       (f"{base}-3", 2, 5)]
    # an id given twice is still a duplicate
    assert [(s.line, s.reason) for s in items if isinstance(s, Skipped)] == [
        (4, "in.jsonl:4: id: duplicate id 'x' (first in d line 2)")]
    # the same file read again gives the same ids (a resume depends on it)
    assert [r.id for r in _rows(read_rows(p, dataset="d"))] == [r.id for r in rows]
    # --limit takes them as rows
    assert [r.id for r in _rows(read_rows(p, dataset="d", limit=3))] == [base, "x", f"{base}-2"]


def test_binary_files_and_folders_are_errors_naming_what_they_are(tmp_path):
    rows = (json.dumps({"prompt": "q"}) + "\n").encode() * 3
    cases = {
        "a.jsonl": (gzip.compress(rows), "a gzip-compressed file"),
        "b.jsonl": (b"PAR1\x15\x04" + b"\x00" * 40, "a Parquet file (name it .parquet)"),
        "c.jsonl": (rows[:20] + b"\x00\x01\x02" + rows, "a binary file (a NUL byte at byte 21)"),
        "d.json": (b"\x28\xb5\x2f\xfd" + b"\x00" * 10, "a zstd-compressed file"),
        "e.jsonl": ("\ufeff".encode("utf-16-le") + '{"prompt": "q"}\n'.encode("utf-16-le"), "UTF-16 text"),
    }
    for name, (data, what) in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(DatasetError, match=f"^{tmp_path / name}: {what.replace('(', '[(]').replace(')', '[)]')}"):
            list(read_rows(tmp_path / name, dataset="d"))
    (tmp_path / "folder.jsonl").mkdir()
    with pytest.raises(DatasetError, match=r"folder\.jsonl: a folder, not a file"):
        list(read_rows(tmp_path / "folder.jsonl", dataset="d"))
    (tmp_path / "folder.parquet").mkdir()
    with pytest.raises(DatasetError, match=r"folder\.parquet: a folder, not a file"):
        list(read_rows(tmp_path / "folder.parquet", dataset="d"))
    # text with a bad line is still read: only that line is skipped
    (tmp_path / "ok.jsonl").write_bytes(rows + b"\xff\xfe not utf-8\n")
    assert len(_rows(read_rows(tmp_path / "ok.jsonl", dataset="d"))) == 3


def test_input_runs_read_without_the_mix_model(tmp_path):
    p = tmp_path / "my data.jsonl"
    p.write_text(json.dumps({"prompt": "q"}) + "\n")
    cfg = JobConfig(out=tmp_path / "o.jsonl", servers=[], inputs=[str(p)])
    mix = cfg.mix_config()
    assert [(e.dataset, e.file) for e in mix.entries] == [("my-data", str(p.resolve()))]
    assert [r.dataset for r in _rows(read_mix(mix, tmp_path))] == ["my-data"]


def test_the_job_imports_only_what_it_uses(tmp_path):
    """``regen run`` of input files: no pydantic (only a mix needs it), nothing of the supervisor,
    the benchmark, training, SGLang or the flows above the domains."""
    p = tmp_path / "in.jsonl"
    p.write_text(json.dumps({"prompt": "q"}) + "\n")
    code = ("import sys, backend.regen.job as j, backend.regen.config as c\n"
            f"cfg = c.JobConfig(out={str(tmp_path / 'o.jsonl')!r}, servers=[], inputs=[{str(p)!r}])\n"
            "list(j.read_mix(cfg.mix_config(), '.'))\n"
            "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] == 'pydantic' or m.startswith(("
            "'backend.supervisor', 'backend.bench', 'backend.train', 'backend.sglang', 'backend.flows', "
            "'backend.workspace', 'state')))))")
    assert fresh_python(code, timeout=60).split() == []
