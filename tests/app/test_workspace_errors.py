"""Every mistake in or around the workspace file ends in one ``file[:line]: reason`` message:
from load_workspace, from the command line (exit 2, no traceback) and from a running dashboard."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import pytest

from backend import runtime as runtime_mod
from backend.cli import main
from backend.workspace import ConfigError
from backend.flows.workspace import load_workspace, parse_config

PY = sys.executable

GOOD = f"""[workspace]
name = "errs"

[telemetry]
source = "fake"

[[process]]
name = "one"
argv = ["{PY}", "-c", "print(1)"]
"""


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as ei:
        parse_config(text, "ws/specdeck.toml")
    return ei.value.problems


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    rc = main(list(argv), out=out, err=err)
    return rc, out.getvalue(), err.getvalue()


# -- the file itself ---------------------------------------------------------------------------

def test_non_utf8_byte_names_file_line_and_column(tmp_path: Path):
    # line 2, column 10 holds the byte 0xe9 (Latin-1 "é")
    (tmp_path / "specdeck.toml").write_bytes(b'[workspace]\nname = "r\xe9sum\xe9"\n')
    with pytest.raises(ConfigError) as ei:
        load_workspace(tmp_path)
    assert ei.value.problems == [f"{tmp_path / 'specdeck.toml'}:2: not UTF-8 text: byte 0xe9 at column 10 "
                                 "(save the file as UTF-8)"]
    rc, out, err = cli("-w", str(tmp_path), "processes", "list")
    assert rc == 2 and out == ""
    assert err == f"error: {tmp_path / 'specdeck.toml'}:2: not UTF-8 text: byte 0xe9 at column 10 (save the file as UTF-8)\n"


def test_config_path_that_is_a_folder(tmp_path: Path):
    (tmp_path / "specdeck.toml").mkdir()
    rc, out, err = cli("-w", str(tmp_path), "processes", "list")
    assert rc == 2 and "Traceback" not in err
    assert err.startswith(f"error: {tmp_path / 'specdeck.toml'}: is a folder, not a config file")


def test_workspace_path_that_is_a_file(tmp_path: Path):
    (tmp_path / "specdeck.toml").write_text(GOOD)
    rc, _, err = cli("-w", str(tmp_path / "specdeck.toml"), "processes", "list")
    assert rc == 2
    assert err.startswith(f"error: {tmp_path / 'specdeck.toml'}: is a file, not a workspace folder")


def test_outputs_dir_that_cannot_be_made_names_its_line(tmp_path: Path):
    (tmp_path / "blocker").write_text("a file where a folder should go\n")
    text = GOOD.replace('name = "errs"\n', 'name = "errs"\noutputs_dir = "blocker/out"\n')
    (tmp_path / "specdeck.toml").write_text(text)
    expected = (f"{tmp_path / 'specdeck.toml'}:3: workspace.outputs_dir: cannot create "
                f"{tmp_path / 'blocker' / 'out'}: Not a directory")
    with pytest.raises(ConfigError) as ei:
        load_workspace(tmp_path)
    assert ei.value.problems == [expected]
    rc, _, err = cli("-w", str(tmp_path), "processes", "list")
    assert (rc, err) == (2, f"error: {expected}\n")


def test_outputs_dir_that_is_a_file(tmp_path: Path):
    (tmp_path / "outputs").write_text("not a folder\n")
    (tmp_path / "specdeck.toml").write_text(GOOD)
    rc, _, err = cli("-w", str(tmp_path), "processes", "list")
    assert rc == 2
    assert err == (f"error: {tmp_path / 'specdeck.toml'}: workspace.outputs_dir (not set, so the default "
                   f"'outputs'): cannot create "
                   f"{tmp_path / 'outputs'}: a file of that name is in the way\n")


def test_init_into_a_file_is_a_clear_error(tmp_path: Path):
    (tmp_path / "taken").write_text("x\n")
    rc, _, err = cli("init", str(tmp_path / "taken"))
    assert rc == 2 and err.startswith(f"error: {tmp_path / 'taken'}: is a file, not a workspace folder")


# -- values --------------------------------------------------------------------------------------

def test_duplicate_process_name_names_both_lines():
    text = GOOD + f'\n[[process]]\nname = "one"\nargv = ["{PY}"]\n'
    assert problems(text) == ["ws/specdeck.toml:12: process[1].name: 'one' is used twice "
                              "(first by process[0] at line 8)"]


def test_nan_grace_is_not_a_finite_number():
    text = GOOD + "stop_grace_s = nan\n"
    assert problems(text) == ["ws/specdeck.toml:10: process[0].stop_grace_s: Input should be a finite number"]


@pytest.mark.parametrize("table, key, value, reason", [
    ("restart", "backoff_s", "1e308", "Input should be less than or equal to 3600"),
    ("restart", "backoff_s", "inf", "Input should be a finite number"),
    ("restart", "backoff_max_s", "1e6", "Input should be less than or equal to 86400"),
    ("readiness", "interval_s", "inf", "Input should be a finite number"),
    ("readiness", "interval_s", "86400", "Input should be less than or equal to 3600"),
    ("readiness", "timeout_s", "1e308", "Input should be less than or equal to 604800"),
    ("readiness", "timeout_s", "-inf", "Input should be a finite number"),
])
def test_durations_are_finite_and_bounded(table, key, value, reason):
    extra = {"restart": 'mode = "on-failure"\n', "readiness": 'kind = "log"\npattern = "up"\n'}[table]
    text = GOOD + f"\n[process.{table}]\n{extra}{key} = {value}\n"
    line = len(text.splitlines())
    assert problems(text) == [f"ws/specdeck.toml:{line}: process[0].{table}.{key}: {reason}"]


def test_telemetry_interval_inf_is_rejected():
    text = GOOD.replace('source = "fake"', 'source = "fake"\ninterval_s = inf')
    assert problems(text) == ["ws/specdeck.toml:6: telemetry.interval_s: Input should be a finite number"]


# -- where the line is (sub-tables, dotted keys, servers) ----------------------------------------

SUBTABLES = f"""[[process]]
name = "a"
argv = ["{PY}"]

