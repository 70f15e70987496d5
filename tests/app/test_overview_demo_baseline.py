"""The demo's tiny server states its single-stream baseline, so a deploy's first benchmark-time estimate has a
speed to work from (with no stored benchmark it was N/A)."""

from __future__ import annotations

from backend.flows.deploy import DeployRequest
from backend.flows.demo import DEMO_TINY_SERVER
from backend.flows.workspace import load_workspace
from backend.sglang.config import ServerConfig
from ui.train.deploy import DEMO_LOAD, load_estimate


def test_the_demo_tiny_server_has_a_baseline_and_the_first_deploy_estimate_is_known(tmp_path):
    ws = load_workspace(tmp_path / "demo", create_demo=True)
    servers = {c.name: c for c in (ServerConfig.model_validate(e) for e in ws.config.server)}
    tiny = servers[DEMO_TINY_SERVER]
    assert tiny.baseline_tok_s == 90.0
    req = DeployRequest(checkpoint=str(tmp_path / "ckpt"), server=DEMO_TINY_SERVER,
                        concurrency=(int(DEMO_LOAD["conc"]),), num_prompts=DEMO_LOAD["n"],
                        input_len=DEMO_LOAD["in"], output_len=DEMO_LOAD["out"], measure_baseline=True)
    est = load_estimate(req, [], [], tiny.baseline_tok_s)
    assert est is not None
    lo, point, hi, basis = est
    assert 0 < lo <= point <= hi
    assert "configured single-stream" in basis
    # without the configured figure and no stored result, nothing is known
    assert load_estimate(req, [], [], None) is None
