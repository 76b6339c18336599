-- Controlled-disparity findings (engine regression): per run x attribute, how many points more
-- (or less) often the protected group was denied than the reference group after controlling for
-- the named recorded inputs (a linear probability model), with its interval and adjusted p, and
-- its sensitivity to an omitted variable (Cinelli & Hazlett 2020): the robustness value and
-- whether a confounder as strong as the strongest control would explain it away. Flagged: a
-- significant excess of denials; evidence (of disparate treatment, when that is the audit's
-- question): flagged and robust to a confounder as strong as each control and as all of them
-- together (also on records holding every input of the decisions: on the generated fair
-- lender's own records the linear model's approximation of its threshold rule left a
-- significant group residual that the benchmark explains away). Columns: audit.findings' contract, then estimand, basis, evidence, robust,
-- robustness_value (RV_{1,alpha}) and e_value (none for a difference in probabilities).
CREATE OR REPLACE VIEW audit.findings_regression AS
WITH e AS (
    SELECT *,
           -- a per-value comparison (race=Asian) is against its attribute's reference group
           CASE WHEN contains(attribute, '=') AND NOT contains(attribute, '&')
                THEN printf('the reference group of %s', attribute[:strpos(attribute, '=') - 1])
                ELSE audit.group_label(attribute, 'reference') END AS reference_label
    FROM audit.regression_estimates)
SELECT run_id, 'regression' AS engine, attribute, 'protected' AS group_name,
       'adjusted denial disparity' AS finding, true AS headline,
       coalesce(significant AND estimate > 0, false) AS flagged,
       'adjusted_denial_difference' AS measure, estimate AS value, ci_low, ci_high, confidence,
       p_adjusted AS p_value, significant,
       CAST(CASE WHEN estimate > 0 THEN round(estimate * n_protected) ELSE 0 END AS BIGINT) AS individuals,
       'regression_estimates' AS cases_table,
       CASE
         WHEN estimate IS NULL THEN printf(
           'The denials of %s and %s could not be compared after controls (%s applicants): %s.',
           audit.group_label(attribute, 'protected'), reference_label,
           audit.num(n), coalesce(note, 'no estimate'))
         ELSE printf(
           'After controlling for %s, applicants in %s were denied %.1f points %s often than those in '
           '%s (%.0f%% CI %.1f to %.1f, %s, N = %s%s)%s%s.%s',
           CASE WHEN controls = '' THEN 'nothing' ELSE controls END,
           audit.group_label(attribute, 'protected'), 100 * abs(estimate),
           CASE WHEN estimate >= 0 THEN 'more' ELSE 'less' END,
           reference_label, 100 * confidence, 100 * ci_low, 100 * ci_high,
           CASE WHEN p_adjusted IS NULL THEN 'not tested'
                ELSE audit.pval(p_adjusted) || ', ' || correction || '-adjusted' END,
           audit.num(n), CASE WHEN raw_difference IS NULL THEN ''
                              ELSE printf('; unadjusted difference %.1f points', 100 * raw_difference) END,
           printf('; an unobserved factor would need to explain %s of the residual variance of both '
                  'group membership and denial to remove it (robustness value; %s to make it no '
                  'longer significant)', audit.pct(rv_q1), audit.pct(rv_q1_alpha)),
           CASE WHEN strongest_control IS NULL THEN '; there is no control to compare an unobserved factor with'
                ELSE printf('; one %s as strong as %s %s explain it away',
                            CASE WHEN coalesce(robust_multiplier, 1) = 1 THEN ''
                                 ELSE printf('%gx', robust_multiplier) END, strongest_control,
                            CASE WHEN adjusted_at_strongest IS NOT NULL
                                      AND sign(adjusted_at_strongest) = sign(estimate)
                                      AND (adjusted_ci_low_at_strongest > 0 OR adjusted_ci_high_at_strongest < 0)
                                 THEN 'would not' ELSE 'would' END) END,
           CASE WHEN note IS NULL THEN '' ELSE ' Note: ' || note || '.' END)
       END AS statement,
       'adjusted disparity' AS estimand,
       'controls: ' || controls AS basis,
       -- on complete inputs too: the linear probability model is a linear approximation of the
       -- decision rule, which can leave a group residual where the groups' inputs differ
       coalesce(c.question = 'disparate_treatment' AND significant AND estimate > 0 AND robust, false) AS evidence,
       robust,
       rv_q1_alpha AS robustness_value,
       CAST(NULL AS DOUBLE) AS e_value
FROM e
LEFT JOIN audit.run_context c USING (run_id);
