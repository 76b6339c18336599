-- Every table of aequum's (audit.aequum_tables) that holds rows per run (all of a run's rows
-- are replaced together); a table of anyone else's in the audit schema is never touched.
SELECT c.table_name
FROM information_schema.columns c
JOIN information_schema.tables t USING (table_schema, table_name)
JOIN audit.aequum_tables a USING (table_name)
WHERE c.table_schema = 'audit' AND c.column_name = 'run_id' AND t.table_type = 'BASE TABLE'
  AND c.table_name <> 'runs'
ORDER BY c.table_name;