[process.readiness]
kind = "log"
pattern = "up"
timeout_s = 5

[process.restart]
mode = "on-failure"
max_tries = 1

[[process]]
name = "b"
kind = "other"
argv = ["{PY}"]

[process.restart]
mode = "on-failure"
max_tries = 1000

[process.readiness]
kind = "log"
pattern = "up"
timeout_s = 0
"""


def test_errors_in_sub_tables_point_at_their_own_line():
    # Hand-counted: process[1]'s max_tries is on line 21, its timeout_s on line 26.
    assert problems(SUBTABLES) == [
        "ws/specdeck.toml:26: process[1].readiness.timeout_s: Input should be greater than 0",
        "ws/specdeck.toml:21: process[1].restart.max_tries: Input should be less than or equal to 100",
    ]


def test_errors_in_dotted_keys_point_at_their_line():
    text = f'[[process]]\nname = "a"\nargv = ["{PY}"]\nreadiness.kind = "log"\nreadiness.pattern = "up"\n' \
           'readiness.timeout_s = 0\n'
    assert problems(text) == ["ws/specdeck.toml:6: process[0].readiness.timeout_s: Input should be greater than 0"]


SERVERS = """[[process]]
name = "shared"
argv = ["python3"]

[[server]]
name = "fine"
model_path = "/models/a"
port = 30000

[[server]]
name = "shared"
model_path = "/models/b"
port = 30001

[[server]]
name = "broken"
model_path = "/models/c"
port = 70000

