-- Stops and restarts that any supervisor can finish.
-- term_at: when SIGTERM was delivered for the current stop (NULL while a stop
-- waits for the child's pid; nothing is ever SIGKILLed before it is set).
-- pending_restart: the reason of a restart that waits for the stop to finish;
-- whichever supervisor records the exit starts the new run.
ALTER TABLE processes ADD COLUMN term_at REAL;
ALTER TABLE processes ADD COLUMN pending_restart TEXT
