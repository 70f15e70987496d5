from __future__ import annotations

import os
import sqlite3
import threading

import pytest

from state.store import Store, StoreClosed, load_migrations


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_migrations_applied_once(tmp_path):
    path = tmp_path / "s.db"
    with Store(path) as s:
        version = s.schema_version()
        assert version == len(load_migrations())
        tables = {r["name"] for r in s.query("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"processes", "process_events", "audit_log", "schema_migrations"} <= tables
        assert s.query_one("PRAGMA journal_mode")[0] == "wal"
    with Store(path) as s:  # reopening applies nothing twice
        rows = s.query("SELECT version FROM schema_migrations")
        assert len(rows) == version


def test_close_is_idempotent_and_use_after_close_fails(tmp_path):
    s = Store(tmp_path / "s.db")
    s.close()
    s.close()
    assert s.closed
    with pytest.raises(StoreClosed):
        s.query("SELECT 1")


def test_transaction_rolls_back(tmp_path):
    with Store(tmp_path / "s.db") as s:
        with pytest.raises(RuntimeError):
            with s.transaction() as conn:
                conn.execute("INSERT INTO audit_log (at, actor, source, action, target) VALUES (1, 'a', 'b', 'c', 'd')")
                raise RuntimeError("boom")
        assert s.query_one("SELECT COUNT(*) AS n FROM audit_log")["n"] == 0


def test_bad_migration_names_the_file(tmp_path):
    d = tmp_path / "m"
    d.mkdir()
    (d / "0001_a.sql").write_text("CREATE TABLE a (x)")
    (d / "0003_c.sql").write_text("CREATE TABLE c (x)")
    with pytest.raises(ValueError, match="without gaps"):
        load_migrations(d)
    (d / "bad.sql").write_text("")
    with pytest.raises(ValueError, match="bad.sql"):
        load_migrations(d)


def test_failed_open_does_not_leak(tmp_path, monkeypatch):
    import state.store as store_mod

    d = tmp_path / "m"
    d.mkdir()
    (d / "0001_bad.sql").write_text("CREATE TABLE oops (")
    monkeypatch.setattr(store_mod, "MIGRATIONS_DIR", d)
    monkeypatch.setattr(store_mod, "load_migrations", lambda directory=d: [(1, "0001_bad.sql", "CREATE TABLE oops (")])
    before = _fds()
    for _ in range(20):
        with pytest.raises(sqlite3.OperationalError):
            Store(tmp_path / "bad.db")
    assert _fds() <= before + 1


def test_open_close_many_times_does_not_leak_threads_or_fds(tmp_path):
    path = tmp_path / "leak.db"
    for i in range(5):  # warm up: sqlite and the allocator settle
        with Store(path) as s:
            s.execute("INSERT INTO audit_log (at, actor, source, action, target) VALUES (?, 'a', 't', 'w', 'x')", (i,))
    threads, fds = threading.active_count(), _fds()
    for i in range(200):
        s = Store(path)
        s.execute("INSERT INTO audit_log (at, actor, source, action, target) VALUES (?, 'a', 't', 'w', 'x')", (i,))
        with s.transaction() as conn:
            conn.execute("INSERT INTO audit_log (at, actor, source, action, target) VALUES (?, 'a', 't', 'tx', 'x')", (i,))
        assert s.query_one("SELECT COUNT(*) AS n FROM audit_log")["n"] >= i
        s.close()
        s.close()
    assert threading.active_count() == threads
    assert _fds() <= fds + 2, f"file descriptors grew from {fds} to {_fds()} over 200 open/close cycles"
    with Store(path) as s:
        assert s.query_one("SELECT COUNT(*) AS n FROM audit_log")["n"] == 5 + 400


def test_two_stores_on_one_file_see_each_other(tmp_path):
    a, b = Store(tmp_path / "s.db"), Store(tmp_path / "s.db")
    try:
        a.execute("INSERT INTO audit_log (at, actor, source, action, target) VALUES (1, 'a', 'b', 'c', 'd')")
        assert b.query_one("SELECT COUNT(*) AS n FROM audit_log")["n"] == 1
    finally:
        a.close()
        b.close()


def test_concurrent_writers_threads(tmp_path):
    with Store(tmp_path / "s.db") as s:
        def work(k):
            for i in range(50):
                s.execute("INSERT INTO audit_log (at, actor, source, action, target) VALUES (?, ?, 't', 'w', 'x')", (i, str(k)))
        ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert s.query_one("SELECT COUNT(*) AS n FROM audit_log")["n"] == 200
