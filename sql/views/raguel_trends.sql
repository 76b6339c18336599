-- RAGUEL over time: one row per run x attribute x algorithm (main configuration): how unequal
-- group_label: the group as the report names it (audit.group_labels), against its reference
-- recourse is (r before), what re-ranking would take (points changed, modification cost).
CREATE OR REPLACE VIEW audit.raguel_trends AS
SELECT r.spec_name, r.started_at, s.run_id, r.dataset_version, s.attribute, gl.versus_label AS group_label, s.algorithm,
       s.tolerance, s.block_size, s.n, s.protected_share, s.r_before, s.r_after,
       s.min_prefix_r_before, s.points_changed, s.total_modification_cost,
       s.unfair_blocks_before, s.unfair_blocks_after, s.rND_before, s.rND_after, s.success
FROM audit.raguel_summary s
JOIN audit.runs r USING (run_id)
LEFT JOIN audit.group_labels gl
       ON gl.run_id = s.run_id AND gl.attribute = s.attribute AND gl.group_name = 'protected'
WHERE r.status IN ('succeeded', 'partial') AND s.configuration = 'main'
ORDER BY r.spec_name, s.attribute, s.algorithm, r.started_at DESC;
