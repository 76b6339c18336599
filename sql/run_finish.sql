-- Close a run record.
UPDATE audit.runs
SET dataset_version = $dataset_version,
    source_fingerprint = $source_fingerprint,
    model_fingerprint = $model_fingerprint,
    finished_at = timezone('UTC', now()),
    status = $status,
    error = $error
WHERE run_id = $run_id;
