"""Specdeck's exporter serves NVML's total energy counter as a Prometheus counter (mJ, ``_total``) beside
nvitop-exporter's names; a GPU whose counter is not supported has no series, and the reader of the exporter's
text is unaffected by the extra family."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from backend.telemetry.promexport import SnapshotCollector
from backend.telemetry.promnames import series_from_exposition
from backend.telemetry.promsource import build_nodes
from backend.telemetry.sampler import make_sampler


def test_the_exporter_serves_each_gpus_energy_counter_and_leaves_an_unsupported_one_out():
    s = make_sampler(gpu_source="fake", fake_gpus=3)
    fake = s.adapter._lib
    fake.fail("energy", gpu=1)
    s.sample_once()
    s.read_energy_once()
    snap = s.sample_once()
    assert snap.energy_mj[0] > 0 and snap.energy_mj[1] is None and snap.energy_na[1] == "not supported on this GPU"
    col = SnapshotCollector(s.latest, hostname="node-e", source="fake", clock=lambda: snap.t + 1)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(col)
    text = generate_latest(reg).decode()
    assert "# TYPE specdeck_gpu_energy_consumption_mJ_total counter" in text
    series = series_from_exposition(text, snap.t)
    got = {int(x.labels["index"]): x.last[1] for x in series if x.name == "specdeck_gpu_energy_consumption_mJ_total"}
    assert got == {0: float(snap.energy_mj[0]), 2: float(snap.energy_mj[2])}
    (node,) = build_nodes(series, None, now=snap.t, max_age_s=30)
    assert [g.index for g in node.gpus] == [0, 1, 2] and node.gpus[0].util_gpu is not None
