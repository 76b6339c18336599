-- CEC over time: one row per run x attribute (or intersection) x group: how many records found a
-- group_label: the group as the report names it (audit.group_labels)
-- counterpart, how differently the model explains matched pairs (CEC), how often their
-- decisions differ (PFR) and the share of hidden procedural bias (regime B).
CREATE OR REPLACE VIEW audit.cec_trends AS
SELECT r.spec_name, r.started_at, s.run_id, r.dataset_version, s.attribute, s."group", gl.group_label,
       s.partition_by, s.records, s.coverage, s.distance_median, s.cec, s.pfr, s.threshold,
       s.regime_a, s.regime_b, s.regime_c, s.regime_d, s.completeness_max_error
FROM audit.cec_summary s
JOIN audit.runs r USING (run_id)
LEFT JOIN audit.group_labels gl
       ON gl.run_id = s.run_id AND gl.attribute = s.attribute AND gl.group_name = s."group"
WHERE r.status IN ('succeeded', 'partial')
ORDER BY r.spec_name, s.attribute, s."group", r.started_at DESC;
