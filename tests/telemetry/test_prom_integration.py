"""A real Prometheus (Debian's 2.42 binary, a temp dir, a free port, a 1 s scrape interval) scraping
the simulator's /metrics and Specdeck's fake GPU exporter through the file_sd files Specdeck wrote,
read back by the GPUs page.

Two Specdecks on one box: workspace A is the dashboard under test (a simulated SGLang server, and
Prometheus's URL); workspace B stands for a second node, ``node-b``: fake GPUs, exported on a free
port in nvitop-exporter's names, its own targets file.  Prometheus reads both targets files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from backend import runtime as runtime_mod
from backend.flows.prom_targets import TargetsWriter, read_file_sd, writer_for
from backend.telemetry.promnames import node_name
from backend.telemetry.promql import PromClient
from backend.telemetry.sampler import attach_prometheus, make_sampler
from backend.workspace import PrometheusConfig
from tests.helpers import close_runtime, free_port, line_charts, wait_for
from tests.simws import make_models

REPO = Path(__file__).resolve().parents[2]
PAGE = str(REPO / "app_pages" / "gpus.py")
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"

pytestmark = pytest.mark.skipif(not os.path.exists(PROMETHEUS),
                                reason="Debian's prometheus is not installed (apt-get install --no-install-recommends prometheus)")


class _WsB:
    """Workspace B's what the targets writer reads: its root, name and [telemetry.prometheus]."""

    def __init__(self, root: Path, pcfg: PrometheusConfig):
        self.root, self.name = root, "node-b-ws"
        self.config = type("C", (), {"telemetry": type("T", (), {"prometheus": pcfg})})


@pytest.fixture
def prometheus(tmp_path):
    """A Prometheus reading both workspaces' targets files every second; ended by pid."""
    port = free_port()
    a_file = tmp_path / "a" / "run" / "prometheus-targets.json"
    b_file = tmp_path / "b" / "run" / "prometheus-targets.json"
    cfg = tmp_path / "prom" / "prometheus.yml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text(f"""global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: specdeck
    file_sd_configs:
      - files: ["{a_file}", "{b_file}"]
        refresh_interval: 1s
""")
    log = open(tmp_path / "prom" / "prometheus.log", "wb")
    proc = subprocess.Popen([PROMETHEUS, f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'prom' / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h",
                             "--web.enable-lifecycle"], stdout=log, stderr=subprocess.STDOUT,
                            cwd=tmp_path / "prom")
    try:
        client = PromClient(f"http://127.0.0.1:{port}", timeout_s=2)
        wait_for(client.ready, 30, "Prometheus ready", every=0.1)
        yield client
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        log.close()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_prometheus_scrapes_the_simulator_and_the_fake_gpu_exporter_and_the_gpus_page_groups_by_node(
        tmp_path, monkeypatch, prometheus):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SPECDECK_NODE_NAME", raising=False)
    here = node_name()
    # -- node B: fake GPUs exported on a free port, in its own targets file
    b_root = tmp_path / "b"
    (b_root / "run").mkdir(parents=True)
    export_port = free_port()
    b_cfg = PrometheusConfig(export=f"127.0.0.1:{export_port}")
    b = make_sampler(gpu_source="fake", fake_gpus=8,
                     managed=lambda: [("regen-b", "regeneration", os.getpid(), "RUNNING")])
    b.adapter._lib.fail("power", gpu=5)  # N/A on node B's GPU 5: N/A on the page, never 0
    b.adapter._lib.set_processes(3, [(os.getpid(), 30 * 1024**3)])  # node B's regeneration holds its GPU 3
    b.adapter.want_processes()
    attach_prometheus(b, b_cfg, root=b_root, config_path=b_root / "specdeck.toml", source="fake", node="node-b")
    b.start()
    try:
        assert b.exporter is not None and b.exporter.running, b.prom_problems
        b_writer = TargetsWriter(_WsB(b_root, b_cfg), servers=lambda: [], views=lambda: [],
                                 exporter_address=lambda: b.exporter.address, node="node-b")
        assert b_writer.sync() is True

        # -- node A: the dashboard, a simulated server, Prometheus's URL
        a_root = tmp_path / "a"
        target, draft = make_models(tmp_path / "models", draft="draft")
        sim_port = free_port()
        a_root.mkdir()
        (a_root / "specdeck.toml").write_text(f"""[workspace]
