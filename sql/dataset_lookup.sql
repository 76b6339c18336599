-- A dataset version already staged, if any.
SELECT dataset_version, staged_table, lake_path, categories, source_fingerprint,
       rows_read, rows_staged, rows_quarantined, rows_out_of_scope, lake_stamp, fields_nulled, source_content
FROM audit.datasets
WHERE dataset_version = $dataset_version;
