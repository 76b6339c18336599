-- The staged records ($ids) of a dataset version, read from its lake copy ($files: the version's
-- Parquet files; the partition columns are inside the files), as they were audited. A hash
-- semi-join on the ids, not a scan of the id list per record: the ids of every case of every
-- finding exhibited, tens of thousands, against millions of records.
SELECT r.*
FROM read_parquet($files, hive_partitioning = false, union_by_name = true) r
SEMI JOIN (SELECT unnest($ids::VARCHAR[]) AS id) i ON CAST(r._id AS VARCHAR) = i.id;
