"""Prometheus as a telemetry source, without a Prometheus: DCGM exporter's and nvitop-exporter's
exposition text, query answers (good and bad, over real HTTP on 127.0.0.1), the N/A and age rules,
attribution across nodes, Specdeck's exporter read back, and the file_sd targets file."""

from __future__ import annotations

import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from backend.flows.prom_targets import (
    TargetGroup,
    TargetsFileError,
    TargetsWriter,
    exporter_group,
    read_file_sd,
    server_groups,
    write_file_sd,
)
from backend.telemetry.model import NvmlStatus
from backend.telemetry.promexport import SnapshotCollector, check_prometheus, parse_address
from backend.telemetry.promnames import MIB, node_of, series_from_exposition
from backend.telemetry.promql import PromClient, PromError, Target, parse_query_answer, parse_targets_answer
from backend.telemetry.promsource import Memory, build_nodes
from backend.telemetry.sampler import make_sampler

NOW = 1_800_000_000.0

# As dcgm-exporter 3.x/4.x writes it (default counters; Kubernetes pod mapping on GPU 1).
DCGM_TEXT = """\
# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).
# TYPE DCGM_FI_DEV_SM_CLOCK gauge
DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="dgx-a",DCGM_FI_DRIVER_VERSION="550.54.15"} 1980
DCGM_FI_DEV_SM_CLOCK{gpu="1",UUID="GPU-1b2c3d4e-0000-1111-2222-333344445555",pci_bus_id="00000000:2A:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="dgx-a",DCGM_FI_DRIVER_VERSION="550.54.15",container="sglang",namespace="llm",pod="target-0"} 1755
# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="dgx-a",DCGM_FI_DRIVER_VERSION="550.54.15"} 41
DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-1b2c3d4e-0000-1111-2222-333344445555",pci_bus_id="00000000:2A:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="dgx-a",DCGM_FI_DRIVER_VERSION="550.54.15",container="sglang",namespace="llm",pod="target-0"} 63
# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="dgx-a",DCGM_FI_DRIVER_VERSION="550.54.15"} 71.329
DCGM_FI_DEV_POWER_USAGE{gpu="1",UUID="GPU-1b2c3d4e-0000-1111-2222-333344445555",pci_bus_id="00000000:2A:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="dgx-a",DCGM_FI_DRIVER_VERSION="550.54.15",container="sglang",namespace="llm",pod="target-0"} NaN
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="dgx-a",DCGM_FI_DRIVER_VERSION="550.54.15"} 0
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-1b2c3d4e-0000-1111-2222-333344445555",pci_bus_id="00000000:2A:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="dgx-a",DCGM_FI_DRIVER_VERSION="550.54.15",container="sglang",namespace="llm",pod="target-0"} 97
# HELP DCGM_FI_DEV_FB_FREE Framebuffer memory free (in MiB).
# TYPE DCGM_FI_DEV_FB_FREE gauge
DCGM_FI_DEV_FB_FREE{gpu="0",UUID="GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="dgx-a",DCGM_FI_DRIVER_VERSION="550.54.15"} 81004
DCGM_FI_DEV_FB_FREE{gpu="1",UUID="GPU-1b2c3d4e-0000-1111-2222-333344445555",pci_bus_id="00000000:2A:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="dgx-a",DCGM_FI_DRIVER_VERSION="550.54.15",container="sglang",namespace="llm",pod="target-0"} 3050
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="dgx-a",DCGM_FI_DRIVER_VERSION="550.54.15"} 1
DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-1b2c3d4e-0000-1111-2222-333344445555",pci_bus_id="00000000:2A:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="dgx-a",DCGM_FI_DRIVER_VERSION="550.54.15",container="sglang",namespace="llm",pod="target-0"} 77955
# HELP DCGM_FI_DEV_FB_RESERVED Framebuffer memory reserved (in MiB).
# TYPE DCGM_FI_DEV_FB_RESERVED gauge
DCGM_FI_DEV_FB_RESERVED{gpu="0",UUID="GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="dgx-a",DCGM_FI_DRIVER_VERSION="550.54.15"} 554
DCGM_FI_DEV_FB_RESERVED{gpu="1",UUID="GPU-1b2c3d4e-0000-1111-2222-333344445555",pci_bus_id="00000000:2A:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="dgx-a",DCGM_FI_DRIVER_VERSION="550.54.15",container="sglang",namespace="llm",pod="target-0"} 554
# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.
# TYPE DCGM_FI_DEV_XID_ERRORS gauge
DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="dgx-a",DCGM_FI_DRIVER_VERSION="550.54.15",err_code="0",err_msg="No Error"} 0
"""

