-- The findings of one run for the report: evidence first, then flagged, then by engine, attribute, finding.
SELECT *
FROM audit.findings
WHERE run_id = $run_id
ORDER BY evidence DESC NULLS LAST, flagged DESC, engine, attribute, group_name, finding;