name = "prom-a"

[telemetry]
source = "fake"

[telemetry.prometheus]
url = "{prometheus.url}"
max_age_s = 6

[[server]]
name = "sim"
model_path = "{target}"
port = {sim_port}
simulate = true
sglang_version = "0.5.23"
env = {{ SPECDECK_SIM_SPEED = "200" }}

[server.speculative]
algorithm = "EAGLE3"
draft_model_path = "{draft}"
num_steps = 3
eagle_topk = 1
num_draft_tokens = 4
""")
        monkeypatch.setenv("SPECDECK_WORKSPACE", str(a_root))
        try:
            rt = runtime_mod.get_runtime(background=False)
            rt.telemetry.sample_once()
            assert rt.telemetry.prom is not None and rt.telemetry.prom.local_node == here
            rt.start("sim", actor="test", source="test", force=True)

            def running():
                rt.supervisor.poll()
                return rt.supervisor.view("sim").state.value == "RUNNING"

            wait_for(running, 90, "the simulated server RUNNING", every=0.2)
            writer = writer_for(rt.workspace, rt.fleet, rt.supervisor, rt.telemetry)
            assert writer.sync() is True
            (group,) = read_file_sd(writer.path, "specdeck")
            assert group.targets == (f"127.0.0.1:{sim_port}",)
            assert dict(group.labels) == {"node": here, "server": "sim", "specdeck_kind": "sglang",
                                          "workspace": "prom-a"}

            # -- Prometheus picks both files up and scrapes both targets; Specdeck reads it back
            def both():
                snap = rt.telemetry.prom.read_once()
                nodes = {n.node: n for n in snap.nodes}
                nb, na = nodes.get("node-b"), nodes.get(here)
                if nb is None or na is None or not na.servers or len(nb.gpus) < 8:
                    return None
                if any(g.util_gpu is None for g in nb.gpus) or na.servers[0].spec_accept_length is None:
                    return None
                if not any(h.job for h in nb.holders) or nb.health != "up" or na.servers[0].health != "up":
                    return None  # (a 1 s scrape on a busy machine may miss one: the next read has it)
                return snap

            snap = wait_for(both, 90, "node-b's GPUs and the simulator's gauges through Prometheus", every=0.5)
            assert snap.error is None
            nodes = {n.node: n for n in snap.nodes}
            nb, na = nodes["node-b"], nodes[here]
            assert [n.node for n in snap.remote] == ["node-b"] and na.is_local
            assert nb.health == "up" and nb.age_s is not None and nb.age_s < 6
            assert set(nb.sources) == {"nvitop", "specdeck"}
            local_b = b.latest()
            assert [g.uuid for g in nb.gpus] == [g.uuid for g in local_b.gpus]
            assert nb.gpus[5].power_w is None and "not exported" in nb.gpus[5].na["power_w"]
            assert all(g.power_w is not None for g in nb.gpus if g.index != 5)
            # node B's Specdeck says which job holds its GPU 3: read through Prometheus, not by pid here
            (held,) = [h for h in nb.holders if h.job]
            assert (held.gpu_index, held.pid, held.job, held.kind, held.how) == \
                (3, os.getpid(), "regen-b", "regeneration", "exporter")
            assert held.used_memory == 30 * 1024**3 and nb.who(3) == "regen-b"
            (srv,) = na.servers
            assert srv.name == "sim" and srv.health == "up" and srv.gen_throughput is not None
            assert srv.num_running_reqs is not None and srv.spec_accept_rate is not None

            # -- the GPUs page shows node A first, then node B's group with its 8 GPUs and the server
            at = AppTest.from_file(PAGE, default_timeout=60).run()
            assert not at.exception, at.exception
            subheaders = [h.value for h in at.subheader]
            assert subheaders.index(f"This node · {here}") < subheaders.index("Other nodes (through Prometheus)")
            titles = [m.value for m in at.markdown if m.value.startswith("**Node ")]
            assert len(titles) == 1 and titles[0].startswith("**Node node-b** · 8 GPUs") and "up]" in titles[0]
            heads = [m.value for m in at.markdown if m.value.startswith("**GPU ") and "ECC" not in m.value]
            assert len(heads) == 16  # this node's 8 fake GPUs, then node B's 8
            power = [m for m in at.markdown if m.value.startswith("Power ")]
            assert sum("N/A" in m.value for m in power) == 1
            holders = [d.value for d in at.dataframe if "found by" in d.value.columns]
            assert holders and list(holders[0]["job"]) == ["regen-b (regeneration)"] and list(holders[0]["node"]) == ["node-b"]
            servers = [d.value for d in at.dataframe if "server" in d.value.columns]
            assert servers and list(servers[0]["server"]) == ["sim"] and list(servers[0]["node"]) == [here]

            # -- node B's history, as this dashboard read it, on the page chosen by the URL
            at = AppTest.from_file(PAGE, default_timeout=60)
            at.query_params["node"] = "node-b"
            at.run()
            assert not at.exception, at.exception
            assert at.selectbox(key="gpu-hist-node").value == "node-b"
            charts = [f for f in line_charts(at) if "node node-b" in f["layout"]["title"]["text"]]
            assert len(charts) == 1
            traces = charts[0]["data"]
            assert [t["name"] for t in traces] == [f"GPU {i}" for i in range(8)]
            assert all(len([y for y in t["y"] if y is not None]) >= 1 for t in traces)

            # -- node B's exporter stops: its target goes down, its readings turn N/A with their age
            b.exporter.stop()

            def down():
                snap = rt.telemetry.prom.read_once()
                n = {x.node: x for x in snap.nodes}.get("node-b")
                return n if n is not None and n.health == "down" and all(g.util_gpu is None for g in n.gpus) else None

            nb = wait_for(down, 60, "node-b down with its readings N/A", every=0.5)
            assert "target down" in nb.problem and len(nb.gpus) == 8
            assert nb.gpus[0].na["util_gpu"].startswith("last reading ")
            at = AppTest.from_file(PAGE, default_timeout=60).run()
            assert not at.exception, at.exception
            titles = [m.value for m in at.markdown if m.value.startswith("**Node ")]
            assert "down]" in titles[0]
            assert any("target down" in e.value for e in at.error)
        finally:
            close_runtime(a_root)
    finally:
        b.stop()


@pytest.mark.timeout(120)
def test_the_dashboards_runtime_serves_its_exporter_and_lists_it_in_the_targets_file(tmp_path, monkeypatch):
    import json
    import urllib.request

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("SPECDECK_NODE_NAME", "node-rt")
    port = free_port()
    (tmp_path / "specdeck.toml").write_text(f"""[workspace]