# As nvitop-exporter writes it (prometheus_client appends the unit to each name).
NVITOP_TEXT = """\
# HELP nvitop_info NVITOP Prometheus Exporter.
# TYPE nvitop_info gauge
nvitop_info{cuda_driver_version="12.4",device_count="2",driver_version="550.54.15",hostname="10.0.0.7"} 1.0
# HELP gpu_utilization_Percentage GPU utilization (%).
# TYPE gpu_utilization_Percentage gauge
gpu_utilization_Percentage{devicename="NVIDIA A100-SXM4-80GB",hostname="10.0.0.7",index="0",uuid="GPU-aaaa"} 88.0
gpu_utilization_Percentage{devicename="NVIDIA A100-SXM4-80GB",hostname="10.0.0.7",index="1",uuid="GPU-bbbb"} 0.0
# HELP gpu_memory_total_MiB GPU memory total (MiB).
# TYPE gpu_memory_total_MiB gauge
gpu_memory_total_MiB{devicename="NVIDIA A100-SXM4-80GB",hostname="10.0.0.7",index="0",uuid="GPU-aaaa"} 81920.0
gpu_memory_total_MiB{devicename="NVIDIA A100-SXM4-80GB",hostname="10.0.0.7",index="1",uuid="GPU-bbbb"} 81920.0
# HELP gpu_memory_used_MiB GPU memory used (MiB).
# TYPE gpu_memory_used_MiB gauge
gpu_memory_used_MiB{devicename="NVIDIA A100-SXM4-80GB",hostname="10.0.0.7",index="0",uuid="GPU-aaaa"} 70000.0
gpu_memory_used_MiB{devicename="NVIDIA A100-SXM4-80GB",hostname="10.0.0.7",index="1",uuid="GPU-bbbb"} 4.0
# HELP gpu_power_usage_W GPU power usage (W).
# TYPE gpu_power_usage_W gauge
gpu_power_usage_W{devicename="NVIDIA A100-SXM4-80GB",hostname="10.0.0.7",index="0",uuid="GPU-aaaa"} 301.5
gpu_power_usage_W{devicename="NVIDIA A100-SXM4-80GB",hostname="10.0.0.7",index="1",uuid="GPU-bbbb"} 62.0
# HELP gpu_temperature_C GPU temperature (C).
# TYPE gpu_temperature_C gauge
gpu_temperature_C{devicename="NVIDIA A100-SXM4-80GB",hostname="10.0.0.7",index="0",uuid="GPU-aaaa"} 70.0
gpu_temperature_C{devicename="NVIDIA A100-SXM4-80GB",hostname="10.0.0.7",index="1",uuid="GPU-bbbb"} 33.0
# HELP process_info_info Process information.
# TYPE process_info_info gauge
process_info_info{command="python -m sglang.launch_server",devicename="NVIDIA A100-SXM4-80GB",hostname="10.0.0.7",index="0",pid="4242",status="running",username="alice",uuid="GPU-aaaa"} 1.0
# HELP process_gpu_memory_MiB Process GPU memory (MiB).
# TYPE process_gpu_memory_MiB gauge
process_gpu_memory_MiB{devicename="NVIDIA A100-SXM4-80GB",hostname="10.0.0.7",index="0",pid="4242",username="alice",uuid="GPU-aaaa"} 69000.0
process_gpu_memory_MiB{devicename="NVIDIA A100-SXM4-80GB",hostname="10.0.0.7",index="0",pid="5151",username="bob",uuid="GPU-aaaa"} 512.0
"""

