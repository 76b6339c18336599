-- Outcome gaps over time: one row per run x attribute x group, newest first (BI trend lines).
-- group_label: the group as the report names it (audit.group_labels)
-- Rows of runs written before the intervals/corrections existed have nulls in those columns.
CREATE OR REPLACE VIEW audit.outcome_trends AS
SELECT r.spec_name, r.started_at, g.run_id, r.dataset_version, g.attribute, g.group_name, gl.group_label,
       g.n_group, g.spd, g.spd_p_value, g.di_ratio, g.four_fifths_violation, g.eo_gap,
       g.di_ci_low, g.di_ci_high, g.spd_p_adjusted, g.correction, g.significant, g.too_small,
       g.four_fifths_vs_highest, g.verdict
FROM audit.outcome_gaps g
JOIN audit.runs r USING (run_id)
LEFT JOIN audit.group_labels gl
       ON gl.run_id = g.run_id AND gl.attribute = g.attribute AND gl.group_name = g.group_name
WHERE r.status IN ('succeeded', 'partial')
ORDER BY r.spec_name, g.attribute, g.group_name, r.started_at DESC;
