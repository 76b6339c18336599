-- Register a staged dataset version.
INSERT INTO audit.datasets (dataset_version, spec_name, source_kind, source_fingerprint,
                            rows_read, rows_staged, rows_quarantined, rows_out_of_scope, staged_table, lake_path,
                            categories, created_at, source_stamp, contract_hash, lake_stamp, source_files,
                            fields_nulled, source_content)
VALUES ($dataset_version, $spec_name, $source_kind, $source_fingerprint, $rows_read,
        $rows_staged, $rows_quarantined, $rows_out_of_scope, $staged_table, $lake_path, $categories,
        timezone('UTC', now()), $source_stamp, $contract_hash, $lake_stamp, $source_files,
        $fields_nulled, $source_content);
