-- CST detections over time: one row per run x attribute x method x k (the paper's Table 1 per run).
-- group_label: the group as the report names it (audit.group_labels), against its reference
CREATE OR REPLACE VIEW audit.cst_trends AS
SELECT r.spec_name, r.started_at, s.run_id, r.dataset_version, s.protected_attribute, gl.versus_label AS group_label, s.method, s.k,
       s.complainants, s.discriminated, s.discriminated_share, s.significant, s.significant_share
FROM audit.cst_summary s
JOIN audit.runs r USING (run_id)
LEFT JOIN audit.group_labels gl
       ON gl.run_id = s.run_id AND gl.attribute = s.protected_attribute AND gl.group_name = 'protected'
WHERE r.status IN ('succeeded', 'partial')
ORDER BY r.spec_name, s.protected_attribute, s.method, s.k, r.started_at DESC;
