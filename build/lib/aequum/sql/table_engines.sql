-- Which engines write a table, from the engines' recorded table counts of every run.
SELECT DISTINCT engine
FROM audit.run_engines
WHERE list_contains(json_keys(tables), $table_name)
ORDER BY engine;
