"""The Servers page with a [[router]] in front of three simulated EAGLE-3 servers, in Chromium: the router's
state, policy and healthy count, and each worker's membership, accept_len and tok/s side by side.  The
screenshot goes to $SPECDECK_SHOTS (a folder) when set."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e._dashboard import browser, open_page, serve, settle
from tests.helpers import free_port
from tests.simws import make_models

pytestmark = [pytest.mark.browser, pytest.mark.timeout(420)]

REPO = Path(__file__).resolve().parents[2]
CLUSTER_PY = os.environ.get("SPECDECK_CLUSTER_PYTHON") or str(REPO / ".venv-cluster" / "bin" / "python")


def _workspace(root: Path, models: Path) -> Path:
    target, draft = make_models(models)
    root.mkdir(parents=True)
    text = '[workspace]\nname = "fleet-demo"\n\n[telemetry]\nsource = "fake"\n'
    for i, name in enumerate(("llama-a", "llama-b", "llama-c")):
        text += (f'\n[[server]]\nname = "{name}"\nmodel_path = "{target}"\nport = {free_port()}\nsimulate = true\n'
                 f'sglang_version = "0.5.10"\ndecode_log_interval = 5\nbaseline_tok_s = 90.0\ngpus = [{i}]\n'
                 f'env = {{ SPECDECK_SIM_SPEED = "200", SPECDECK_SIM_TRAFFIC = "{2 + 2 * i}", '
                 f'SPECDECK_SIM_SEED = "{i}" }}\n'
                 f'\n[server.speculative]\nalgorithm = "EAGLE3"\ndraft_model_path = "{draft}"\nnum_steps = 3\n'
                 f'eagle_topk = 1\nnum_draft_tokens = 4\n')
    text += (f'\n[[router]]\nname = "fleet"\nport = {free_port()}\nmetrics_port = {free_port()}\n'
             f'policy = "cache_aware"\nhealth_check_interval_s = 1\npython = "{CLUSTER_PY}"\n')
    (root / "specdeck.toml").write_text(text)
    return root


def _cli(ws: Path, *args: str) -> None:
    r = subprocess.run([sys.executable, "-m", "backend.cli", "--workspace", str(ws), *args], cwd=REPO,
                       capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_servers_page_shows_the_router_and_its_workers_side_by_side(tmp_path):
    from playwright.sync_api import expect

    ws = _workspace(tmp_path / "ws", tmp_path / "models")
    home = tmp_path / "home"
    with serve(home, workspace=ws, env_extra={"SPECDECK_SIM_SPEED": "200"}) as url:
        for name in ("llama-a", "llama-b", "llama-c", "fleet"):
            _cli(ws, "processes", "start", name, "--launch-anyway")
        with browser(width=1400, height=1000) as page:
            page.goto(url.page(), wait_until="domcontentloaded")
            expect(page.get_by_text("Workspace:").first).to_be_visible(timeout=120_000)
            open_page(page, "Servers")
            settle(page)
            box = page.locator(".st-key-srv-router-fleet")
            expect(box.get_by_text("3/3 workers healthy")).to_be_visible(timeout=90_000)
            expect(box.get_by_text("cache_aware")).to_be_visible()
            grid = box.locator("[data-testid='stDataFrame']")
            expect(grid).to_be_visible()
            # every server has decode lines (built-in traffic): accept_len and tok/s are figures, not N/A
            page.wait_for_timeout(4000)
            page.locator("[data-testid='stMainBlockContainer']").evaluate("e => e.scrollIntoView()")
            shot = tmp_path / "servers-router.png"
            box.screenshot(path=str(tmp_path / "router-box.png"))
            page.screenshot(path=str(shot), full_page=False)
            dest = os.environ.get("SPECDECK_SHOTS")
            if dest:
                Path(dest).mkdir(parents=True, exist_ok=True)
                shutil.copy(shot, Path(dest) / shot.name)
                shutil.copy(tmp_path / "router-box.png", Path(dest) / "router-box.png")
    assert shot.stat().st_size > 10_000
