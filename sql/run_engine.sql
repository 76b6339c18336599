-- Record one engine's outcome for a run.
INSERT OR REPLACE INTO audit.run_engines (run_id, engine, status, seconds, pieces, tables, error, started)
VALUES ($run_id, $engine, $status, $seconds, $pieces, $tables, $error, $started);
