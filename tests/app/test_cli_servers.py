"""The command line runs a server's preflight before starting it, like the dashboard."""

from __future__ import annotations

import io
import json
import socket
from pathlib import Path

import pytest

from backend.cli import main
from backend.sim.models import make_draft_dir, make_target_dir
from state import Store, audit
from tests.helpers import free_port


@pytest.fixture
def ws(tmp_path: Path):
    target = make_target_dir(tmp_path / "m" / "kimi", architecture="DeepseekV3ForCausalLM",
                             hidden_size=7168, num_hidden_layers=61, vocab_size=163840,
                             model_type="kimi_k2")
    draft = make_draft_dir(tmp_path / "m" / "draft", kind="eagle3", target_hidden_size=7168,
                           hidden_size=7168, vocab_size=163840,
                           eagle_aux_hidden_state_layer_ids=[2, 30, 58])
    (tmp_path / "specdeck.toml").write_text(f"""
[workspace]
name = "cli"

[[server]]
name = "kimi"
model_path = "{target}"
port = {free_port()}
simulate = true
sglang_version = "0.5.10"
env = {{ SPECDECK_SIM_SPEED = "200" }}

[server.speculative]
algorithm = "EAGLE"
draft_model_path = "{draft}"
num_steps = 3
eagle_topk = 1
num_draft_tokens = 4
""")
    yield tmp_path
    main(["--workspace", str(tmp_path), "processes", "stop-all"], out=io.StringIO(), err=io.StringIO())


def _run(ws: Path, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    rc = main(["--workspace", str(ws), *argv], out=out, err=err)
    return rc, out.getvalue(), err.getvalue()


@pytest.mark.timeout(90)
def test_preflight_names_the_seeds_mistake(ws):
    rc, out, _ = _run(ws, "servers", "preflight", "kimi")
    assert rc == 1
    assert "EAGLE3" in out and "21504" in out and "7168" in out
    rc, out, _ = _run(ws, "servers", "preflight", "kimi", "--json")
    codes = {f["code"]: f["severity"] for f in json.loads(out)}
    assert "error" in codes.values()


@pytest.mark.timeout(90)
def test_start_is_refused_then_launch_anyway_is_audited(ws):
    rc, out, err = _run(ws, "processes", "start", "kimi")
    assert rc == 1 and "--launch-anyway" in err
    rc, out, _ = _run(ws, "processes", "list", "--json")
    (row,) = [r for r in json.loads(out) if r["name"] == "kimi"]
    assert row["pid"] is None

    rc, out, err = _run(ws, "processes", "start", "kimi", "--launch-anyway")
    assert rc == 0, err
    assert "kimi: STARTING" in out
    with Store(ws / "state.db") as store:
        actions = [(e.action, e.outcome) for e in audit.recent(store, target="kimi")]
    assert ("launch-anyway", "ok") in actions
    assert any(a == "launch" and o == "refused" for a, o in actions)


def _wait_running(ws: Path, name: str, timeout: float = 60.0) -> dict:
    import time

    deadline = time.time() + timeout
    while time.time() < deadline:
        rc, out, _ = _run(ws, "processes", "list", "--json")
        (row,) = [r for r in json.loads(out) if r["name"] == name]
        if row["state"] == "RUNNING":
            return row
        time.sleep(0.3)
    raise AssertionError(f"{name} stayed {row['state']}")


@pytest.fixture
def good_ws(ws: Path):
    cfg = ws / "specdeck.toml"
    cfg.write_text(cfg.read_text().replace('algorithm = "EAGLE"', 'algorithm = "EAGLE3"'))
    return ws


@pytest.mark.timeout(120)
def test_restart_from_the_command_line_finishes_without_a_dashboard(good_ws):
    rc, out, err = _run(good_ws, "processes", "start", "kimi")
    assert rc == 0, err
    first = _wait_running(good_ws, "kimi")
    rc, out, err = _run(good_ws, "processes", "restart", "kimi")
    assert rc == 0, err
    assert "kimi: STARTING" in out  # the old run stopped and the new one started before the command returned
    second = _wait_running(good_ws, "kimi")
    assert second["pid"] != first["pid"]


@pytest.mark.timeout(120)
def test_port_edited_to_a_busy_one_is_caught_while_the_server_runs(good_ws):
    rc, _, err = _run(good_ws, "processes", "start", "kimi")
    assert rc == 0, err
    _wait_running(good_ws, "kimi")
    with socket.socket() as holder:  # someone else listens on the new port
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = holder.getsockname()[1]
        cfg = good_ws / "specdeck.toml"
        text = cfg.read_text()
        import re

        cfg.write_text(re.sub(r"port = \d+", f"port = {busy}", text))
        rc, out, _ = _run(good_ws, "servers", "preflight", "kimi")
        assert rc == 1 and "port-busy" in out and str(busy) in out


@pytest.mark.timeout(60)
def test_command_line_preflight_sees_the_workspace_gpus(ws):
    cfg = ws / "specdeck.toml"
    text = cfg.read_text().replace('name = "cli"', 'name = "cli"\n\n[telemetry]\nsource = "fake"', 1)
    cfg.write_text(text.replace("simulate = true", "simulate = true\ngpus = [0, 9]\ntp_size = 2"))
    rc, out, _ = _run(ws, "servers", "preflight", "kimi")
    assert "gpu-missing" in out and "[9]" in out and "8 GPU(s)" in out  # the same 8 fake GPUs the dashboard shows


def test_servers_parselog_in_process_prints_records_and_refuses_an_unknown_kind(tmp_path, capsys):
    import io
    import json

    from backend.cli import main

    log = tmp_path / "server.log"
    log.write_text("[2025-10-01 12:00:00] Decode batch. #running-req: 1, #token: 10, token usage: 0.00, "
                   "gen throughput (token/s): 42.00, #queue-req: 0\nnot a line of SGLang's\n", encoding="utf-8")
    out = io.StringIO()
    assert main(["servers", "parselog", str(log), "--kinds", "decode"], out=out) == 0
    [rec] = [json.loads(x) for x in out.getvalue().splitlines()]
    assert rec["kind"] == "decode" and rec["gen_throughput"] == 42.0
    err = capsys.readouterr().err
    assert "2 lines, 1 decode" in err
    assert main(["servers", "parselog", str(log), "--kinds", "decode,bogus"], out=io.StringIO()) == 2
    assert "unknown kind(s) bogus" in capsys.readouterr().err
