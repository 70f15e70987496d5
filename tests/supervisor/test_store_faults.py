"""The state store's faults are loud and the supervisor goes on: a store that cannot be
written (a failing connection is injected: tests may run as root, where file modes do not
stop writes), a store with damaged pages, a store restored from an older backup, backups."""

from __future__ import annotations

import io
import os
import sqlite3
import stat
from pathlib import Path

import pytest

import state.store as store_mod
from backend.cli import main
from backend.supervisor.runfiles import read_json
from specdeck_types.process import ProcState, RestartPolicy
from state import audit
from state.processes import ProcessRepo
from state.store import Store, StoreCorrupt, StoreUnwritable
from tests.supervisor.conftest import _end_group, gone, wait_for
from tests.supervisor.fakes import fake_spec
from tests.supervisor.test_cli import write_ws

S = ProcState


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    rc = main(list(argv), out=out, err=err)
    return rc, out.getvalue(), err.getvalue()


def read_only(store: Store, on: bool = True) -> None:
    """Make ``store``'s connection refuse writes as a read-only file would (SQLITE_READONLY)."""
    store._conn.execute(f"PRAGMA query_only = {1 if on else 0}")


@pytest.fixture
def refusing_connections(monkeypatch):
    """Every store opened from now on refuses writes, as one on an immutable file would."""
    real = sqlite3.connect

    def connect(*a, **kw):
        conn = real(*a, **kw)
        conn.execute("PRAGMA query_only = 1")
        return conn

    monkeypatch.setattr(store_mod.sqlite3, "connect", connect)


def damage(db: Path, first_page: int = 3, pages: int = 2) -> None:
    """Garbage over ``pages`` pages of the file (not the header page)."""
    size = 4096
    with open(db, "r+b") as f:
        f.seek(first_page * size)
        f.write(bytes((i * 37 + 11) % 251 for i in range(pages * size)))


def filled_store(path: Path) -> None:
    """A store with enough rows to span many pages, checkpointed into the main file."""
    with Store(path) as store:
        for i in range(400):
            audit.record(store, "alice", "cli", "start", f"proc-{i}", "x" * 200, "ok", at=1000.0 + i)
        store.query("PRAGMA wal_checkpoint(TRUNCATE)")


# -- a store that cannot be written ------------------------------------------


def test_unwritable_store_supervisor_restarts_from_memory_and_writes_back(env):
    sup, clock, fos, _prober, store, _make, tmp = env
    sup.sync_specs([fake_spec(tmp, restart=RestartPolicy(mode="on-failure", max_tries=3, backoff_s=1.0))])
    sup.start("p")
    sup.poll()
    assert sup.view("p").state == S.RUNNING
    first = fos.pid_of("p")

    read_only(store)
    fos.exit("p", -9)  # killed
    sup.poll()
    v = sup.view("p")
    assert v.state == S.BACKOFF and v.pid is None  # never RUNNING with its dead pid
    assert store.health().state == "unwritable" and "readonly" in store.health().problem
    assert sup.memory_note() and "from memory" in sup.memory_note()
    clock.advance(5)
    sup.poll()
    sup.poll()
    v = sup.view("p")
    assert v.state == S.RUNNING and v.pid == fos.pid_of("p") != first  # restarted though nothing was saved
    stored = ProcessRepo(store).get("p")
    assert stored.state == S.RUNNING and stored.pid == first  # the file still has the old run

    read_only(store, False)
    sup.poll()  # writes back what it held
    assert store.health().ok and sup.memory_note() is None
    stored = ProcessRepo(store).get("p")
    assert stored.state == S.RUNNING and stored.pid == fos.pid_of("p")
    to_states = [e.to_state for e in ProcessRepo(store).history("p")]
    assert to_states[-3:] == ["BACKOFF", "STARTING", "RUNNING"]