name = "rt"

[telemetry]
source = "fake"

[telemetry.prometheus]
export = "127.0.0.1:{port}"
targets_file = "prom/targets.json"
""")
    monkeypatch.setenv("SPECDECK_WORKSPACE", str(tmp_path))
    try:
        rt = runtime_mod.get_runtime()  # background: sampler, exporter and the targets thread
        path = tmp_path / "prom" / "targets.json"
        wait_for(lambda: path.exists(), 30, "the targets file written by the runtime's thread", every=0.1)
        assert json.loads(path.read_text()) == [{"labels": {"node": "node-rt", "specdeck_kind": "gpu", "workspace": "rt"},
                                                 "targets": [f"127.0.0.1:{port}"]}]

        def scraped():
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                text = r.read().decode()
            return text if "gpu_utilization_Percentage{" in text else None

        text = wait_for(scraped, 30, "the exporter's GPU series", every=0.2)
        assert 'hostname="node-rt"' in text and 'specdeck_exporter_info{hostname="node-rt",source="fake",state="ok"}' in text
        assert text.count("gpu_memory_total_MiB{") == 8
        assert rt.telemetry.prom is None  # no url: nothing read from Prometheus
    finally:
        close_runtime(tmp_path)
    with pytest.raises(OSError):  # the runtime closed: the exporter stopped with the sampler
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2)
