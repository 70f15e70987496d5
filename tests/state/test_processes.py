from __future__ import annotations

import pytest

from specdeck_types.process import Kind, ProcessSpec, ProcState, ReadinessProbe, RestartPolicy
from state import audit
from state.processes import ProcessRecord, ProcessRepo
from state.store import Store


@pytest.fixture
def store(tmp_path):
    s = Store(tmp_path / "state.db")
    yield s
    s.close()


def _spec(name="srv", **kw) -> ProcessSpec:
    return ProcessSpec(name=name, kind=Kind.SERVER, argv=("python", "-m", "x"), log_path=f"/tmp/{name}.log",
                       readiness=ReadinessProbe(kind="http", url="http://127.0.0.1:1/health"),
                       restart=RestartPolicy(mode="on-failure", max_tries=2), **kw)


def _record(spec: ProcessSpec, state=ProcState.NEVER, at=100.0) -> ProcessRecord:
    return ProcessRecord(name=spec.name, kind=spec.kind.value, spec=spec, state=state, state_since=at,
                         log_path=spec.log_path)


def test_upsert_get_list_roundtrip(store):
    repo = ProcessRepo(store)
    spec = _spec(env={"A": "1"})
    repo.upsert(_record(spec))
    repo.upsert(_record(_spec("alpha")))
    got = repo.get("srv")
    assert got == _record(spec)
    assert got.spec.readiness.url == "http://127.0.0.1:1/health"
    assert got.spec.env == {"A": "1"}
    assert [r.name for r in repo.list()] == ["alpha", "srv"]
    assert repo.get("missing") is None


def test_transition_writes_row_and_event_atomically(store):
    repo = ProcessRepo(store)
    repo.upsert(_record(_spec()))
    new = repo.transition("srv", ProcState.STARTING, at=101.0, expect=ProcState.NEVER, detail="go",
                          run_id="r1", wrapper_pid=42, started_at=101.0)
    assert new.state == ProcState.STARTING and new.state_since == 101.0 and new.wrapper_pid == 42
    assert repo.get("srv") == new
    new = repo.transition("srv", ProcState.EXITED, at=105.0, exit_code=3, ended_at=104.5, detail="exit code 3")
    hist = repo.history("srv")
    assert [(e.from_state, e.to_state) for e in hist] == [("NEVER", "STARTING"), ("STARTING", "EXITED")]
    assert hist[-1].exit_code == 3 and hist[-1].at == 105.0 and hist[-1].run_id == "r1"
    assert [e.to_state for e in repo.history("srv", limit=1)] == ["EXITED"]


def test_transition_is_conditional(store):
    repo = ProcessRepo(store)
    repo.upsert(_record(_spec(), state=ProcState.RUNNING))
    assert repo.transition("srv", ProcState.STOPPING, at=1.0, expect=ProcState.STARTING) is None
    assert repo.transition("srv", ProcState.STOPPING, at=1.0, expect_run_id="other") is None
    assert repo.get("srv").state == ProcState.RUNNING
    assert repo.history("srv") == []
    assert repo.transition("nobody", ProcState.STARTING, at=1.0) is None


def test_update_without_event_and_unknown_field(store):
    repo = ProcessRepo(store)
    repo.upsert(_record(_spec()))
    assert repo.update("srv", pid=7, create_time=12.5).pid == 7
    assert repo.history("srv") == []
    assert repo.update("srv", expect_run_id="nope", pid=8) is None
    assert repo.get("srv").pid == 7
    with pytest.raises(TypeError, match="bogus"):
        repo.update("srv", bogus=1)


def test_pending_spec_roundtrip(store):
    repo = ProcessRepo(store)
    repo.upsert(_record(_spec()))
    changed = _spec(stop_grace_s=3.0)
    rec = repo.update("srv", pending_spec=changed)
    assert repo.get("srv").pending_spec == changed
    assert rec.effective_spec.stop_grace_s == 3.0


def test_version_changes_on_writes_from_this_and_other_connections(store, tmp_path):
    repo = ProcessRepo(store)
    v0 = repo.version()
    repo.upsert(_record(_spec()))
    v1 = repo.version()
    assert v1 != v0
    assert repo.version() == v1  # reading changes nothing
    other = Store(store.path)
    try:
        ProcessRepo(other).update("srv", detail="from elsewhere")
    finally:
        other.close()
    assert repo.version() != v1


def test_corrupt_row_names_field(store):
    repo = ProcessRepo(store)
    repo.upsert(_record(_spec()))
    store.execute("UPDATE processes SET spec_json = '{\"name\": 1' WHERE name = 'srv'")
    with pytest.raises(ValueError, match=r"processes row 'srv': field spec_json"):
        repo.get("srv")


def test_audit_record_and_recent(store):
    audit.record(store, "alice", "dashboard", "start", "srv", "ok then", at=10.0)
    audit.record(store, "bob", "cli", "stop", "other", "", "refused", at=11.0)
    audit.record(store, "carol", "cli", "restart", "srv", at=12.0)
    entries = audit.recent(store, limit=10)
    assert [e.actor for e in entries] == ["carol", "bob", "alice"]
    assert entries[1].outcome == "refused" and entries[1].source == "cli"
    assert [e.action for e in audit.recent(store, limit=10, target="srv")] == ["restart", "start"]
    assert len(audit.recent(store, limit=1)) == 1
    with pytest.raises(ValueError, match="outcome"):
        audit.record(store, "a", "cli", "start", "x", outcome="maybe")