SGLANG_TEXT = """\
# TYPE sglang:gen_throughput gauge
sglang:gen_throughput{engine_type="unified",model_name="llama",pp_rank="0",tp_rank="0"} 812.5
sglang:gen_throughput{engine_type="unified",model_name="llama",pp_rank="0",tp_rank="1"} 812.5
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{engine_type="unified",model_name="llama",pp_rank="0",tp_rank="0"} 16.0
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{engine_type="unified",model_name="llama",pp_rank="0",tp_rank="0"} 3.21
"""


def _target(url, labels, health="up", last=NOW - 1, error=""):
    return Target(url, labels, labels.get("job", "x"), health, error, last, 1.0)


def test_dcgm_exposition_becomes_gpu_samples_with_na_never_zero():
    series = series_from_exposition(DCGM_TEXT, NOW, {"job": "dcgm", "instance": "10.0.0.5:9400"})
    tgt = _target("http://10.0.0.5:9400/metrics", {"job": "dcgm", "instance": "10.0.0.5:9400"})
    (node,) = build_nodes(series, [tgt], now=NOW, max_age_s=30)
    assert node.node == "dgx-a" and node.sources == ("dcgm",) and node.health == "up"
    assert node.age_s == pytest.approx(1.0)
    g0, g1 = node.gpus
    assert g0.uuid == "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52" and g0.name == "NVIDIA H100 80GB HBM3"
    assert g0.bus_id == "00000000:18:00.0"
    assert g0.util_gpu == 0.0  # a real 0 stays 0
    assert g0.mem_used == 1 * MIB and g0.mem_total == (1 + 81004 + 554) * MIB
    assert g0.sm_clock_mhz == 1980 and g0.temp_c == 41 and g0.power_w == pytest.approx(71.329)
    # a NaN reading is N/A with its reason, never 0
    assert g1.power_w is None and "NaN" in g1.na["power_w"]
    # a field DCGM's default counters lack is N/A, named
    assert g0.power_limit_w is None and "not exported by DCGM exporter on dgx-a" in g0.na["power_limit_w"]
    assert g0.util_mem is None and g0.processes is None and "lists no processes" in g0.na["processes"]
    # the pod that holds GPU 1 is its holder
    assert node.who(1) == "pod llm/target-0 (sglang)" and node.who(0) == "no processes reported"


def test_nvitop_exposition_gives_processes_and_a_job_known_by_pid_on_that_node():
    series = series_from_exposition(NVITOP_TEXT, NOW, {"job": "nvitop", "instance": "10.0.0.7:5050"})
    managed = [("target-a", "server", 4242, "10.0.0.7"), ("elsewhere", "server", 5151, "10.0.0.9")]
    (node,) = build_nodes(series, [], now=NOW, max_age_s=30, managed=managed)
    assert node.node == "10.0.0.7" and node.sources == ("nvitop",)
    g0, g1 = node.gpus
    assert g0.util_gpu == 88.0 and g0.mem_used == 70000 * MIB and g0.mem_total == 81920 * MIB
    assert g0.power_w == 301.5 and g0.temp_c == 70.0
    assert g0.sm_clock_mhz is None and "nvitop-exporter" in g0.na["sm_clock_mhz"]
    assert [(p.pid, p.used_memory) for p in g0.processes] == [(4242, 69000 * MIB), (5151, 512 * MIB)]
    assert g1.processes == ()  # nvitop lists processes: none on GPU 1, not N/A
    holders = {h.pid: h for h in node.holders}
    assert holders[4242].job == "target-a" and holders[4242].how == "pid" and holders[4242].user == "alice"
    # pid 5151 is a managed pid on another node: not this job
    assert holders[5151].job is None and node.who(0) == "target-a, pid 5151 (bob)"


def test_a_job_placed_on_a_node_and_gpu_is_attributed_without_pids():
    series = series_from_exposition(DCGM_TEXT, NOW, {"job": "dcgm", "instance": "10.0.0.5:9400"})
    class View:  # a supervisor view that knows where its job was placed
        name, kind, pid, node, gpus = "draft-train", "training", None, "dgx-a", [0]

    (node,) = build_nodes(series, None, now=NOW, max_age_s=30, managed=[View()])
    assert node.who(0) == "draft-train"
    assert [h.how for h in node.holders if h.gpu_index == 0] == ["placement"]
    assert node.health == "unknown" and "age is unknown" in node.problem


