-- Managed processes: one row per name, the latest run's identity and outcome.
-- spec_json is the spec the latest run was started with (or the configured
-- spec when nothing runs), and pending_spec_json is a changed config waiting for
-- the next start.
CREATE TABLE processes (
    name                 TEXT PRIMARY KEY,
    kind                 TEXT NOT NULL,
    spec_json            TEXT NOT NULL,
    pending_spec_json    TEXT,
    state                TEXT NOT NULL,
    state_since          REAL NOT NULL,
    pid                  INTEGER,
    create_time          REAL,
    wrapper_pid          INTEGER,
    wrapper_create_time  REAL,
    run_id               TEXT,
    started_at           REAL,
    ended_at             REAL,
    exit_code            INTEGER,
    tries                INTEGER NOT NULL DEFAULT 0,
    log_path             TEXT NOT NULL,
    log_start            INTEGER,
    detail               TEXT NOT NULL DEFAULT ''
);

-- Every state transition, timestamped.
CREATE TABLE process_events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    name        TEXT NOT NULL,
    at          REAL NOT NULL,
    from_state  TEXT,
    to_state    TEXT NOT NULL,
    pid         INTEGER,
    exit_code   INTEGER,
    run_id      TEXT,
    detail      TEXT NOT NULL DEFAULT ''
);
CREATE INDEX process_events_name_at ON process_events(name, at);

-- Audit log of control actions (who did what, from where, with what result).
CREATE TABLE audit_log (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    at       REAL NOT NULL,
    actor    TEXT NOT NULL,
    source   TEXT NOT NULL,
    action   TEXT NOT NULL,
    target   TEXT NOT NULL,
    detail   TEXT NOT NULL DEFAULT '',
    outcome  TEXT NOT NULL DEFAULT 'ok'
);
CREATE INDEX audit_log_at ON audit_log(at);
CREATE INDEX audit_log_target_at ON audit_log(target, at);
