-- The staged records ($ids) of a dataset version, read from its lake copy ($files: the version's
-- Parquet files; the partition columns are inside the files), as they were audited.
SELECT *
FROM read_parquet($files, hive_partitioning = false, union_by_name = true)
WHERE list_contains($ids, CAST(_id AS VARCHAR));