def test_unwritable_store_a_gone_pid_is_never_shown_running(env):
    sup, clock, fos, _prober, store, make, tmp = env
    sup.sync_specs([fake_spec(tmp)])
    sup.start("p")
    sup.poll()
    read_only(store)
    pid = fos.pid_of("p")
    fos.alive_procs.clear()  # child and wrapper gone, no exit record
    sup.poll()
    assert sup.view("p").state == S.UNKNOWN and "gone" in sup.view("p").detail
    # a reading supervisor opened now (the CLI's processes list) sees the same
    other = make(act=False)
    assert other.view("p").state == S.UNKNOWN
    assert ProcessRepo(store).get("p").pid == pid  # nothing was written


def test_store_that_cannot_be_made_is_one_clear_error(tmp_path, refusing_connections):
    ws = write_ws(tmp_path / "ws")
    rc, out, err = run("-w", str(ws), "processes", "list")
    assert rc == 1
    assert "Traceback" not in err and err.startswith("error: state store ")
    assert str(ws / "state.db") in err and "cannot be written" in err and "writable again" in err


def test_cli_on_unwritable_store(tmp_path, request):
    ws = write_ws(tmp_path / "ws")
    assert run("-w", str(ws), "processes", "list")[0] == 0  # the store exists, migrated
    request.getfixturevalue("refusing_connections")
    rc, out, err = run("-w", str(ws), "processes", "start", "sleeper")
    assert rc == 1 and "Traceback" not in err
    assert str(ws / "state.db") in err and "cannot be written" in err and "nothing was done" in err
    assert not (ws / "run" / "sleeper" / "identity.json").exists()
    rc, out, err = run("-w", str(ws), "bench", "import", str(tmp_path / "none.json"))
    assert "Traceback" not in err
    rc, out, err = run("-w", str(ws), "processes", "list")
    assert rc == 0 and "sleeper" in out
    assert "warning: state store" in err and "cannot be written" in err


# -- a damaged store ---------------------------------------------------------


def test_open_runs_quick_check_and_names_file_and_remedy(tmp_path):
    db = tmp_path / "state.db"
    filled_store(db)
    damage(db)
    with pytest.raises(StoreCorrupt) as info:
        Store(db)
    text = str(info.value)
    assert str(db) in text and "damaged" in text and "mv " in text and "re-adopted" in text


def test_appended_garbage_is_harmless(tmp_path):
    db = tmp_path / "state.db"
    filled_store(db)
    with open(db, "ab") as f:
        f.write(b"\xde\xad" * 3000)
    with Store(db) as store:
        assert store.health().ok and len(audit.recent(store, 1000)) == 400


def test_cli_bench_list_on_damaged_store_is_one_clear_error(tmp_path):
    ws = write_ws(tmp_path / "ws")
    filled_store(ws / "state.db")
    damage(ws / "state.db")
    for argv in (("bench", "list"), ("processes", "list"), ("processes", "stop-all")):
        rc, out, err = run("-w", str(ws), *argv)
        assert rc == 1 and "Traceback" not in err, argv
        assert err.startswith(f"error: state store {ws / 'state.db'}: ") and "damaged" in err
        assert "restore" in err and "move the damaged file aside" in err


def test_a_damaged_page_found_by_a_read_is_recorded(tmp_path):
    db = tmp_path / "state.db"
    filled_store(db)
    store = Store(db)
    try:
        damage(db, first_page=3, pages=6)
        store.query("PRAGMA cache_size = 0")
        with pytest.raises(StoreCorrupt):
            for _ in range(3):
                audit.recent(store, 1000)
                store._conn.execute("PRAGMA shrink_memory")
        assert store.health().state == "corrupt" and "restore" in store.health().remedy
    finally:
        store.close()


# -- a store restored from an older backup -----------------------------------


