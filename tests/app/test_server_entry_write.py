"""Writing an edited server config back into the workspace file (update_server_entry)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from backend.workspace import update_server_entry
from backend.flows.workspace import load_workspace

TOML = """# my workspace
[workspace]
name = "w"

[[server]]
name = "a"
model_path = "/models/a"   # the target

[[server]]
name = "b"
model_path = "/models/b"

[server.speculative]
# drafts under test
algorithm = "EAGLE3"
draft_model_path = "/drafts/b"
num_steps = 3

[server.cuda_graph]
max_bs = 16   # small box
"""


def _ws(tmp_path: Path):
    (tmp_path / "specdeck.toml").write_text(TOML)
    return load_workspace(tmp_path)


def _servers(tmp_path: Path) -> list[dict]:
    return tomllib.loads((tmp_path / "specdeck.toml").read_text())["server"]


def test_a_missing_table_is_created_with_the_real_values_only(tmp_path):
    ws = _ws(tmp_path)
    # what the relaunch form sends for an entry without [server.cuda_graph]
    update_server_entry(ws, "a", {"cuda_graph": {"disable": True, "max_bs": None},
                                  "speculative": {"algorithm": "EAGLE", "num_steps": None}})
    a = _servers(tmp_path)[0]
    assert a["cuda_graph"] == {"disable": True}
    assert a["speculative"] == {"algorithm": "EAGLE"}
    text = (tmp_path / "specdeck.toml").read_text()
    for kept in ("# my workspace", "# the target", "# drafts under test", "# small box"):
        assert kept in text


def test_a_table_of_nothing_but_none_is_not_created(tmp_path):
    ws = _ws(tmp_path)
    update_server_entry(ws, "a", {"cuda_graph": {"max_bs": None}, "speculative": {"algorithm": None},
                                  "mem_fraction_static": None})
    text = (tmp_path / "specdeck.toml").read_text()
    assert text == TOML  # nothing to write: the file is untouched, byte for byte


def test_none_removes_a_key_of_an_existing_table_and_comments_stay(tmp_path):
    ws = _ws(tmp_path)
    update_server_entry(ws, "b", {"cuda_graph": {"disable": True, "max_bs": None},
                                  "speculative": {"num_steps": None, "eagle_topk": 1}})
    b = _servers(tmp_path)[1]
    assert b["cuda_graph"] == {"disable": True}
    assert b["speculative"] == {"algorithm": "EAGLE3", "draft_model_path": "/drafts/b", "eagle_topk": 1}
    text = (tmp_path / "specdeck.toml").read_text()
    assert "# drafts under test" in text and "# the target" in text
    assert ws.config.server[1]["cuda_graph"] == {"disable": True}  # the workspace follows the file


def test_a_new_table_keeps_the_next_entry_apart(tmp_path):
    ws = _ws(tmp_path)
    update_server_entry(ws, "a", {"cuda_graph": {"max_bs": 8}})
    text = (tmp_path / "specdeck.toml").read_text()
    assert "[server.cuda_graph]\nmax_bs = 8\n\n[[server]]" in text
    assert [s["name"] for s in _servers(tmp_path)] == ["a", "b"]
    assert _servers(tmp_path)[1]["cuda_graph"] == {"max_bs": 16}
