-- Record a run as started; re-running a run_id resets its record (its result rows are
-- replaced when it closes, in the same transaction as its new ones).
DELETE FROM audit.run_engines WHERE run_id = $run_id;
DELETE FROM audit.runs WHERE run_id = $run_id;
INSERT INTO audit.runs (run_id, spec_name, spec_hash, dataset_version, source_fingerprint,
                        code_version, model_fingerprint, parameters, started_at, status,
                        host, pid, pid_started)
VALUES ($run_id, $spec_name, $spec_hash, NULL, NULL, $code_version, NULL, $parameters,
        timezone('UTC', now()), 'running', $host, $pid, $pid_started);
