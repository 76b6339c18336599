-- The findings of one run for the report: flagged first, then by engine, attribute, finding.
SELECT *
FROM audit.findings
WHERE run_id = $run_id
ORDER BY flagged DESC, engine, attribute, group_name, finding;
