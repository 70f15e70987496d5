-- Who acted from where: the address of the client that asked for the action
-- (the browser session's TCP peer for the dashboard; 'local' for this host's
-- command line and the dashboard's own automation). Entries written before
-- this column existed read ''.
ALTER TABLE audit_log ADD COLUMN client TEXT NOT NULL DEFAULT ''
