"""The demo workspace's catalog: the ten code datasets and their generated prompt files."""

from __future__ import annotations

import json

import pyarrow.parquet as pq

from backend.flows.demo import write_demo_workspace
from backend.regen.catalog import mixes
from backend.regen.datasets import Skipped, read_mix
from backend.regen.demo_data import write_demo_datasets
from backend.flows.workspace import load_workspace

# (name, source, size, license) as the notes of the original run give them; None where they do not
SEEDS = [
    ("the-stack-v2", "bigcode/the-stack-v2", None, "gated: Software Heritage terms of use (agreement required)"),
    ("codesearchnet", "sentence-transformers/codesearchnet", None, None),
    ("mceval-instruct", "mceval/mceval-instruct", None, None),
    ("multipl-e", "multi-pl-e/multi-pl-e", None, None),
    ("codeforces", "open-r1/codeforces", None, None),
    ("verifiable-coding-problems", "PrimeIntellect/verifiable-coding-problems", 144_000, None),
    ("leetcode-solutions", "kaysss/leetcode-problem-solutions", None, None),
    ("humaneval-x", "zai-org/humaneval-x", 820, None),
    ("humaneval-xl", "humaneval-xl/humaneval-xl", None, None),
    ("swe-polybench", "swe-polybench/swe-polybench", None, None),
]


def test_the_demo_workspace_has_the_ten_datasets_and_their_files(tmp_path):
    write_demo_workspace(tmp_path)
    ws = load_workspace(tmp_path)
    assert [(d.name, d.source, d.size, d.license) for d in ws.config.dataset] == SEEDS
    assert {d.domain for d in ws.config.dataset} == {"code"}
    for d in ws.config.dataset:
        assert (tmp_path / d.file).is_file(), d.file
    assert [d.file for d in ws.config.dataset if d.file.endswith(".parquet")] == ["datasets/codesearchnet.parquet"]
    got = mixes(ws.config.dataset, ws.config.mix)
    assert list(got) == ["code-mix", "smoke"]
    assert got["code-mix"].datasets == [s[0] for s in SEEDS]
    assert got["smoke"].samples == 15


def test_a_demo_run_reads_a_few_hundred_rows_and_skips_the_planted_bad_ones(tmp_path):
    write_demo_workspace(tmp_path)
    ws = load_workspace(tmp_path)
    items = list(read_mix(mixes(ws.config.dataset, ws.config.mix)["code-mix"], ws.root))
    rows = [i for i in items if not isinstance(i, Skipped)]
    skipped = [(s.dataset, s.line, s.reason.split(": ", 2)[1]) for s in items if isinstance(s, Skipped)]
    assert 200 <= len(rows) <= 400
    assert {r.dataset for r in rows} == {s[0] for s in SEEDS}
    assert skipped == [
        ("multipl-e", 30, "prompt"),                   # an empty prompt
        ("multipl-e", 31, "id"),                       # the prompt The Stack v2's last row already gave
        ("leetcode-solutions", 11, "not valid JSON"),  # a cut-off line
        ("leetcode-solutions", 21, "conversations[0].role"),  # an unknown speaker
        ("swe-polybench", 1, "prompt"), ("swe-polybench", 6, "prompt"), ("swe-polybench", 11, "prompt"),  # too long
    ]
    assert len({r.id for r in rows}) == len(rows)
    # the mix asks multi-turn datasets for their first turn only
    assert max(r.user_turns for r in rows if r.dataset in ("codeforces", "leetcode-solutions")) == 1
    assert max(r.user_turns for r in rows) == 1


def test_the_demo_files_use_every_input_shape(tmp_path):
    write_demo_datasets(tmp_path)
    keys: set[str] = set()
    for f in sorted((tmp_path / "datasets").glob("*.jsonl")):
        for line in f.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            keys |= set(rec)
            for turn in rec.get("conversations", []):
                keys |= {f"turn.{k}" for k in turn}
    assert {"conversations", "messages", "prompt", "text", "turn.role", "turn.content",
            "turn.from", "turn.value"} <= keys
    schema = pq.read_schema(tmp_path / "datasets" / "codesearchnet.parquet")
    assert str(schema.field("conversations").type) == "list<element: struct<role: string, content: string>>"


def test_the_demo_files_are_the_same_bytes_every_time(tmp_path):
    a = write_demo_datasets(tmp_path / "a")
    b = write_demo_datasets(tmp_path / "b")
    assert [p.name for p in a] == [p.name for p in b] and len(a) == 10
    for pa_, pb in zip(a, b):
        assert pa_.read_bytes() == pb.read_bytes(), pa_.name
    write_demo_datasets(tmp_path / "a")  # rewriting leaves no temporary file behind
    assert sorted(p.name for p in (tmp_path / "a" / "datasets").iterdir()) == sorted(p.name for p in a)