def test_sglang_gauges_per_server_on_their_node():
    series = series_from_exposition(SGLANG_TEXT, NOW, {"job": "specdeck", "instance": "10.0.0.7:30000",
                                                       "node": "gpu-b", "server": "target-a"})
    tgt = _target("http://10.0.0.7:30000/metrics", {"job": "specdeck", "instance": "10.0.0.7:30000", "node": "gpu-b"})
    (node,) = build_nodes(series, [tgt], now=NOW, max_age_s=30)
    (srv,) = node.servers
    assert node.node == "gpu-b" and node.gpus == ()
    assert srv.name == "target-a" and srv.model_name == "llama"
    assert srv.gen_throughput == 812.5  # tensor-parallel rank 1 repeats rank 0: not summed
    assert srv.num_running_reqs == 16 and srv.spec_accept_length == pytest.approx(3.21)
    assert srv.spec_accept_rate is None and "not exported" in srv.na["spec_accept_rate"]
    assert srv.health == "up" and srv.age_s == pytest.approx(1.0)


def test_a_series_older_than_max_age_is_na_with_its_age_and_a_stale_or_down_node_says_so():
    mem = Memory()
    labels = {"job": "dcgm", "instance": "10.0.0.5:9400"}
    series = series_from_exposition(DCGM_TEXT, NOW, labels)
    url = "http://10.0.0.5:9400/metrics"
    build_nodes(series, [_target(url, labels)], now=NOW, max_age_s=30, memory=mem)
    # 45 s later: the utilisation series has no sample in the last 30 s, the others do
    rest = [s for s in series_from_exposition(DCGM_TEXT, NOW + 45, labels) if s.name != "DCGM_FI_DEV_GPU_UTIL"]
    (node,) = build_nodes(rest, [_target(url, labels, last=NOW + 44)], now=NOW + 45, max_age_s=30, memory=mem)
    g0 = node.gpus[0]
    assert g0.util_gpu is None and g0.na["util_gpu"].startswith("last reading 45 s old (older than max_age_s 30 s)")
    assert g0.temp_c == 41
    # Prometheus stopped scraping the node 50 s ago: stale, with its age
    (node,) = build_nodes(rest, [_target(url, labels, last=NOW)], now=NOW + 50, max_age_s=30, memory=mem)
    assert node.health == "stale" and node.age_s == pytest.approx(50) and "older than max_age_s" in node.problem
    # the target is down now: every reading gone, the GPUs stay listed with their age
    down = _target(url, labels, health="down", last=NOW + 60, error="connection refused")
    (node,) = build_nodes([], [down], now=NOW + 61, max_age_s=30, memory=mem)
    assert node.health == "down" and "connection refused" in node.problem and "last good scrape" in node.problem
    assert len(node.gpus) == 2 and all(g.temp_c is None for g in node.gpus)
    # temperature was last read at +50 s: 11 s old, gone with the target
    assert node.gpus[1].na["temp_c"].startswith("last reading 11 s old, missing from the last read; target down")


