from pathlib import Path

import pytest

from backend.workspace import ConfigError
from backend.flows.workspace import load_workspace, parse_config

GOOD = """
[workspace]
name = "lab"

[[process]]
name = "sleeper"
kind = "training"
argv = ["python3", "-c", "import time; time.sleep(60)"]
cwd = "jobs"
stop_grace_s = 3

[process.readiness]
kind = "log"
pattern = "ready"

[process.restart]
mode = "on-failure"
max_tries = 2
"""


def test_good_config_becomes_specs(tmp_path: Path):
    (tmp_path / "specdeck.toml").write_text(GOOD)
    ws = load_workspace(tmp_path)
    assert ws.name == "lab"
    (spec,) = ws.process_specs()
    assert spec.name == "sleeper" and spec.kind.value == "training"
    assert spec.cwd == str(tmp_path / "jobs")
    assert spec.log_path == str(tmp_path / "logs" / "sleeper.log")
    assert spec.readiness.kind == "log" and spec.readiness.pattern == "ready"
    assert spec.restart.mode == "on-failure" and spec.restart.max_tries == 2
    assert spec.stop_grace_s == 3
    for d in ("logs", "run", "outputs"):
        assert (tmp_path / d).is_dir()


def test_every_mistake_named_with_file_line_and_key(tmp_path: Path):
    bad = GOOD + """
[[process]]
name = "two words"
kind = "trainer"
argv = []
colour = "blue"

[process.readiness]
kind = "http"
"""
    with pytest.raises(ConfigError) as ei:
        parse_config(bad, tmp_path / "specdeck.toml")
    msgs = ei.value.problems
    text = str(ei.value)
    lines = bad.splitlines()
    assert len(msgs) == 5, msgs
    def line_of(prefix: str, start: int) -> int:
        return next(i + 1 for i in range(start, len(lines)) if lines[i].startswith(prefix))
    second = next(i for i, l in enumerate(lines) if l.startswith('name = "two words"'))
    assert f"specdeck.toml:{line_of('name =', second)}: process[1].name:" in text
    assert f"specdeck.toml:{line_of('kind =', second)}: process[1].kind:" in text
    assert f"specdeck.toml:{line_of('argv =', second)}: process[1].argv:" in text
    assert f"specdeck.toml:{line_of('colour', second)}: process[1].colour: unknown key" in text
    assert "process[1].readiness:" in text and "url" in text


def test_syntax_error_names_line(tmp_path: Path):
    with pytest.raises(ConfigError) as ei:
        parse_config('[workspace]\nname = "x"\nbroken = [1,\n', tmp_path / "specdeck.toml")
    assert "specdeck.toml:" in str(ei.value) and "TOML syntax" in str(ei.value)


def test_duplicate_names_rejected(tmp_path: Path):
    text = GOOD + '\n[[process]]\nname = "sleeper"\nargv = ["true"]\n'
    with pytest.raises(ConfigError, match="used twice"):
        parse_config(text, "specdeck.toml")


def test_demo_workspace_created_when_nothing_chosen(_isolated_home: Path):
    ws = load_workspace()
    assert ws.is_demo
    assert ws.root == (_isolated_home / "demo").resolve()
    assert ws.config_path.exists()
    names = [s.name for s in ws.process_specs()]
    assert "demo-ticker" in names and "demo-batch" in names
    # a second load reuses the same file, does not rewrite it
    before = ws.config_path.stat().st_mtime_ns
    assert load_workspace().config_path.stat().st_mtime_ns == before


def test_environment_variable_selects_workspace(tmp_path: Path, monkeypatch):
    (tmp_path / "specdeck.toml").write_text(GOOD)
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
    assert load_workspace().root == tmp_path.resolve()


def test_chosen_folder_without_config_is_an_error_not_a_demo(tmp_path: Path):
    empty = tmp_path / "typo-ws"
    with pytest.raises(ConfigError, match="backend.cli init"):
        load_workspace(empty)
    assert not (empty / "specdeck.toml").exists()


SERVER_TOML = """
[workspace]
name = "srv"

[[server]]
name = "a"
model_path = "/models/a"   # the target
port = 30000
host = "127.0.0.1"         # written out even though it is the default

[server.speculative]
# the mistake under investigation
algorithm = "EAGLE"
draft_model_path = "/drafts/a"
num_steps = 3

[[server]]
name = "b"
model_path = "/models/b"
"""


def test_server_entry_is_edited_in_place(tmp_path: Path):
    from backend.sglang.config import ServerConfig
    from backend.workspace import update_server_entry

    (tmp_path / "specdeck.toml").write_text(SERVER_TOML)
    ws = load_workspace(tmp_path)
    cfg = ServerConfig.model_validate(ws.config.server[0])
    fixed = cfg.model_copy(update={
        "speculative": cfg.speculative.model_copy(update={"algorithm": "EAGLE3", "num_steps": None}),
        "tp_size": 2,
    })
    update_server_entry(ws, "a", fixed.model_dump(mode="json", exclude_unset=True))
    text = (tmp_path / "specdeck.toml").read_text()
    assert 'algorithm = "EAGLE3"' in text and "num_steps" not in text
    assert "tp_size = 2" in text
    for kept in ("# the target", "# the mistake under investigation", "# written out even though",
                 'host = "127.0.0.1"', 'model_path = "/models/b"'):
        assert kept in text
    assert ws.config.server[0]["speculative"]["algorithm"] == "EAGLE3"


def test_invalid_server_edit_leaves_the_file_alone(tmp_path: Path):
    from backend.workspace import update_server_entry

    (tmp_path / "specdeck.toml").write_text(SERVER_TOML)
    ws = load_workspace(tmp_path)
    with pytest.raises(ConfigError, match="port"):
        update_server_entry(ws, "a", {"port": 70000})
    assert (tmp_path / "specdeck.toml").read_text() == SERVER_TOML
    assert ws.config.server[0]["port"] == 30000
