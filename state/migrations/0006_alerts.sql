-- Alerts: one row per firing of a condition (`key` = rule:subject), from when it fired until it
-- cleared (`cleared_at` NULL while active).  `acked_at`/`acked_by`: acknowledged by a user;
-- `notified_at`: when a notification about it went out.  `alert_mutes`: a key or a whole rule
-- muted until a time (no notification, left out of the active list but kept in the history).
CREATE TABLE alerts (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    key         TEXT NOT NULL,
    rule        TEXT NOT NULL,
    subject     TEXT NOT NULL,
    severity    TEXT NOT NULL,
    title       TEXT NOT NULL,
    action      TEXT NOT NULL,
    link        TEXT NOT NULL,
    since       REAL NOT NULL,
    fired_at    REAL NOT NULL,
    updated_at  REAL NOT NULL,
    cleared_at  REAL,
    acked_at    REAL,
    acked_by    TEXT,
    notified_at REAL
);
CREATE INDEX alerts_active ON alerts(cleared_at, key);
CREATE INDEX alerts_fired ON alerts(fired_at);
CREATE TABLE alert_mutes (
    target   TEXT PRIMARY KEY,
    until    REAL NOT NULL,
    muted_by TEXT NOT NULL,
    muted_at REAL NOT NULL
)
