"""The dataset catalog and mixes in the workspace file: parsing, grouping, and errors with file:line."""

from __future__ import annotations

import pytest

from backend.regen.catalog import DatasetConfig, MixConfig, MixEntry, mixes, resolve_mix
from backend.workspace import ConfigError
from backend.flows.workspace import parse_config

GOOD = """\
[workspace]
name = "w"

[[dataset]]
name = "humaneval-x"
source = "zai-org/humaneval-x"
size = 820
domain = "code"
file = "datasets/humaneval-x.jsonl"

[[dataset]]
name = "stack-v2"
source = "bigcode/the-stack-v2"
license = "gated: Software Heritage terms of use"
domain = "code"
file = "datasets/stack-v2.parquet"
notes = "about 4 trillion tokens"

[[mix]]
name = "code-mix"
dataset = "stack-v2"
samples = 40
first_turn_only = true
max_prompt_chars = 12000

[[mix]]
name = "code-mix"
dataset = "humaneval-x"

[[mix]]
name = "small"
dataset = "humaneval-x"
samples = 5
file = "datasets/humaneval-x-python.jsonl"

[[mix]]
dataset = "stack-v2"
"""


def test_catalog_and_mixes_parse_and_group_by_name_in_file_order():
    cfg = parse_config(GOOD, "specdeck.toml")
    assert [(d.name, d.source, d.size, d.license) for d in cfg.dataset] == [
        ("humaneval-x", "zai-org/humaneval-x", 820, None),
        ("stack-v2", "bigcode/the-stack-v2", None, "gated: Software Heritage terms of use"),
    ]
    got = mixes(cfg.dataset, cfg.mix)
    assert list(got) == ["code-mix", "small", "default"]
    code = got["code-mix"]
    assert [(e.dataset, e.file, e.samples, e.first_turn_only, e.max_prompt_chars) for e in code.entries] == [
        ("stack-v2", "datasets/stack-v2.parquet", 40, True, 12000),
        ("humaneval-x", "datasets/humaneval-x.jsonl", None, False, None),
    ]
    assert code.samples is None  # humaneval-x takes every row
    assert got["small"].entries[0].file == "datasets/humaneval-x-python.jsonl"  # the override wins
    assert got["small"].samples == 5
    assert got["default"].datasets == ["stack-v2"]


def test_a_workspace_without_catalog_has_none():
    cfg = parse_config('[workspace]\nname = "w"\n', "specdeck.toml")
    assert cfg.dataset == [] and cfg.mix == [] and mixes(cfg.dataset, cfg.mix) == {}


@pytest.mark.parametrize("edit, expected", [
    # a mix line naming no catalog dataset
    (("dataset = \"humaneval-x\"\n\n[[mix]]\nname = \"small\"", "dataset = \"humaneval-xx\"\n\n[[mix]]\nname = \"small\""),
     "specdeck.toml:28: mix[1].dataset: 'humaneval-xx' is not a catalog dataset (known: humaneval-x, stack-v2)"),
    # the same dataset twice in one mix
    (("[[mix]]\nname = \"small\"\ndataset = \"humaneval-x\"", "[[mix]]\nname = \"code-mix\"\ndataset = \"stack-v2\""),
     "specdeck.toml:32: mix[2].dataset: mix 'code-mix' already takes 'stack-v2'; "
     "give it one [[mix]] line (samples adds up there)"),
    # two catalog entries of one name
    (('name = "stack-v2"', 'name = "humaneval-x"'),
     ["specdeck.toml:12: dataset[1].name: dataset 'humaneval-x' is defined twice",
      "specdeck.toml:21: mix[0].dataset: 'stack-v2' is not a catalog dataset (known: humaneval-x)",
      "specdeck.toml:37: mix[3].dataset: 'stack-v2' is not a catalog dataset (known: humaneval-x)"]),
    (("samples = 40", "samples = -1"),
     "specdeck.toml:22: mix[0].samples: Input should be greater than or equal to 0"),
    (("max_prompt_chars = 12000", "max_prompt_chars = 0"),
     "specdeck.toml:24: mix[0].max_prompt_chars: Input should be greater than 0"),
    (("size = 820", "licence = \"MIT\""),
     "specdeck.toml:7: dataset[0].licence: unknown key (check its spelling)"),
    (('file = "datasets/humaneval-x.jsonl"\n', ''),
     "specdeck.toml:4: dataset[0].file: required key is missing"),
    (('file = "datasets/stack-v2.parquet"', 'file = " "'),
     "specdeck.toml:16: dataset[1].file: Value error, is empty; give a path relative to the workspace folder"),
    (('name = "code-mix"\ndataset = "stack-v2"', 'name = "code mix"\ndataset = "stack-v2"'),
     "specdeck.toml:20: mix[0].name: Value error, use letters, digits, '.', '_' or '-' (at most 64), "
     "starting with a letter or digit"),
    (("size = 820", "size = \"820 rows\""),
     "specdeck.toml:7: dataset[0].size: Input should be a valid integer, unable to parse string as an integer"),
])
def test_config_mistakes_name_file_line_and_key(edit, expected):
    old, new = edit
    assert old in GOOD
    with pytest.raises(ConfigError) as err:
        parse_config(GOOD.replace(old, new, 1), "specdeck.toml")
    assert err.value.problems == (expected if isinstance(expected, list) else [expected])


def test_every_catalog_problem_is_reported_at_once():
    text = GOOD.replace('dataset = "humaneval-x"\n\n[[mix]]\nname = "small"', 'dataset = "nope"\n\n[[mix]]\nname = "small"')
    text = text.replace('[[mix]]\ndataset = "stack-v2"', '[[mix]]\ndataset = "gone"')
    with pytest.raises(ConfigError) as err:
        parse_config(text, "ws/specdeck.toml")
    assert [p.split(": ")[0:2] for p in err.value.problems] == [
        ["ws/specdeck.toml:28", "mix[1].dataset"], ["ws/specdeck.toml:37", "mix[3].dataset"]]


def test_resolve_mix_fills_files_from_the_catalog_and_names_what_is_missing():
    catalog = [DatasetConfig(name="a", source="x/a", file="a.jsonl"), DatasetConfig(name="b", source="x/b", file="b.pq")]
    mix = MixConfig(name="form", entries=[MixEntry(dataset="a", samples=3), MixEntry(dataset="b", file="/data/b2.pq")])
    resolved = resolve_mix(mix, catalog)
    assert [(e.dataset, e.file, e.samples) for e in resolved.entries] == [("a", "a.jsonl", 3), ("b", "/data/b2.pq", None)]
    assert mix.entries[0].file is None  # the given mix is not changed
    with pytest.raises(ValueError, match=r"mix 'form': 'c' not in the catalog and no file given"):
        resolve_mix(MixConfig(name="form", entries=[MixEntry(dataset="c")]), catalog)


def test_a_mix_needs_at_least_one_entry():
    with pytest.raises(ValueError, match="at least 1 item"):
        MixConfig(name="empty", entries=[])
