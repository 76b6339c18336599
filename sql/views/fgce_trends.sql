-- FGCE over time: one row per run x attribute x group: how many of the group's rejected can be
-- group_label: the group as the report names it (audit.group_labels)
-- shown a feasible way to a favourable decision, and at what cost (k0, d0, coverage at k).
CREATE OR REPLACE VIEW audit.fgce_trends AS
SELECT r.spec_name, r.started_at, s.run_id, r.dataset_version, s.attribute, s.group_name, gl.group_label,
       s.factuals, s.coverable, s.coverable_share, s.components, s.k0, s.d0_at_k0, s.d_min,
       s.k, s.coverage_at_k, s.coverage_at_k_of_coverable
FROM audit.fgce_k0d0 s
JOIN audit.runs r USING (run_id)
LEFT JOIN audit.group_labels gl
       ON gl.run_id = s.run_id AND gl.attribute = s.attribute AND gl.group_name = s.group_name
WHERE r.status IN ('succeeded', 'partial')
ORDER BY r.spec_name, s.attribute, s.group_name, r.started_at DESC;
