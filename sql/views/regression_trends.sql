-- Controlled disparities over time: one row per run x attribute, newest first (BI trend lines):
-- group_label: the group as the report names it (audit.group_labels), against its reference
-- the adjusted denial difference beside the unadjusted one, its adjusted p, and its robustness;
-- the denial logit's odds ratio, its interval and adjusted p; the fixed effects and the cluster.
CREATE OR REPLACE VIEW audit.regression_trends AS
SELECT r.spec_name, r.started_at, e.run_id, r.dataset_version, e.attribute, gl.versus_label AS group_label, e.n, e.n_protected,
       e.n_reference, e.raw_difference, e.estimate, e.ci_low, e.ci_high, e.p_adjusted, e.correction,
       e.significant, e.rv_q1, e.rv_q1_alpha, e.robust, e.strongest_control, e.controls,
       e.odds_ratio, e.or_ci_low, e.or_ci_high, e.logit_p_adjusted, e.logit_significant,
       e.fixed_effects, e.cluster
FROM audit.regression_estimates e
JOIN audit.runs r USING (run_id)
LEFT JOIN audit.group_labels gl
       ON gl.run_id = e.run_id AND gl.attribute = e.attribute AND gl.group_name = 'protected'
WHERE r.status IN ('succeeded', 'partial')
ORDER BY r.spec_name, e.attribute, r.started_at DESC;
