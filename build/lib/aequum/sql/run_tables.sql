-- Every audit base table that holds rows per run (all of a run's rows are replaced together).
SELECT c.table_name
FROM information_schema.columns c
JOIN information_schema.tables t USING (table_schema, table_name)
WHERE c.table_schema = 'audit' AND c.column_name = 'run_id' AND t.table_type = 'BASE TABLE'
  AND c.table_name <> 'runs'
ORDER BY c.table_name;
