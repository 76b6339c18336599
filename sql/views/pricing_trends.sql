-- Pricing disparities over time: one row per run x unit x pricing field, newest first (BI trend
-- group_label: the group as the report names it (audit.group_labels), against its reference
-- lines): the adjusted difference beside the unadjusted one and the group means, its adjusted p
-- and robustness, and the higher-priced shares and their ratio (for the rate spread's row).
CREATE OR REPLACE VIEW audit.pricing_trends AS
SELECT r.spec_name, r.started_at, e.run_id, r.dataset_version, e.attribute, gl.versus_label AS group_label, e.field, e.n, e.n_protected,
       e.n_reference, e.mean_protected, e.mean_reference, e.raw_difference, e.estimate, e.ci_low, e.ci_high,
       e.p_adjusted, e.correction, e.significant, e.adverse, e.rv_q1_alpha, e.robust, e.controls,
       h.share_protected AS hpml_share_protected, h.share_reference AS hpml_share_reference,
       h.ratio AS hpml_ratio, h.p_adjusted AS hpml_p_adjusted
FROM audit.pricing_estimates e
JOIN audit.runs r USING (run_id)
LEFT JOIN audit.group_labels gl
       ON gl.run_id = e.run_id AND gl.attribute = e.attribute AND gl.group_name = 'protected'
LEFT JOIN audit.pricing_hpml h ON h.run_id = e.run_id AND h.attribute = e.attribute AND h.field = e.field
WHERE r.status IN ('succeeded', 'partial')
ORDER BY r.spec_name, e.attribute, e.field, r.started_at DESC;
