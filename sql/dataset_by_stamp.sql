-- The newest dataset version staged from a source with this stamp under this record contract.
SELECT dataset_version, staged_table, lake_path, categories, source_fingerprint,
       rows_read, rows_staged, rows_quarantined, rows_out_of_scope, lake_stamp, fields_nulled, source_content
FROM audit.datasets
WHERE source_stamp = $source_stamp AND contract_hash = $contract_hash
ORDER BY created_at DESC
LIMIT 1;
