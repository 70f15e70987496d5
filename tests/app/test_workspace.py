from pathlib import Path

import pytest

from backend.workspace import ConfigError, load_workspace, parse_config

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
