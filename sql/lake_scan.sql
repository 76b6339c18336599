-- aequum bench audit / national: the baseline, one DuckDB pass over every column of a staged
-- lake (each column's maximum, so no column is left unread).
SELECT count(*) AS n, max(COLUMNS(*))
FROM read_parquet($files, hive_partitioning = false, union_by_name = true);