def test_query_answers_vector_matrix_nan_inf_and_malformed():
    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0", "Hostname": "n1"}, "value": [NOW, "97"]},
        {"metric": {"__name__": "DCGM_FI_DEV_POWER_USAGE", "gpu": "0", "Hostname": "n1"}, "value": [NOW, "NaN"]},
        {"metric": {"__name__": "DCGM_FI_DEV_GPU_TEMP", "gpu": "0", "Hostname": "n1"}, "value": [NOW, "+Inf"]},
    ]}})
    a, b, c = parse_query_answer(body)
    assert a.last == (NOW, 97.0) and node_of(a.labels) == "n1"
    assert b.last == (NOW, None) and "NaN" in b.why[NOW]
    assert c.last == (NOW, None) and "+Inf" in c.why[NOW]
    matrix = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"__name__": "up"}, "values": [[NOW - 1, "1"], [NOW, "0"]]}]}})
    (m,) = parse_query_answer(matrix, "query_range")
    assert m.points == ((NOW - 1, 1.0), (NOW, 0.0))
    with pytest.raises(PromError) as e:
        parse_query_answer(json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
            {"metric": {}, "value": [NOW]}]}}))
    assert e.value.kind == "bad_answer" and "data.result[0].value" in str(e.value)
    with pytest.raises(PromError) as e:
        parse_query_answer("<html>502 Bad Gateway</html>")
    assert e.value.kind == "bad_answer" and "not JSON" in str(e.value)
    with pytest.raises(PromError) as e:
        parse_query_answer(json.dumps({"status": "success", "data": {"resultType": "streams", "result": []}}))
    assert "resultType" in str(e.value)
    targets = parse_targets_answer(json.dumps({"status": "success", "data": {"activeTargets": [{
        "labels": {"instance": "a:1", "job": "j"}, "scrapePool": "j", "scrapeUrl": "http://a:1/metrics",
        "lastError": "", "lastScrape": "2026-12-01T21:51:08.337134092Z", "health": "up", "scrapeInterval": "15s"},
        {"labels": {"instance": "b:1", "job": "j"}, "scrapePool": "j", "scrapeUrl": "http://b:1/metrics",
         "lastError": "", "lastScrape": "0001-01-01T00:00:00Z", "health": "unknown", "scrapeInterval": "1m"}]}}))
    assert targets[0].last_scrape == pytest.approx(1796161868.337134, abs=1e-3) and targets[0].interval_s == 15
    assert targets[1].last_scrape is None and targets[1].interval_s == 60


class _Fake(BaseHTTPRequestHandler):
    mode = "ok"

    def log_message(self, *a):
        pass

    def do_GET(self):
        mode = type(self).mode
        if mode == "slow":
            time.sleep(2.0)
        if mode == "bad_data":
            body = json.dumps({"status": "error", "errorType": "bad_data",
                               "error": "invalid parameter \"query\": 1:5: parse error: unclosed left parenthesis"})
            self.send_response(400)
        elif mode == "proxy":
            body = "upstream connect error"
            self.send_response(503)
        else:
            body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}})
            self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        try:
            self.wfile.write(body.encode())
        except OSError:
            pass


@pytest.fixture
def fake_prom():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Fake)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(5)


@pytest.mark.parametrize("mode,kind,status,words", [
    ("bad_data", "bad_data", 400, "unclosed left parenthesis"),
    ("proxy", "http", 503, "upstream connect error"),
    ("slow", "timeout", None, "no answer within 0.3 s"),
    ("ok", None, None, ""),
])
def test_client_errors_over_http(fake_prom, mode, kind, status, words):
    _Fake.mode = mode
    client = PromClient(f"http://127.0.0.1:{fake_prom.server_address[1]}", timeout_s=0.3)
    if kind is None:
        assert client.query("up") == []
        return
    with pytest.raises(PromError) as e:
        client.query("sum(")
    assert e.value.kind == kind and e.value.status == status and words in str(e.value)
    assert "/api/v1/query" in str(e.value)


def test_client_unreachable_and_a_failed_read_keeps_the_nodes_aged():
    from backend.telemetry.promsource import PromSource

    client = PromClient("http://127.0.0.1:9", timeout_s=1)
    with pytest.raises(PromError) as e:
        client.targets()
    assert e.value.kind == "unreachable"
    src = PromSource(client, local_node="here", clock=lambda: NOW)
    snap = src.read_once()
    assert snap.error and "unreachable" in snap.error and snap.nodes == ()


