"""``regen run`` as a real process against the simulator as a real process, over real HTTP on
127.0.0.1: the happy path, bad input rows, a torn last line, pause/stop and resume, a server
that goes away and comes back, and two servers of different speed.  Every process is ended."""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter

import pytest

from tests.helpers import free_port
from tests.regen.jobkit import (SimServer, end_process, progress_lines, read_jsonl, run_cli, run_cli_top, sibling,
                                start_cli, wait_for, write_rows)
from tests.simws import make_models, running_fleet

pytestmark = pytest.mark.timeout(240)

# how long the server stays away in the away test: several probes at the job's 2 s cap (backend/regen/job.py)
AWAY_S = 12.0


@pytest.fixture
def sims(tmp_path):
    started: list[SimServer] = []

    def make(**kw) -> SimServer:
        s = SimServer(tmp_path, **kw)
        started.append(s)
        return s.start()

    yield make
    for s in started:
        s.stop()


@pytest.fixture
def procs():
    started = []
    yield started
    for p in started:
        end_process(p)


def _done(out) -> int:
    lines = progress_lines(out)
    return lines[-1]["done"] if lines else 0


def test_cli_happy_path_bad_rows_status_validate_and_a_rerun_adds_nothing(tmp_path, sims):
    sim = sims()
    inp = tmp_path / "code.jsonl"
    ids = write_rows(inp, 60, multi_every=4)
    with open(inp, "a") as f:
        f.write('{"id": "broken", "conversations": [\n')                                  # line 61
        f.write(json.dumps({"id": "norole", "conversations": [{"content": "hi"}]}) + "\n")  # line 62
        f.write(json.dumps({"prompt": "a prompt-only row"}) + "\n")                       # line 63
    out = tmp_path / "out" / "code-regen.jsonl"
    r = run_cli("run", "--input", str(inp), "--server", sim.url, "--out", str(out), "--max-tokens", "16",
                "--concurrency", "8", "--temperature", "0")
    assert r.returncode == 0, r.stdout + r.stderr

    rows = read_jsonl(out)
    got = [row["id"] for row in rows]
    assert len(got) == len(set(got)) == 61
    prompt_row = [row for row in rows if row["id"] not in ids]
    assert len(prompt_row) == 1 and prompt_row[0]["id"].startswith("h-") and prompt_row[0]["prompt"] == "a prompt-only row"
    assert set(got) - {prompt_row[0]["id"]} == set(ids)
    by_id = {row["id"]: row for row in rows}
    multi = by_id["r0"]["conversations"]
    assert [m["role"] for m in multi] == ["system", "user", "assistant", "user", "assistant"]
    assert multi[0]["content"] == "You write Python." and multi[1]["content"] == "question 0: write a function"
    assert multi[3]["content"] == "now test 0"
    assert "old" not in multi[2]["content"] + multi[4]["content"] and multi[2]["content"].strip()
    one = by_id["r1"]
    assert one["status"] == "success" and [m["role"] for m in one["conversations"]] == ["user", "assistant"]
    assert one["regen"]["server"] == sim.url and one["regen"]["dataset"] == "code"
    assert one["regen"]["completion_tokens"] == 16 and one["regen"]["finish_reason"] == "length"

    skipped = read_jsonl(sibling(out, "_skipped.jsonl"))
    assert [(s["regen"]["line"], s["status"]) for s in skipped] == [(61, "skipped"), (62, "skipped")]
    assert skipped[0]["reason"].startswith("code.jsonl:61:")
    assert skipped[1]["reason"].startswith("code.jsonl:62: conversations[0]") and skipped[1]["id"] == "norole"
    assert read_jsonl(sibling(out, "_error.jsonl")) == []

    snap = progress_lines(out)[-1]
    assert (snap["state"], snap["total"], snap["done"], snap["failed"], snap["skipped"], snap["remaining"],
            snap["in_flight"]) == ("done", 63, 61, 0, 2, 0, 0)
    assert snap["datasets"] == {"code": {"total": 63, "done": 61, "failed": 0, "skipped": 2}}
    assert snap["servers"][sim.url]["done"] == 61 and snap["completion_tokens"] == 16 * (61 + 15)
    assert sum(snap["completion_tokens_hist"]["counts"]) == 61
    job = json.loads(sibling(out, ".job.json").read_text())
    assert job["servers"] == [{"url": sim.url, "name": None, "metrics": None}] and job["max_tokens"] == 16 and job["temperature"] == 0

    st = run_cli("status", str(out), "--json")
    assert st.returncode == 0 and json.loads(st.stdout)["done"] == 61
    text = run_cli("status", str(out)).stdout
    assert "done 61" in text and "skipped 2" in text and "dataset code: 61/63" in text
    v = run_cli("validate", str(out), "--input", str(inp))
    assert v.returncode == 0 and "validation passed" in v.stdout, v.stdout

    before = out.read_bytes()
    again = run_cli("run", "--out", str(out))  # parameters from .job.json
    assert again.returncode == 0, again.stdout + again.stderr
    assert out.read_bytes() == before
    assert len(read_jsonl(sibling(out, "_skipped.jsonl"))) == 2
    last = progress_lines(out)[-1]
    assert (last["state"], last["done"], last["skipped"], last["total"]) == ("done", 61, 2, 63)


