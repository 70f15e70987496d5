"""Show the GPUs page on readings recorded on a GPU machine (for screenshots).

    .venv/bin/python -m streamlit run perf/replay_gpus_page.py -- FRAMES.jsonl

FRAMES.jsonl is written by ``perf/gpu_proof.py``: one telemetry snapshot per
line, taken with the real NVML adapter.  This script replays them through the
page's own code (app_pages/gpus.py) with a stand-in runtime whose sampler yields
the recorded GPU readings, attribution and sampler cost in a loop, with the
timestamps moved to now.  Host readings are this machine's.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import streamlit as st  # noqa: E402

from backend.telemetry.attribution import Attribution, Holder, JobUsage  # noqa: E402
from backend.telemetry.model import (  # noqa: E402
    GpuFrame,
    GpuProcess,
    GpuSample,
    MigDevice,
    NvmlState,
    NvmlStatus,
    SamplerCost,
    SlowFields,
)
from backend.telemetry.nvml import NvmlAdapter  # noqa: E402
from backend.telemetry.sampler import Sampler  # noqa: E402


def gpu_from(d: dict, t: float) -> GpuSample:
    d = dict(d, t=t)
    d["processes"] = None if d["processes"] is None else tuple(GpuProcess(**p) for p in d["processes"])
    d["throttle"] = None if d["throttle"] is None else tuple(d["throttle"])
    d["mig_devices"] = tuple(MigDevice(**m) for m in d["mig_devices"])
    d["slow"] = None if d["slow"] is None else SlowFields(**d["slow"])
    return GpuSample(**d)


def attribution_from(d: dict | None, t: float) -> Attribution | None:
    if d is None:
        return None
    return Attribution(
        t=t,
        holders=tuple(Holder(**h) for h in d["holders"]),
        jobs=tuple(JobUsage(**{**j, "pids": tuple(j["pids"]), "gpus": tuple(j["gpus"]),
                               "mem_by_gpu": tuple(tuple(x) for x in j["mem_by_gpu"])}) for j in d["jobs"]),
        by_gpu={int(k): tuple(v) for k, v in d["by_gpu"].items()},
    )


class ReplayAdapter(NvmlAdapter):
    def __init__(self, frames: list[dict]):
        super().__init__(lib=None, source="nvml")
        self.frames = frames
        self.k = 0
        s = frames[0]["state"]
        self._replay_state = NvmlState(NvmlStatus(s["status"]), s["message"], s["driver_version"], s["nvml_version"], "nvml")

    def state(self) -> NvmlState:
        return self._replay_state

    def gpu_count(self) -> int:
        return len(self.frames[0]["gpus"])

    def current(self) -> dict:
        return self.frames[(self.k - 1) % len(self.frames)]

    def sample(self) -> GpuFrame:
        f = self.frames[self.k % len(self.frames)]
        self.k += 1
        now = time.time()
        return GpuFrame(now, self._replay_state, tuple(gpu_from(g, now) for g in f["gpus"]), 0.0)

    def read_slow(self, *, pcie: bool = False) -> dict:
        return {}

    def read_pcie(self, i: int):
        return None


def per_sample(ewma: list[float | None]) -> list[float | None]:
    """Recover each sample's value from a running mean with alpha 0.1 (as
    recorded by samplers that kept only the exponential mean)."""
    out: list[float | None] = []
    for i, e in enumerate(ewma):
        if e is None or (i and ewma[i - 1] is None):
            out.append(e)
        else:
            out.append(e if i == 0 else (e - 0.9 * ewma[i - 1]) / 0.1)
    return out


class ReplaySampler(Sampler):
    def _attribute(self, frame):
        return attribution_from(self.adapter.current()["attribution"], frame.t)

    def cost(self) -> SamplerCost:
        frames = self.adapter.frames
        k = (self.adapter.k - 1) % len(frames)
        c = dict(frames[k]["cost"])
        if "median_ms" not in c:  # recorded before the windowed median existed
            us = sorted(v for v in per_sample([f["cost"]["nvml_per_gpu_us"] for f in frames])[: k + 1] if v is not None)
            ms = sorted(v for v in per_sample([f["cost"]["mean_ms"] for f in frames])[: k + 1] if v is not None)
            c["nvml_per_gpu_us"] = us[len(us) // 2] if us else None
            c["median_ms"] = ms[len(ms) // 2] if ms else None
        return SamplerCost(**{f: c.get(f) for f in SamplerCost.__dataclass_fields__})


class ReplayRuntime:
    def __init__(self, frames_path: str):
        frames = [json.loads(line) for line in open(frames_path, encoding="utf-8") if line.strip()]
        frames = [f for f in frames if f["gpus"]]
        self.recorded_at = frames[0]["t"]
        self.telemetry = ReplaySampler(ReplayAdapter(frames), disk_paths=[str(REPO)], interval_s=1.0, idle_samples=5)
        # preload the recorded run into the history, one reading per second ending now
        n = len(frames)
        now = time.time()
        for k in range(n):
            frame = self.telemetry.adapter.sample()
            t = now - (n - k)
            frame = GpuFrame(t, frame.state, tuple(replace(g, t=t) for g in frame.gpus), 0.0)
            self.telemetry._record(frame, self.telemetry.host.sample())
        self.telemetry.adapter.k = 0
        self.telemetry.start()


@st.cache_resource
def replay_runtime(path: str) -> ReplayRuntime:
    return ReplayRuntime(path)


if __name__ == "__main__":
    st.set_page_config(page_title="Specdeck · GPUs (replay)", layout="wide")
    path = sys.argv[1] if len(sys.argv) > 1 else str(REPO / "artifacts" / "gpu_proof" / "frames.jsonl")
    rt = replay_runtime(path)
    import ui.auth
    import ui.context

    # the page asks ui.context for its runtime, its live parts ask ui.auth
    ui.auth.runtime = ui.context.runtime = lambda **_: rt
    st.info(f"Replay of real readings recorded by perf/gpu_proof.py on "
            f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(rt.recorded_at))} "
            f"({rt.telemetry.adapter.state().message}); host figures are this machine's.", icon=":material/replay:")
    src = (REPO / "app_pages" / "gpus.py").read_text(encoding="utf-8")
    exec(compile(src, str(REPO / "app_pages" / "gpus.py"), "exec"), {"__name__": "__page__"})