def test_specdecks_exporter_reads_back_as_the_samplers_snapshot():
    from prometheus_client import CollectorRegistry, generate_latest

    s = make_sampler(gpu_source="fake", fake_gpus=4)
    fake = s.adapter._lib
    fake.fail("power", gpu=2)
    fake.set_processes(1, [(os.getpid(), 3 * 1024**3)])
    s.adapter.want_processes()
    snap = s.sample_once()
    assert snap.state.status is NvmlStatus.OK
    col = SnapshotCollector(s.latest, hostname="node-x", source="fake", clock=lambda: snap.t + 1)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(col)
    text = generate_latest(reg).decode()
    assert "gpu_utilization_Percentage{" in text and 'hostname="node-x"' in text
    series = series_from_exposition(text, snap.t, {"job": "specdeck", "instance": "127.0.0.1:9464"})
    (node,) = build_nodes(series, None, now=snap.t, max_age_s=30)
    assert node.node == "node-x" and node.sources == ("nvitop", "specdeck")
    for local, remote in zip(snap.gpus, node.gpus):
        assert remote.index == local.index and remote.uuid == local.uuid
        assert remote.util_gpu == pytest.approx(local.util_gpu)
        assert remote.mem_used == pytest.approx(local.mem_used, abs=1)
        assert remote.mem_total == pytest.approx(local.mem_total, abs=1)
        assert remote.temp_c == pytest.approx(local.temp_c)
    assert snap.gpus[2].power_w is None and node.gpus[2].power_w is None  # N/A stays N/A
    assert [p.pid for p in node.gpus[1].processes] == [os.getpid()]
    # a stale snapshot exports no GPU series: the reader shows N/A, not old figures as new
    col._clock = lambda: snap.t + 60
    text = generate_latest(reg).decode()
    assert "gpu_utilization_Percentage{" not in text and 'state="stale"' in text


def test_config_checks_name_the_file_line_and_key(tmp_path):
    cfg = tmp_path / "specdeck.toml"
    cfg.write_text('[workspace]\nname = "w"\n\n[telemetry.prometheus]\nurl = "localhost:9090"\nexport = "9464"\n')

    class P:
        url, export, token_file = "localhost:9090", "9464", None

    problems = check_prometheus(P, cfg)
    assert problems[0].startswith(f"{cfg}:5: telemetry.prometheus.url: ")
    assert problems[1].startswith(f"{cfg}:6: telemetry.prometheus.export: ") and "HOST:PORT" in problems[1]
    assert parse_address("[::1]:9464") == ("::1", 9464)
    with pytest.raises(ValueError):
        parse_address("127.0.0.1:99999")


class _View:
    def __init__(self, name, state, node=None):
        self.name, self.state, self.node = name, state, node


class _Srv:
    def __init__(self, name, port, host="127.0.0.1", enable_metrics=True):
        self.name, self.port, self.host, self.enable_metrics = name, port, host, enable_metrics


def test_targets_file_is_written_atomically_only_on_change_and_read_back(tmp_path):
    views = {"a": _View("a", "RUNNING"), "b": _View("b", "EXITED"), "c": _View("c", "STARTING", node="gpu-b"),
             "d": _View("d", "RUNNING")}
    servers = [_Srv("a", 30001), _Srv("b", 30002), _Srv("c", 30003, host="0.0.0.0"), _Srv("d", 30004, enable_metrics=False)]
    groups = server_groups(servers, views, workspace="w", node="gpu-a") + exporter_group("127.0.0.1:9464", workspace="w", node="gpu-a")
    path = tmp_path / "run" / "targets.json"
    assert write_file_sd(path, groups) is True
    before = path.stat().st_mtime_ns
    assert write_file_sd(path, groups) is False and path.stat().st_mtime_ns == before
    assert oct(path.stat().st_mode & 0o777) == "0o644"
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".")]  # no temporary left
    doc = json.loads(path.read_text())
    assert doc == [
        {"labels": {"node": "gpu-a", "server": "a", "specdeck_kind": "sglang", "workspace": "w"}, "targets": ["127.0.0.1:30001"]},
        {"labels": {"node": "gpu-b", "server": "c", "specdeck_kind": "sglang", "workspace": "w"}, "targets": ["gpu-b:30003"]},
        {"labels": {"node": "gpu-a", "specdeck_kind": "gpu", "workspace": "w"}, "targets": ["127.0.0.1:9464"]},
    ]
    back = read_file_sd(path, "specdeck")
    assert [g.targets for g in back] == [("127.0.0.1:30001",), ("gpu-b:30003",), ("127.0.0.1:9464",)]