@pytest.mark.timeout(60)
def test_restored_older_store_readopts_a_live_process_and_stop_all_stops_it(tmp_path):
    ws = write_ws(tmp_path / "ws")
    w = str(ws)
    assert run("-w", w, "processes", "list")[0] == 0
    rc, out, err = run("-w", w, "workspace", "backup", "--to", str(tmp_path / "older.db"))
    assert rc == 0, err
    rc, out, err = run("-w", w, "processes", "start", "sleeper")
    assert rc == 0, err
    ident = wait_for(lambda: read_json(ws / "run" / "sleeper" / "identity.json"))
    pid, ct = int(ident["pid"]), ident.get("create_time")
    try:
        # restore the older store (it knows nothing of this run)
        for tail in ("-wal", "-shm"):
            Path(f"{ws / 'state.db'}{tail}").unlink(missing_ok=True)
        os.replace(tmp_path / "older.db", ws / "state.db")
        with Store(ws / "state.db") as s:
            assert ProcessRepo(s).get("sleeper").state == S.NEVER
        rc, out, err = run("-w", w, "processes", "stop-all")
        assert rc == 0, err
        assert "sleeper: EXITED" in out
        wait_for(lambda: gone(pid, ct), timeout_s=10)
        with Store(ws / "state.db") as s:
            events = ProcessRepo(s).history("sleeper")
        assert any("re-adopted" in e.detail for e in events)
    finally:
        _end_group(pid, ct)


def test_rebuilt_store_readopts_from_the_launch_file(env):
    """A store moved aside and made anew: the live run gets its record back, spec included."""
    sup, clock, fos, _prober, store, make, tmp = env
    spec = fake_spec(tmp, "job")
    sup.sync_specs([spec])
    sup.start("job")
    launch = fos.launches[-1]
    # what the real spawner writes beside the identity
    from backend.supervisor.runfiles import write_json_atomic
    import json

    write_json_atomic(launch.paths.launch, {"name": "job", "run_id": launch.run_id, "argv": list(launch.argv),
                                            "log_path": launch.log_path, "spec": json.loads(spec.to_json())})
    fresh = Store(tmp / "rebuilt.db")
    try:
        from backend.supervisor.supervisor import Supervisor

        other = Supervisor(fresh, tmp / "run", clock=clock, spawner=fos, killer=fos, prober=_prober,
                           sleep=clock.sleep)
        v = other.view("job")
        assert v is not None and v.live and v.pid == fos.pid_of("job") and v.spec == spec
        other.stop("job", actor="test", source="test")
        assert other.view("job").state == S.EXITED
        other.close()
    finally:
        fresh.close()


# -- backups ------------------------------------------------------------------


def test_workspace_backup_online_copy(tmp_path):
    ws = write_ws(tmp_path / "ws")
    filled_store(ws / "state.db")
    rc, out, err = run("-w", str(ws), "workspace", "backup")
    assert rc == 0, err
    made = Path(out.split(":", 1)[0])
    assert made.parent == ws / "backups" and stat.S_IMODE(made.stat().st_mode) == 0o600
    assert stat.S_IMODE(made.parent.stat().st_mode) == 0o700
    with Store(made) as copy:
        assert len(audit.recent(copy, 1000)) == 400
    rc, out, err = run("-w", str(ws), "workspace", "backup", "--to", str(made))
    assert rc == 1 and "exists already" in err and "Traceback" not in err
    damage(ws / "state.db")
    rc, out, err = run("-w", str(ws), "workspace", "backup", "--to", str(tmp_path / "bad.db"))
    assert rc == 1 and "damaged" in err and not (tmp_path / "bad.db").exists()


def test_one_automatic_backup_a_day(env):
    sup, clock, _fos, _prober, store, _make, tmp = env
    clock.t = 1_700_000_000.0
    made = sup.daily_backup()
    assert made is not None and made.parent == tmp / "backups" and stat.S_IMODE(made.stat().st_mode) == 0o600
    clock.advance(3600)
    assert sup.daily_backup() is None  # the same day
    for _ in range(9):
        clock.advance(86400)
        assert sup.daily_backup() is not None
    assert len(list((tmp / "backups").glob("state-daily-*.db"))) == 7
    reader = _make(act=False)
    clock.advance(86400)
    assert reader.daily_backup() is None  # only a supervisor that acts makes them
