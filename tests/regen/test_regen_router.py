"""A regeneration through a real sglang-router (the workspace's [[router]], asked by name) in front of
three simulated servers, with one server stopped (it leaves the router) and started again (it joins)
while the job runs: every row is written exactly once, and the progress log records the workers
behind the router."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from backend.flows.router_sync import RouterSync
from tests.helpers import free_port, wait_for
from tests.regen.jobkit import end_process, progress_lines, read_jsonl, run_cli, sibling, start_cli, write_rows
from tests.simws import make_models, running_fleet

pytestmark = pytest.mark.timeout(300)

CLUSTER_PY = os.environ.get("SPECDECK_CLUSTER_PYTHON") or str(
    Path(__file__).resolve().parents[2] / ".venv-cluster" / "bin" / "python")
SIM = '{ SPECDECK_SIM_SPEED = "200", SPECDECK_SIM_BASELINE_TOK_S = "300", SPECDECK_SIM_PEAK_TOK_S = "100000" }'
ROWS = 900
# what a request cut by its server leaving can come back as through the router
CUT_CLASSES = {"empty_answer", "bad_response", "aborted", "connection", "timeout"}


def _toml(target: Path, ports: list[int], rport: int) -> str:
    text = '[workspace]\nname = "regen-router"\n\n[telemetry]\nsource = "fake"\n'
    for name, port in zip("abc", ports):
        text += f'\n[[server]]\nname = "{name}"\nmodel_path = "{target}"\nport = {port}\nsimulate = true\nenv = {SIM}\n'
    return text + (f'\n[[router]]\nname = "fleet"\nport = {rport}\nmetrics_port = {free_port()}\npolicy = "round_robin"\n'
                   f'health_check_interval_s = 1\nhealth_failure_threshold = 1\npython = "{CLUSTER_PY}"\n')


def _running(sup, name: str) -> bool:
    v = sup.view(name)
    return v is not None and v.state.value == "RUNNING"


def _where(sup, name: str) -> str:
    """Where ``name`` is instead: its state, tries, detail and exit code, and the end of its log."""
    v = sup.view(name)
    if v is None:
        return "not managed"
    try:
        tail = Path(v.log_path).read_text(errors="replace")[-1500:]
    except OSError as exc:
        tail = f"(no log: {exc})"
    return (f"{v.state.value} since {v.state_since:.1f}, tries {v.tries}, exit code {v.exit_code}, "
            f"readiness {v.readiness!r}, detail {v.detail!r}; its log ends:\n{tail}")


def _done(out: Path) -> int:
    lines = progress_lines(out)
    return lines[-1]["done"] if lines else 0


@pytest.mark.slow
def test_a_regeneration_through_the_router_writes_every_row_once_while_a_server_leaves_and_joins(tmp_path):
    target, _ = make_models(tmp_path / "models")
    ports, rport = [free_port() for _ in range(3)], free_port()
    stop = threading.Event()
    proc = None
    with running_fleet(tmp_path / "ws", _toml(target, ports, rport)) as f:
        try:
            for n in ("a", "b", "c", "fleet"):
                f.sup.start(n, actor="test", source="test")
            for n in ("a", "b", "c", "fleet"):
                try:
                    wait_for(lambda n=n: _running(f.sup, n), 60, f"{n} RUNNING")
                except AssertionError as exc:
                    raise AssertionError(f"{exc}: {_where(f.sup, n)}") from None
            sync = RouterSync(f.fleet, f.sup, f.ws.run_dir)
            sync.run_in_background(stop, interval_s=0.3)
            urls = {f"http://127.0.0.1:{p}" for p in ports}

            def listed() -> set[str]:
                v = sync.view("fleet")
                return {w.url for w in v.workers if w.listed and w.healthy} if v else set()

            wait_for(lambda: listed() == urls, 60, "three healthy workers behind the router")

            inp = tmp_path / "rows.jsonl"
            ids = write_rows(inp, ROWS)
            out = tmp_path / "out" / "regen.jsonl"
            proc = start_cli("run", "--input", str(inp), "--server", "fleet", "--workspace", str(f.ws.root),
                             "--out", str(out), "--max-tokens", "24", "--concurrency", "12", "--temperature", "0",
                             log=tmp_path / "cli.log")
            wait_for(lambda: _done(out) >= 100, 120, "100 rows done")
            f.sup.stop("b", actor="test", source="test", wait=True)
            b_url = f"http://127.0.0.1:{ports[1]}"
            wait_for(lambda: b_url not in {w.url for w in sync.view("fleet").workers if w.listed}, 30,
                     "b out of the router")
            at_leave = _done(out)
            wait_for(lambda: _done(out) >= at_leave + 100, 120, "100 more rows with two servers")
            f.sup.start("b", actor="test", source="test")
            wait_for(lambda: listed() == urls, 60, "b back behind the router")
            assert proc.wait(240) == 0, (tmp_path / "cli.log").read_text()[-3000:]
            # A request in flight on b when it stopped can come back through the router as an answer
            # without text: the job records that row as failed, never loses or doubles it.  Every row is
            # in the output or the error file, exactly once; requeued, the failed ones are asked again
            # through the router (b back in it) and the output then holds every row once.
            first = [r["id"] for r in read_jsonl(out)]
            failed = read_jsonl(sibling(out, "_error.jsonl"))
            assert len(first) == len(set(first)) and set(first).isdisjoint(r["id"] for r in failed)
            assert len(first) + len(failed) == ROWS and len(failed) <= 12  # at most b's requests in flight
            assert all(r["regen"]["class"] in CUT_CLASSES for r in failed), failed
            behind_first = progress_lines(out)[-1]["behind"][f"http://127.0.0.1:{rport}"]
            if failed:
                assert run_cli("requeue", str(out)).returncode == 0
                again = run_cli("run", "--input", str(inp), "--server", "fleet", "--workspace", str(f.ws.root),
                                "--out", str(out), "--max-tokens", "24", "--concurrency", "12",
                                "--temperature", "0", timeout=240)
                assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
        finally:
            stop.set()
            end_process(proc)
    rows = read_jsonl(out)
    got = [r["id"] for r in rows]
    assert len(got) == len(set(got)) == ROWS  # every row exactly once
    assert set(got) == set(ids)
    assert all(r["status"] == "success" for r in rows)
    assert read_jsonl(sibling(out, "_error.jsonl")) == []
    last = progress_lines(out)[-1]
    assert last["state"] == "done" and last["done"] == ROWS
    behind = behind_first
    assert behind["error"] is None
    assert set(behind["workers"]) == urls
    assert sum(w["done"] for w in behind["workers"].values()) >= ROWS - len(failed)
    # b served rows before it left and after it joined again: more than the rows it had when it left
    assert all(w["done"] > 0 for w in behind["workers"].values())


def test_the_regeneration_page_lists_each_server_behind_the_router_with_its_rate():
    from streamlit.testing.v1 import AppTest

    def page():
        from ui.regen import blocks

        snap = {"servers": {"http://127.0.0.1:31000": {"name": "fleet", "state": "up", "in_flight": 12, "done": 500,
                                                       "failed": 0, "retries": 2, "req_s": 40.0, "tok_s": 900.0}},
                "behind": {"http://127.0.0.1:31000": {
                    "metrics": "http://127.0.0.1:31001", "read_at": None, "error": None,
                    "workers": {"http://127.0.0.1:18001": {"done": 260, "failed": 1, "healthy": True, "req_s": 21.5},
                                "http://127.0.0.1:18002": {"done": 240, "failed": 0, "healthy": False,
                                                           "req_s": None}}}}}
        blocks.server_lines(snap)

    at = AppTest.from_function(page).run()
    assert not at.exception
    text = [m.value for m in at.markdown]
    assert any("**fleet**" in t and "40.00 rows/s" in t for t in text)
    a = next(t for t in text if "18001" in t)
    b = next(t for t in text if "18002" in t)
    assert "healthy" in a and "260 done" in a and "1 failed" in a and "21.50 req/s" in a
    assert "unhealthy" in b and "240 done" in b and "req/s N/A" in b
