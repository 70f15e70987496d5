"""relaunch_and_wait and restore against the simulator: a real server process under the
supervisor, its workspace file rewritten and given back byte for byte."""

from __future__ import annotations

import pytest

from backend.flows.relaunch import (PreflightFailed, RelaunchFailed, relaunch_and_wait, remember, restore,
                                    restored_text)
from specdeck_types.process import ProcState
from tests.bench.sweep_kit import SERVER, flag, make_models, session, write_workspace


@pytest.fixture
def ws(tmp_path):
    target, draft = make_models(tmp_path / "models")
    return write_workspace(tmp_path / "ws", target, draft)


def _spec(cfg, **kw):
    return cfg.model_copy(update={"speculative": cfg.speculative.model_copy(update=kw)})


@pytest.mark.timeout(240)
def test_relaunch_waits_for_ready_and_restore_gives_the_server_back(ws):
    original_text = (ws / "specdeck.toml").read_text()
    phases: list[str] = []
    with session(ws) as s:
        first = relaunch_and_wait(s, SERVER, s.fleet.config(SERVER), actor="t", source="test", timeout_s=90)
        v = s.sup.view(SERVER)
        assert v.state == ProcState.RUNNING and v.run_id == first.run_id
        original_argv = tuple(v.spec.argv)
        assert (ws / "specdeck.toml").read_text() == original_text  # same config: nothing written
        orig = remember(s, SERVER)
        assert orig.running and orig.file_text == original_text

        res = relaunch_and_wait(s, SERVER, _spec(s.fleet.config(SERVER), num_steps=5, eagle_topk=4,
                                                 num_draft_tokens=8),
                                actor="t", source="test", timeout_s=90, on_phase=lambda p, d: phases.append(p))
        v = s.sup.view(SERVER)
        assert v.state == ProcState.RUNNING and v.run_id == res.run_id != first.run_id
        assert (flag(v.spec.argv, "--speculative-num-steps"), flag(v.spec.argv, "--speculative-eagle-topk"),
                flag(v.spec.argv, "--speculative-num-draft-tokens")) == ("5", "4", "8")
        text = (ws / "specdeck.toml").read_text()
        assert "num_steps = 5" in text and "eagle_topk = 4" in text and "num_draft_tokens = 8" in text
        assert phases == ["preflight", "relaunching", "waiting for ready"]
        assert res.ready_after_s > 0

        back = restore(s, SERVER, orig, actor="t", source="test", timeout_s=90)
        v = s.sup.view(SERVER)
        assert v.state == ProcState.RUNNING and back.run_id == v.run_id != res.run_id
        assert tuple(v.spec.argv) == original_argv
        assert (ws / "specdeck.toml").read_text() == original_text  # comments and all


@pytest.mark.timeout(240)
def test_a_preflight_error_stops_nothing_and_names_the_finding(ws):
    with session(ws) as s:
        first = relaunch_and_wait(s, SERVER, s.fleet.config(SERVER), actor="t", source="test", timeout_s=90)
        before = (ws / "specdeck.toml").read_text()
        with pytest.raises(PreflightFailed) as exc:  # an EAGLE-3 draft served as EAGLE: accept_len 1.0
            relaunch_and_wait(s, SERVER, _spec(s.fleet.config(SERVER), algorithm="EAGLE"), actor="t",
                              source="test", timeout_s=90)
        assert "eagle3-draft-with-eagle" in str(exc.value) and exc.value.findings
        v = s.sup.view(SERVER)
        assert v.state == ProcState.RUNNING and v.run_id == first.run_id
        assert (ws / "specdeck.toml").read_text() == before


@pytest.mark.timeout(240)
def test_a_run_that_fails_to_start_reports_its_log_and_restore_brings_back_a_stopped_server(ws):
    with session(ws) as s:
        orig = remember(s, SERVER)
        assert not orig.running
        cfg = s.fleet.config(SERVER)
        broken = cfg.model_copy(update={"env": {**cfg.env, "SPECDECK_SIM_FAIL": "oom"}})
        with pytest.raises(RelaunchFailed) as exc:
            relaunch_and_wait(s, SERVER, broken, actor="t", source="test", timeout_s=90)
        assert "did not become ready" in str(exc.value)
        assert "Not enough memory" in exc.value.log_tail  # the server's own last words
        assert 'SPECDECK_SIM_FAIL = "oom"' in (ws / "specdeck.toml").read_text()
        assert restore(s, SERVER, orig, actor="t", source="test", timeout_s=90) is None
        assert (ws / "specdeck.toml").read_text() == orig.file_text
        assert not s.sup.view(SERVER).live


@pytest.mark.timeout(240)
def test_a_server_not_ready_in_time_fails_with_the_timeout(ws):
    with session(ws) as s:
        cfg = s.fleet.config(SERVER)
        slow = cfg.model_copy(update={"env": {**cfg.env, "SPECDECK_SIM_SPEED": "0.05"}})  # minutes of loading
        with pytest.raises(RelaunchFailed) as exc:
            relaunch_and_wait(s, SERVER, slow, actor="t", source="test", timeout_s=3)
        assert "was not ready after 3 s" in str(exc.value)
        assert s.sup.view(SERVER).state == ProcState.STARTING


def test_restored_text_swaps_only_that_entry():
    orig = '[workspace]\nname = "a"\n\n[[server]]\nname = "x"  # X\nmodel_path = "/m"\n\n' \
           '[[server]]\nname = "y"\nmodel_path = "/n"\n'
    edited = orig.replace('name = "a"', 'name = "b"').replace('model_path = "/m"', 'model_path = "/m"\ntp_size = 2') \
        .replace('model_path = "/n"', 'model_path = "/n2"')
    out = restored_text(edited, orig, "x")
    assert out == orig.replace('name = "a"', 'name = "b"').replace('model_path = "/n"', 'model_path = "/n2"')
