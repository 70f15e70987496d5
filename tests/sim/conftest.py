"""Fixtures of the simulator's tests: model folders and simulated servers on 127.0.0.1,
each stopped at the end of its module."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import pytest  # noqa: E402

from backend.sim.models import make_draft_dir, make_target_dir  # noqa: E402
from tests.sim.simproc import Sim, start_sim  # noqa: E402


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    base = tmp_path_factory.mktemp("models")
    return {
        "target": make_target_dir(base / "target"),
        "eagle3": make_draft_dir(base / "eagle3"),
        "narrow": make_draft_dir(base / "narrow", fc_in_features=7168),
    }


@pytest.fixture(scope="module")
def launch(tmp_path_factory):
    started: list[Sim] = []

    def _launch(args: list[str], env: dict[str, str] | None = None, *, speed: str = "200") -> Sim:
        log = tmp_path_factory.mktemp("sim") / "server.log"
        sim = start_sim(args, log, {"SPECDECK_SIM_SPEED": speed, "SPECDECK_SIM_SEED": "1", **(env or {})})
        started.append(sim)
        return sim

    yield _launch
    for sim in started:
        sim.stop()
