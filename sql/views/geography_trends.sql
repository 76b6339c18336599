-- The redlining screen over time: one row per run x measure x basis, newest first (BI trend
-- lines): lender-MSA pairs tested, those significantly below their peers, and the lenders named.
CREATE OR REPLACE VIEW audit.geography_trends AS
SELECT r.spec_name, r.started_at, g.run_id, r.dataset_version, g.measure, g.basis,
       count(*) FILTER (WHERE g.p_value IS NOT NULL) AS tested,
       count(*) FILTER (WHERE g.flagged) AS below_peers,
       count(DISTINCT g.lender) FILTER (WHERE g.flagged) AS lenders_named,
       string_agg(DISTINCT g.lender, ', ' ORDER BY g.lender) FILTER (WHERE g.flagged) AS lenders,
       min(g.correction) AS correction
FROM audit.geography_lenders g
JOIN audit.runs r USING (run_id)
WHERE r.status IN ('succeeded', 'partial')
GROUP BY ALL
ORDER BY r.spec_name, g.measure, g.basis, r.started_at DESC;
