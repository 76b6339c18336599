-- The latest successful (or partial) run per spec: what a BI dashboard shows by default.
CREATE OR REPLACE VIEW audit.latest_runs AS
SELECT *
FROM audit.runs
WHERE status IN ('succeeded', 'partial')
QUALIFY row_number() OVER (PARTITION BY spec_name ORDER BY started_at DESC) = 1;