def test_rays_service_discovery_file_and_bad_files(tmp_path):
    ray = tmp_path / "prom_metrics_service_discovery.json"
    ray.write_text(json.dumps([{"labels": {"job": "ray"}, "targets": ["10.0.0.5:44217", "10.0.0.5:8080", "10.0.0.5:44218"]}]))
    (g,) = read_file_sd(ray)
    assert g == TargetGroup(("10.0.0.5:44217", "10.0.0.5:8080", "10.0.0.5:44218"), (("job", "ray"),), "ray")
    ray.write_text('[{"labels": {"job": "ray"}, "targets": "10.0.0.5:44217"}]')
    with pytest.raises(TargetsFileError, match=r"\[0\]\.targets: expected a list"):
        read_file_sd(ray)
    ray.write_text('[{"targets": []},\n oops]')
    with pytest.raises(TargetsFileError, match=rf"{ray}:2: not JSON"):
        read_file_sd(ray)


def test_writer_follows_live_servers(tmp_path):
    class WS:
        root = tmp_path
        name = "w"

        class config:
            class telemetry:
                class prometheus:
                    targets_file = "run/prometheus-targets.json"

    views = [_View("a", "RUNNING")]
    w = TargetsWriter(WS, servers=lambda: [_Srv("a", 30001)], views=lambda: views, exporter_address=lambda: None,
                      node="here")
    assert w.sync() is True
    assert [g.targets for g in read_file_sd(w.path)] == [("127.0.0.1:30001",)]
    views[0] = _View("a", "EXITED")
    assert w.sync() is True and read_file_sd(w.path) == []
    assert w.sync() is False


def test_a_target_that_never_answered_still_shows_its_node_down():
    tgt = _target("http://10.0.0.9:9464/metrics", {"job": "specdeck", "instance": "10.0.0.9:9464", "node": "gpu-c",
                                                    "specdeck_kind": "gpu"}, health="down", last=NOW - 1,
                  error='Get "http://10.0.0.9:9464/metrics": dial tcp 10.0.0.9:9464: connect: connection refused')
    up_other = _target("http://10.0.0.3:9100/metrics", {"job": "node", "instance": "10.0.0.3:9100"})
    (node,) = build_nodes([], [tgt, up_other], now=NOW, max_age_s=30)
    assert node.node == "gpu-c" and node.health == "down" and node.gpus == ()
    assert "connection refused" in node.problem and node.age_s is None


def test_the_targets_view_holds_specdecks_file_and_rays(tmp_path):
    from ui.gpus_nodes import target_rows

    class WS:
        root = tmp_path
        name = "w"

        class config:
            class telemetry:
                class prometheus:
                    targets_file = "run/prometheus-targets.json"

    w = TargetsWriter(WS, servers=lambda: [_Srv("a", 30001)], views=lambda: [_View("a", "RUNNING")],
                      exporter_address=lambda: "127.0.0.1:9464", node="here")
    w.sync()
    w.ray_path = tmp_path / "ray" / "prom_metrics_service_discovery.json"
    w.ray_path.parent.mkdir()
    w.ray_path.write_text(json.dumps([{"labels": {"job": "ray"}, "targets": ["10.0.0.5:44217"]}]))
    view = w.view()
    assert view.ray_error is None
    assert [(r["from"], r["target"]) for r in target_rows(view)] == [
        ("Specdeck", "127.0.0.1:30001"), ("Specdeck", "127.0.0.1:9464"), ("Ray", "10.0.0.5:44217")]
    w.ray_path.write_text("{")
    view = w.view()
    assert view.ray_error.startswith(f"{w.ray_path}:1: not JSON") and len(view.groups) == 2


