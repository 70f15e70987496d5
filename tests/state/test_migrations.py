"""A state file made by an earlier schema opens and is migrated in place."""

import sqlite3
from pathlib import Path

from state import Store
from state.processes import ProcessRepo
from state.store import load_migrations


def test_database_from_the_first_schema_is_upgraded(tmp_path: Path):
    db = tmp_path / "state.db"
    first = load_migrations()[0]
    assert first[0] == 1
    conn = sqlite3.connect(db)
    conn.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL,"
                 " applied_at REAL NOT NULL)")
    conn.executescript(first[2])
    conn.execute("INSERT INTO schema_migrations VALUES (1, ?, 0)", (first[1],))
    conn.execute("INSERT INTO processes(name, kind, spec_json, state, state_since, log_path)"
                 " VALUES ('old', 'other', ?, 'EXITED', 1.0, '/tmp/old.log')",
                 ('{"argv": ["true"], "kind": "other", "log_path": "/tmp/old.log", "name": "old"}',))
    conn.commit()
    conn.close()

    with Store(db) as store:
        assert store.schema_version() == len(load_migrations())
        (rec,) = ProcessRepo(store).list()
        assert rec.name == "old" and rec.state.value == "EXITED"
        cols = {r["name"] for r in store.query("PRAGMA table_info(processes)")}
        assert {"term_at", "pending_restart"} <= cols


def test_migrations_are_numbered_without_gaps():
    versions = [v for v, _, _ in load_migrations()]
    assert versions == list(range(1, len(versions) + 1))