def test_a_torn_last_line_is_cut_off_reported_and_its_row_asked_again(tmp_path, sims):
    sim = sims()
    inp = tmp_path / "in.jsonl"
    ids = write_rows(inp, 20)
    out = tmp_path / "out.jsonl"
    assert run_cli("run", "--input", str(inp), "--server", sim.url, "--out", str(out), "--max-tokens", "8").returncode == 0
    lines = out.read_bytes().splitlines(keepends=True)
    torn_id = json.loads(lines[-1])["id"]
    out.write_bytes(b"".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])  # a crash in mid-write

    r = run_cli("run", "--out", str(out))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "torn last line" in r.stdout
    rows = read_jsonl(out)  # every line is JSON again
    assert sorted(row["id"] for row in rows) == sorted(ids)
    assert [row["id"] for row in rows].count(torn_id) == 1
    assert run_cli("validate", str(out)).returncode == 0


@pytest.mark.slow
def test_pause_by_control_file_and_sigusr1_stop_by_sigterm_then_resume_to_the_end(tmp_path, sims, procs):
    sim = sims(env={"SPECDECK_SIM_BASELINE_TOK_S": "150", "SPECDECK_SIM_PEAK_TOK_S": "15000"})
    inp = tmp_path / "in.jsonl"
    ids = write_rows(inp, 400)
    out = tmp_path / "out.jsonl"
    args = ("run", "--input", str(inp), "--server", sim.url, "--out", str(out), "--max-tokens", "16",
            "--concurrency", "4")
    log = tmp_path / "job.log"

    # 1. pause from the page: the control file
    p = start_cli(*args, log=log)
    procs.append(p)
    wait_for(lambda: _done(out) >= 20, 60, "20 rows done")
    sibling(out, ".control").write_text("pause\n")
    assert p.wait(30) == 0
    states = [line["state"] for line in progress_lines(out)]
    assert states[-2:] == ["pausing", "paused"] and states[0] == "starting"
    paused = progress_lines(out)[-1]
    assert paused["in_flight"] == 0 and 20 <= paused["done"] < 400
    assert len(read_jsonl(out)) == paused["done"] and not sibling(out, ".control").exists()

    # 2. pause by SIGUSR1
    p = start_cli("run", "--out", str(out), log=log)
    procs.append(p)
    wait_for(lambda: progress_lines(out)[-1]["state"] == "running" and _done(out) >= paused["done"] + 20, 60,
             "20 more rows")
    p.send_signal(signal.SIGUSR1)
    assert p.wait(30) == 0
    assert progress_lines(out)[-1]["state"] == "paused"

    # 3. stop by SIGTERM: in-flight rows are cancelled, exit 130 after a flush
    p = start_cli("run", "--out", str(out), log=log)
    procs.append(p)
    before = _done(out)
    wait_for(lambda: progress_lines(out)[-1]["state"] == "running" and _done(out) >= before + 20, 60, "more rows")
    p.send_signal(signal.SIGTERM)
    assert p.wait(30) == 130
    last = progress_lines(out)[-1]
    assert last["state"] == "stopping" and last["done"] == len(read_jsonl(out))

    # 4. resume to the end
    r = run_cli("run", "--out", str(out), timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    got = [row["id"] for row in read_jsonl(out)]
    assert len(got) == len(set(got)) and set(got) == set(ids)
    assert progress_lines(out)[-1]["state"] == "done"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_server_stopped_mid_run_and_started_again_causes_no_error_row(tmp_path, sims, procs):
    """The server is away for AWAY_S: connection refused, the server probed with backoff (capped at
    2 s: several probes at the cap), the job waiting, rows asked again when it answers; no row fails
    because of it."""
    sim = sims(env={"SPECDECK_SIM_BASELINE_TOK_S": "150", "SPECDECK_SIM_PEAK_TOK_S": "15000"})
    inp = tmp_path / "in.jsonl"
    ids = write_rows(inp, 240, multi_every=5)
    out = tmp_path / "out.jsonl"
    p = start_cli("run", "--input", str(inp), "--server", sim.url, "--out", str(out), "--max-tokens", "16",
                  "--concurrency", "8", log=tmp_path / "job.log")
    procs.append(p)
    wait_for(lambda: _done(out) >= 40, 60, "40 rows done")
    sim.stop()
    stopped_at = time.monotonic()
    refused = f"waiting for {sim.url} (connection refused), "
    waiting = wait_for(lambda: [l for l in progress_lines(out) if l["state"] == "waiting"
                                and l["message"].startswith(refused)], 30, "state waiting, connection refused")
    assert waiting[0]["servers"][sim.url]["state"] == "waiting"
    later = wait_for(lambda: (lambda w: w if len(w) >= 3 else None)(
        [l for l in progress_lines(out) if l["state"] == "waiting"]), 20, "more snapshots while it is away")
    # nothing is done, nothing fails and nothing is in flight while it is away
    assert later[-1]["done"] == later[-2]["done"] and later[-1]["in_flight"] == 0
    assert all(l["failed"] == 0 for l in later)
    time.sleep(max(0.0, AWAY_S - (time.monotonic() - stopped_at)))  # the server stays away for AWAY_S
    away = [l for l in progress_lines(out) if l["state"] == "waiting"]
    assert away[-1]["t"] - away[0]["t"] >= AWAY_S - 6 and all(l["failed"] == 0 for l in away)
    sim.start()
    assert p.wait(120) == 0
    assert read_jsonl(sibling(out, "_error.jsonl")) == []
    got = [row["id"] for row in read_jsonl(out)]
    assert len(got) == len(set(got)) and set(got) == set(ids)
    last = progress_lines(out)[-1]
    assert last["state"] == "done" and last["failed"] == 0 and last["servers"][sim.url]["retries"] >= 1
    assert any(row["regen"]["retries"] >= 1 for row in read_jsonl(out))


def test_two_servers_of_different_speed_the_faster_serves_more(tmp_path, sims):
    fast = sims(env={"SPECDECK_SIM_BASELINE_TOK_S": "400", "SPECDECK_SIM_PEAK_TOK_S": "40000"})
    slow = sims(env={"SPECDECK_SIM_BASELINE_TOK_S": "100", "SPECDECK_SIM_PEAK_TOK_S": "10000"})
    inp = tmp_path / "in.jsonl"
    ids = write_rows(inp, 200)
    out = tmp_path / "out.jsonl"
    r = run_cli("run", "--input", str(inp), "--server", slow.url, "--server", fast.url, "--out", str(out),
                "--max-tokens", "16", "--concurrency", "4")
    assert r.returncode == 0, r.stdout + r.stderr
    rows = read_jsonl(out)
    assert sorted(row["id"] for row in rows) == sorted(ids)
    served = Counter(row["regen"]["server"] for row in rows)
    assert served[fast.url] + served[slow.url] == 200
    # 16 tokens take about 41 ms on the fast one and 165 ms on the slow one at 4 in flight
    # 4x the decode speed; with 16-token answers on a loaded machine the HTTP round trips narrow the gap
    # (132 against 68 was seen), so "more" is asserted as at least half as many again
    assert served[fast.url] >= 1.5 * served[slow.url], served
    snap = progress_lines(out)[-1]
    assert snap["servers"][fast.url]["done"] == served[fast.url]


def test_bad_arguments_exit_2_naming_the_problem(tmp_path):
    inp = tmp_path / "in.jsonl"
    write_rows(inp, 1)
    r = run_cli("run", "--input", str(inp), "--server", "http://127.0.0.1:1", "--out", str(tmp_path / "o.txt"))
    assert r.returncode == 2 and "must be a .jsonl file" in r.stderr
    r = run_cli("run", "--input", str(tmp_path / "nope.jsonl"), "--server", "http://127.0.0.1:1",
                "--out", str(tmp_path / "o.jsonl"))
    assert r.returncode == 2 and "nope.jsonl: no such file" in r.stderr
    r = run_cli("run", "--out", str(tmp_path / "o.jsonl"))
    assert r.returncode == 2 and "needs --input" in r.stderr
    r = run_cli("run", "--input", str(inp), "--server", "http://127.0.0.1:1", "--out", str(tmp_path / "o.jsonl"),
                "--temperature", "3")
    assert r.returncode == 2 and "temperature: 3.0 is not in [0, 2]" in r.stderr
    assert not os.path.exists(tmp_path / "o.jsonl")


def test_the_demo_workspace_mix_through_a_managed_server_name(tmp_path, sims):
    """``--mix`` and ``--server NAME`` from the workspace: the demo's code-mix (Parquet and JSONL,
    filters, bad and duplicate rows) regenerated; per-dataset counts as the dataset reader gives them."""
    from backend.regen.catalog import mixes
    from backend.regen.datasets import count_mix
    from backend.workspace import update_server_entry
    from backend.flows.workspace import load_workspace

    sim = sims()
    root = tmp_path / "ws"
    assert run_cli_top("init", str(root)).returncode == 0
    ws = load_workspace(root)
    names = [s["name"] for s in ws.config.server]
    assert "demo-llama70b-eagle3" in names  # the demo's 70B server (its other one serves the tiny trainer's target)
    name = "demo-llama70b-eagle3"
    update_server_entry(ws, name, {"port": sim.port})
    expected = count_mix(mixes(ws.config.dataset, ws.config.mix)["code-mix"], root)
    out = root / "outputs" / "regen" / "code-mix.jsonl"
    r = run_cli("run", "--mix", "code-mix", "--workspace", str(root), "--server", name,
                "--out", str(out), "--max-tokens", "8", "--concurrency", "16")
    assert r.returncode == 0, r.stdout + r.stderr
    snap = progress_lines(out)[-1]
    assert snap["state"] == "done" and snap["failed"] == 0
    assert {k: (d["done"], d["skipped"]) for k, d in snap["datasets"].items()} == {
        k: (c.rows, c.skipped) for k, c in expected.items()}
    assert snap["total"] == sum(c.total for c in expected.values())
    assert snap["servers"][sim.url]["name"] == name
    v = run_cli("validate", str(out))  # the inputs from the run's .job.json
    assert v.returncode == 0 and "input ids missing from the output and error files: 0" in v.stdout, v.stdout


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_managed_server_relaunched_with_an_edit_mid_run_causes_no_error_row(tmp_path, procs):
    """The Servers page's relaunch (the fleet's launch with an edited config: stop, start, load)
    while a job sends to that server by its workspace name: the job waits and no row fails."""
    target, draft = make_models(tmp_path / "m", draft="draft")
    root = tmp_path / "ws"
    text = f"""
[workspace]
name = "t"

[[server]]
name = "sim"
model_path = {json.dumps(str(target))}
port = {free_port()}
simulate = true
env = {{ SPECDECK_SIM_SPEED = "20", SPECDECK_SIM_BASELINE_TOK_S = "150", SPECDECK_SIM_PEAK_TOK_S = "15000" }}

[server.speculative]
algorithm = "EAGLE3"
draft_model_path = {json.dumps(str(draft))}
num_steps = 3
eagle_topk = 1
num_draft_tokens = 4
"""
    with running_fleet(root, text) as (_ws, _store, sup, fleet):
        fleet.launch("sim", actor="tester")
        wait_for(lambda: sup.view("sim").state.value == "RUNNING", 120, "the server ready")
        inp = tmp_path / "in.jsonl"
        ids = write_rows(inp, 240, multi_every=5)
        out = tmp_path / "out.jsonl"
        p = start_cli("run", "--input", str(inp), "--workspace", str(root), "--server", "sim", "--out", str(out),
                      "--max-tokens", "16", "--concurrency", "8", log=tmp_path / "job.log")
        procs.append(p)
        wait_for(lambda: _done(out) >= 40, 60, "40 rows done")
        first_run = sup.view("sim").run_id
        edited = fleet.config("sim").model_copy(update={"speculative": fleet.config("sim").speculative.model_copy(
            update={"num_steps": 4, "num_draft_tokens": 5})})
        fleet.launch("sim", edited, actor="tester")  # as the relaunch panel does: stop, start, load
        wait_for(lambda: (v := sup.view("sim")).run_id != first_run and v.state.value == "RUNNING", 120,
                 "the relaunched server ready")
        assert p.wait(180) == 0, (tmp_path / "job.log").read_text()
        # the only error rows allowed are the simulated model's own empty answers (an end-of-sequence
        # token drawn first), which have nothing to do with the relaunch
        errors = read_jsonl(sibling(out, "_error.jsonl"))
        assert [e for e in errors if e["regen"]["class"] != "empty_answer"] == []
        got = [row["id"] for row in read_jsonl(out)]
        assert len(got) == len(set(got)) and set(got) | {e["id"] for e in errors} == set(ids)
        assert any(l["state"] == "waiting" for l in progress_lines(out))  # it noticed the server go away