class _Routes(BaseHTTPRequestHandler):
    """A Prometheus stand-in: a query_range matrix, an instant vector and no targets; it keeps the queries."""

    asked: list = []

    def log_message(self, *a):
        pass

    def do_GET(self):
        from urllib.parse import parse_qs, urlsplit

        u = urlsplit(self.path)
        q = parse_qs(u.query)
        type(self).asked.append((u.path, q))
        labels = {"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "0", "Hostname": "n1", "job": "dcgm", "instance": "n1:9400"}
        if u.path == "/api/v1/query_range":
            start, end, step = float(q["start"][0]), float(q["end"][0]), float(q["step"][0])
            pts = []
            t = start
            while t <= end + 1e-6:
                pts.append([t, "NaN" if int(t) % 60 == 0 else str(int(t) % 100)])
                t += step
            doc = {"status": "success", "data": {"resultType": "matrix", "result": [{"metric": labels, "values": pts}]}}
        elif u.path == "/api/v1/query":
            doc = {"status": "success", "data": {"resultType": "vector", "result": [{"metric": labels, "value": [NOW, "42"]}]}}
        else:
            doc = {"status": "success", "data": {"activeTargets": []}}
        body = json.dumps(doc).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)


def test_the_first_read_backfills_history_with_query_range_then_records_each_read():
    from backend.telemetry.promsource import PromSource

    _Routes.asked = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Routes)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        src = PromSource(PromClient(f"http://127.0.0.1:{srv.server_address[1]}"), max_age_s=30, interval_s=2,
                         local_node="here", clock=lambda: NOW, backfill_s=300, backfill_step_s=15)
        snap = src.read_once()
        assert snap.error is None and snap.nodes[0].gpus[0].util_gpu == 42
        src.read_once()
        paths = [p for p, _ in _Routes.asked]
        assert paths.count("/api/v1/query_range") == 1  # once, at the first read
        rq = next(q for p, q in _Routes.asked if p == "/api/v1/query_range")
        assert rq["step"] == ["15"] and "last_over_time" in rq["query"][0] and "[30s]" in rq["query"][0]
        h = src.history("n1", 0, "util_gpu", NOW - 1000)
        assert len(h.t) == 20 + 2 and h.t == tuple(sorted(h.t))  # 300 s at 15 s, then the two reads
        assert h.value[-2:] == (42.0, 42.0)
        nan_at = [i for i, t in enumerate(h.t[:-2]) if int(t) % 60 == 0]
        assert nan_at and all(h.value[i] is None for i in nan_at)  # NaN in the past: a gap, never 0
        assert src.history("n1", 1, "util_gpu", NOW - 1000).t == ()
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(5)


class _Auth(BaseHTTPRequestHandler):
    seen: list = []

    def log_message(self, *a):
        pass

    def do_GET(self):
        type(self).seen.append(self.headers.get("Authorization"))
        ok = self.headers.get("Authorization") == "Bearer s3cret"
        body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": []}} if ok else
                          {"status": "error", "errorType": "unauthorized", "error": "missing or wrong token"})
        self.send_response(200 if ok else 401)
        self.end_headers()
        self.wfile.write(body.encode())


def test_token_file_relative_to_the_workspace_is_sent_as_bearer_and_a_missing_one_is_named(tmp_path):
    from backend.workspace import PrometheusConfig

    _Auth.seen = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Auth)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        (tmp_path / "prom.token").write_text("s3cret\n")
        (tmp_path / "specdeck.toml").write_text(f'[workspace]\nname = "w"\n\n[telemetry.prometheus]\nurl = "{url}"\n'
                                                'token_file = "missing.token"\n')
        s = make_sampler(gpu_source="fake", fake_gpus=1)
        from backend.telemetry.sampler import attach_prometheus

        attach_prometheus(s, PrometheusConfig(url=url, token_file="prom.token"), root=tmp_path,
                          config_path=tmp_path / "specdeck.toml", node="here")
        assert s.prom is not None and s.prom_problems == []
        assert s.prom.client.query("up") == [] and _Auth.seen[-1] == "Bearer s3cret"
        with pytest.raises(PromError) as e:
            PromClient(url).query("up")
        assert e.value.status == 401 and e.value.kind == "unauthorized"
        s2 = make_sampler(gpu_source="fake", fake_gpus=1)
        attach_prometheus(s2, PrometheusConfig(url=url, token_file="missing.token"), root=tmp_path,
                          config_path=tmp_path / "specdeck.toml", node="here")
        assert s2.prom is None
        assert s2.prom_problems == [f"{tmp_path / 'specdeck.toml'}:6: telemetry.prometheus.token_file: "
                                    f"{tmp_path / 'missing.token'}: No such file or directory"]
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(5)