[server.speculative]
algorithm = "EAGLE3"
num_steps = 0
"""


def test_server_errors_name_the_entry_and_line():
    assert problems(SERVERS) == [
        "ws/specdeck.toml:11: server[1].name: 'shared' is already the name of process[0] (line 2); "
        "every process and server needs its own name",
        "ws/specdeck.toml:18: server[2].port: Input should be less than or equal to 65535",
        "ws/specdeck.toml:22: server[2].speculative.num_steps: Input should be greater than or equal to 1",
    ]


def test_two_servers_of_one_name():
    text = SERVERS.split("[[server]]\nname = \"broken\"")[0].replace('name = "shared"\nmodel_path', 'name = "fine"\nmodel_path')
    assert problems(text) == [
        "ws/specdeck.toml:11: server[1].name: 'fine' is already the name of server[0] (line 6); "
        "every process and server needs its own name",
    ]


# -- a running dashboard ---------------------------------------------------------------------------

@pytest.fixture
def running(tmp_path: Path, monkeypatch):
    (tmp_path / "specdeck.toml").write_text(GOOD)
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
    rt = runtime_mod.get_runtime(background=False)
    yield tmp_path, rt
    runtime_mod.close_all()


def _rewrite(path: Path, data: bytes) -> None:
    before = path.stat().st_mtime_ns
    path.write_bytes(data)
    os.utime(path, ns=(before + 2_000_000_000, before + 2_000_000_000))  # a visibly newer mtime


def test_non_utf8_edit_shows_the_broken_config_banner(running):
    root, rt = running
    _rewrite(root / "specdeck.toml", GOOD.encode() + b'\n[[process]]\nname = "caf\xe9"\nargv = ["x"]\n')
    assert rt.maybe_reload() is False
    assert rt.config_error is not None
    assert str(rt.config_error) == (f"{root / 'specdeck.toml'}:12: not UTF-8 text: byte 0xe9 at column 12 "
                                    "(save the file as UTF-8)")
    assert rt.supervisor.names() == ["one"]  # the last good config stays
    _rewrite(root / "specdeck.toml", GOOD.encode() + f'\n[[process]]\nname = "two"\nargv = ["{PY}"]\n'.encode())
    assert rt.maybe_reload() is True and rt.config_error is None
    assert rt.supervisor.names() == ["one", "two"]


def test_edit_with_an_outputs_dir_that_cannot_be_made_is_not_taken_up(running):
    root, rt = running
    (root / "blocker").write_text("x\n")
    _rewrite(root / "specdeck.toml", GOOD.replace('name = "errs"', 'name = "errs"\noutputs_dir = "blocker/o"').encode()
             + f'\n[[process]]\nname = "two"\nargv = ["{PY}"]\n'.encode())
    assert rt.maybe_reload() is False
    assert str(rt.config_error).startswith(f"{root / 'specdeck.toml'}:3: workspace.outputs_dir: cannot create")
    assert rt.supervisor.names() == ["one"]


def test_config_replaced_by_a_folder_while_running(running):
    root, rt = running
    (root / "specdeck.toml").unlink()
    (root / "specdeck.toml").mkdir()
    assert rt.maybe_reload() is False
    assert str(rt.config_error).startswith(f"{root / 'specdeck.toml'}: is a folder, not a config file")


def test_dashboard_start_shows_the_error_not_a_traceback(tmp_path: Path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    (tmp_path / "specdeck.toml").write_bytes(b'[workspace]\nname = "\xff"\n')
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
    at = AppTest.from_file(str(Path(__file__).resolve().parents[2] / "app.py"), default_timeout=60)
    at.run()
    try:
        assert not at.exception
        codes = [c.value for c in at.code]
        assert f"{tmp_path / 'specdeck.toml'}:2: not UTF-8 text: byte 0xff at column 9 (save the file as UTF-8)" in codes
    finally:
        runtime_mod.close_all()


def test_dashboard_shows_the_banner_after_a_non_utf8_edit(tmp_path: Path, monkeypatch):
    from streamlit.testing.v1 import AppTest

    (tmp_path / "specdeck.toml").write_text(GOOD)
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
    app = str(Path(__file__).resolve().parents[2] / "app.py")
    try:
        at = AppTest.from_file(app, default_timeout=60)
        at.run()
        assert not at.exception and not at.warning
        _rewrite(tmp_path / "specdeck.toml", GOOD.encode() + b"# caf\xe9\n")
        assert runtime_mod.get_runtime().maybe_reload() is False  # what the config watcher does every 2 s
        at = AppTest.from_file(app, default_timeout=60)  # the next page a user opens
        at.run()
        assert not at.exception
        assert any("The workspace file was edited and has problems" in w.value for w in at.warning)
        assert (f"{tmp_path / 'specdeck.toml'}:10: not UTF-8 text: byte 0xe9 at column 6 (save the file as UTF-8)"
                in [c.value for c in at.code])
    finally:
        runtime_mod.close_all()
