-- Benchmark results, run here or imported from files.  The full record is
-- kept as JSON in `data` (see specdeck_types/bench.py); the columns beside it
-- are copies of the fields the pages and the command line filter on.
-- `raw` is the original record or text, for audit.  An import is keyed by
-- (source_file, source_line): importing the same file again adds nothing.
CREATE TABLE bench_results (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    created_at   REAL NOT NULL,
    started_at   REAL,
    ended_at     REAL,
    source       TEXT NOT NULL,
    source_file  TEXT,
    source_line  INTEGER,
    server       TEXT,
    target_model TEXT,
    draft_model  TEXT,
    algorithm    TEXT,
    concurrency  INTEGER,
    input_len    INTEGER,
    output_len   INTEGER,
    dataset      TEXT,
    output_tok_s REAL,
    accept_len   REAL,
    data         TEXT NOT NULL,
    raw          TEXT NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX bench_results_origin ON bench_results(source_file, source_line);
CREATE INDEX bench_results_server ON bench_results(server, concurrency);
CREATE INDEX bench_results_started ON bench_results(started_at)
