"""A program the dashboard runs for a page, or a file it reads by a path typed on a page, is an
operator's action: the runtime refuses any other request before anything runs or is read, and
audits the refusal with the user and the client address."""

from __future__ import annotations

import os
import stat

import pytest

from backend.auth import Caller, NotAuthorised, PathRefused
from backend.runtime import Runtime
from backend.sim.models import make_draft_dir, make_target_dir
from backend.train.generation import clear_cache
from backend.train.config import TrainRunConfig
from backend.flows.workspace import load_workspace
from state import audit
from tests.helpers import free_port

CLIENT = "10.0.0.9"
PASSWORD = "correct-horse-battery"
PROBE_ANSWER = '{"version": null, "package_dir": null, "cli": false, "console_script": null}'


def _fake_python(path, marker):
    """An "interpreter" that notes each run in ``marker`` and answers the generation probe."""
    path.write_text(f"#!/bin/sh\necho ran >> '{marker}'\necho '{PROBE_ANSWER}'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def ws(tmp_path):
    clear_cache()
    target = make_target_dir(tmp_path / "models" / "target")
    make_draft_dir(tmp_path / "models" / "draft")
    py = _fake_python(tmp_path / "fakepy", tmp_path / "ran-configured")
    (tmp_path / "specdeck.toml").write_text(f"""
[workspace]
name = "ops"

[telemetry]
source = "fake"

[[server]]
name = "sim"
model_path = "{target}"
port = {free_port()}
simulate = true

[[train]]
name = "t"
python = "{py}"
target_model = "/models/t"
train_data = "data.jsonl"
""")
    yield tmp_path
    clear_cache()


@pytest.fixture
def rt(ws):
    r = Runtime(load_workspace(ws), background=False)
    r.auth.users.add("olga", PASSWORD, role="operator")
    r.auth.users.add("vera", PASSWORD, role="viewer")
    yield r
    r.close()


def _signed_in(rt, name: str) -> Caller:
    token = rt.auth.login(Caller("0.0.0.0", CLIENT), name, PASSWORD).token
    return Caller("0.0.0.0", CLIENT, token=token)


def _callers(rt) -> dict[str, Caller]:
    return {"anonymous": Caller("0.0.0.0", CLIENT), "vera": _signed_in(rt, "vera")}


def _last(rt):
    return audit.recent(rt.store, limit=1)[0]


def test_refused_before_anything_runs_or_is_read_and_the_refusal_names_the_client(rt, ws, monkeypatch):
    preflights, pcie = [], []
    monkeypatch.setattr(rt.fleet, "preflight", lambda *a, **k: preflights.append(a) or [])
    monkeypatch.setattr(rt.telemetry, "request_slow", lambda **k: pcie.append(k))
    typed_py = _fake_python(ws / "typedpy", ws / "ran-typed")
    (ws / "ran-configured").unlink(missing_ok=True)  # the runtime's start asked the configured one
    new = TrainRunConfig(name="new", python=str(typed_py), target_model="/models/t", train_data="data.jsonl")
    calls = {
        "preflight": lambda c: rt.preflight(c, "sim", source="dashboard"),
        "probe": lambda c: rt.probe_python(c, str(typed_py), source="dashboard"),
        "detect": lambda c: rt.detect_generation(c, "t", source="dashboard"),
        "review": lambda c: rt.review_train(c, new, source="dashboard"),
        "read-pcie": lambda c: rt.read_pcie(c, source="dashboard"),
        "read": lambda c: rt.typed_path(c, str(ws / "models" / "target" / "config.json"), source="dashboard"),
    }
    for who, caller in _callers(rt).items():
        for action, call in calls.items():
            with pytest.raises(NotAuthorised):
                call(caller)
            last = _last(rt)
            assert (last.action, last.outcome, last.actor, last.client) == (action, "refused", who, CLIENT), action
    assert preflights == [] and pcie == []
    assert not (ws / "ran-typed").exists() and not (ws / "ran-configured").exists()  # no interpreter ran


def test_an_operator_and_a_local_session_run_them_audited(rt, ws, monkeypatch):
    pcie = []
    monkeypatch.setattr(rt.telemetry, "request_slow", lambda **k: pcie.append(k))
    typed_py = _fake_python(ws / "typedpy", ws / "ran-typed")
    for who, caller in (("olga", _signed_in(rt, "olga")), ("local", Caller("127.0.0.1", ""))):
        findings = rt.preflight(caller, "sim", source="dashboard")
        assert isinstance(findings, list)
        assert (_last(rt).action, _last(rt).outcome, _last(rt).actor) == ("preflight", "ok", who)
        probe = rt.probe_python(caller, str(typed_py), source="dashboard", refresh=True)
        assert probe.ok and (_last(rt).action, _last(rt).actor, _last(rt).outcome) == ("probe", who, "ok")
        assert rt.detect_generation(caller, "t", source="dashboard").generation is None  # no SpecForge there
        assert (_last(rt).action, _last(rt).actor) == ("detect", who)
        new = TrainRunConfig(name="new", python=str(typed_py), target_model="/models/t", train_data="data.jsonl",
                             capture_servers=["http://127.0.0.1:30000"], generation="gen3")
        assert rt.review_train(caller, new, source="dashboard").name == "new"
        assert (_last(rt).action, _last(rt).actor) == ("review", who)
        rt.read_pcie(caller, source="dashboard")
        assert (_last(rt).action, _last(rt).outcome, _last(rt).actor) == ("read-pcie", "ok", who)
    assert len(pcie) == 2
    assert (ws / "ran-typed").read_text().count("ran") >= 2
    assert _last(rt).client == "local"


def test_a_typed_path_lies_under_the_workspace_roots(rt, ws):
    olga = _signed_in(rt, "olga")
    inside = ws / "logs" / "train.log"
    inside.parent.mkdir(exist_ok=True)
    inside.write_text("step 1\n")
    assert rt.typed_path(olga, str(inside), source="dashboard") == inside.resolve()
    assert rt.typed_path(olga, "logs/train.log", source="dashboard") == inside.resolve()  # from the workspace
    os.symlink("/etc", ws / "etc-link")
    refusals = []
    for typed in ("/etc/shadow", "/etc/no-such-file-here", str(ws / "etc-link" / "shadow"), "../../etc/shadow"):
        with pytest.raises(PathRefused) as exc:
            rt.typed_path(olga, typed, source="dashboard")
        refusals.append(str(exc.value))
        assert str(ws.resolve()) in str(exc.value)  # the message names the roots
        last = _last(rt)
        assert (last.action, last.outcome, last.actor, last.client) == ("read", "refused", "olga", CLIENT)
    # an existing file and a missing one are refused alike: the refusal tells nothing of what exists
    assert refusals[0].replace("/etc/shadow", "P") == refusals[1].replace("/etc/no-such-file-here", "P")
    with pytest.raises(PathRefused):
        rt.typed_path(olga, "users.toml", source="dashboard")  # the users' hashes, under the workspace


def test_a_path_followed_again_is_audited_once(rt, ws):
    olga = _signed_in(rt, "olga")
    log = ws / "train.log"
    log.write_text("step 1\n")
    for _ in range(5):  # a page that reads the followed log every few seconds
        rt.typed_path(olga, str(log), source="dashboard")
    rows = [e for e in audit.recent(rt.store, limit=50) if e.target == str(log.resolve())]
    assert [(e.action, e.outcome, e.actor, e.client) for e in rows] == [("read", "ok", "olga", CLIENT)]


def test_an_edited_server_config_reads_no_folder_outside_the_roots(rt, ws, monkeypatch, tmp_path_factory):
    elsewhere = make_draft_dir(tmp_path_factory.mktemp("outside") / "draft")
    ran = []
    monkeypatch.setattr(rt.fleet, "preflight", lambda *a, **k: ran.append(a) or [])
    cfg = rt.fleet.config("sim")
    edited = cfg.model_copy(update={"speculative": cfg.speculative.model_copy(
        update={"algorithm": "EAGLE3", "draft_model_path": str(elsewhere)})})
    with pytest.raises(PathRefused, match="outside the folders"):
        rt.preflight(_signed_in(rt, "olga"), "sim", edited, source="dashboard")
    assert ran == []
    inside = edited.model_copy(update={"speculative": edited.speculative.model_copy(
        update={"draft_model_path": str(ws / "models" / "draft")})})
    rt.preflight(_signed_in(rt, "olga"), "sim", inside, source="dashboard")
    assert len(ran) == 1
    rt.preflight("cli-user", "sim", edited, source="cli")  # the command line is not limited
    assert len(ran) == 2
