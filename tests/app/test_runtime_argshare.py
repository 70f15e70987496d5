"""The dashboard lends its warm SGLang parsers to the command line: a running dashboard's runtime listens
on the workspace's run/argparser.sock (private), and stops when it closes."""

from __future__ import annotations

import stat

from backend.flows.workspace import load_workspace
from backend.runtime import Runtime
from backend.sglang import argshare

CONFIG = """\
[workspace]
name = "share"

[telemetry]
source = "fake"
"""


def test_a_running_dashboard_listens_on_its_run_folder_and_stops_on_close(tmp_path):
    (tmp_path / "specdeck.toml").write_text(CONFIG)
    ws = load_workspace(tmp_path)
    sock = argshare.socket_path(ws.run_dir)
    rt = Runtime(ws, background=True)
    try:
        mode = sock.lstat().st_mode
        assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
    finally:
        rt.close()
    assert not sock.exists()
    # a second dashboard of the same workspace in this process starts lending again
    rt = Runtime(ws, background=True)
    try:
        assert stat.S_ISSOCK(sock.lstat().st_mode)
    finally:
        rt.close()


def test_a_runtime_without_background_work_lends_nothing(tmp_path):
    (tmp_path / "specdeck.toml").write_text(CONFIG)
    ws = load_workspace(tmp_path)
    rt = Runtime(ws, background=False)
    try:
        assert not argshare.socket_path(ws.run_dir).exists()
    finally:
        rt.close()
