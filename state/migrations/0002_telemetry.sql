-- Downsampled telemetry history: one row per (scope, index, field, bucket).
-- scope 'gpu' (idx = GPU index) or 'host' (idx = -1); t0 = bucket start
-- (epoch seconds), width_s = bucket width; n readings summarised as min/mean/max.
-- Readings that were N/A are not counted, and a bucket with none is not written.
CREATE TABLE telemetry_buckets (
    scope    TEXT NOT NULL,
    idx      INTEGER NOT NULL,
    field    TEXT NOT NULL,
    t0       REAL NOT NULL,
    width_s  REAL NOT NULL,
    n        INTEGER NOT NULL,
    vmin     REAL NOT NULL,
    vmean    REAL NOT NULL,
    vmax     REAL NOT NULL,
    PRIMARY KEY (scope, idx, field, width_s, t0)
) WITHOUT ROWID;
CREATE INDEX telemetry_buckets_t0 ON telemetry_buckets(t0);
