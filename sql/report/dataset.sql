-- The dataset a run audited: its source, rows read, staged, quarantined and out of scope, and
-- where its staged records are (lake_path: their Parquet copy).
SELECT d.dataset_version, d.source_kind, d.rows_read, d.rows_staged, d.rows_quarantined,
       d.rows_out_of_scope, d.created_at, d.lake_path
FROM audit.runs r JOIN audit.datasets d ON d.dataset_version = r.dataset_version
WHERE r.run_id = $run_id;
