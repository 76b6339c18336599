-- Controlled-disparity findings (engine regression): per run x attribute, how many points more
-- (or less) often the protected group was denied than the reference group after controlling for
-- the named recorded inputs, by the two models of audit.regression_estimates on the same rows:
-- the linear probability model (the measure: value and interval are its difference in points,
-- with its sensitivity to an omitted variable, Cinelli & Hazlett 2020) and the denial logit (the
-- examiner's standard number: the odds ratio with its interval, the average marginal effect in
-- points, the E-value of VanderWeele & Ding 2017).
-- Tested by the logit (audit.robustness: group_significant, group_p_value, group_tested):
-- With fixed effects (engines.regression.fixed_effects: market, lender) the comparison is within
-- the same market and lender, and with a cluster the logit's interval and p are cluster-robust.
-- flagged = the logit's adjusted p significant and an odds ratio above 1; p_value and
-- significant are the logit's; a logit that could not be fitted is no test.
-- The LPM's straight line is not the lender's threshold rule: on the generated fair lender's own
-- records it left a significant group residual (tests/test_logit.py shows the same on a probit
-- world) where the logit finds none.
-- Evidence (of disparate treatment, when that is the audit's question): flagged, and either on
-- records holding every input of the decisions (audit.run_context.inputs = 'complete'), where no
-- omitted input is left to explain it, or surviving the spec's stated bound on the inputs the
-- records lack (decision.bounds: their partial R-squared with group and denial, with a source;
-- engines.regression.bounds, Cinelli & Hazlett 2020 Sec. 4). On records lacking inputs with no
-- bound stated, a flagged difference is an unexplained disparity for review, never evidence:
-- the robustness value benchmarks an omitted factor against the recorded controls, and on the
-- public LAR the credit score it lacks is far stronger than they are. Columns: audit.findings'
-- contract, then estimand, basis, evidence, robust, robustness_value (RV_{1,alpha}) and e_value
-- (the odds ratio's).
CREATE OR REPLACE VIEW audit.findings_regression AS
WITH e AS (
    SELECT r.*,
           -- "Female applicants"; a per-value comparison (race=Asian) is against its attribute's
           -- reference group ("White applicants")
           audit.applicants(r.run_id, r.attribute, 'protected') AS protected_label,
           audit.applicants(r.run_id, r.attribute, 'reference') AS reference_label,
           r.logit_coefficient IS NOT NULL AS has_logit,
           t.group_significant AS is_flagged, t.group_p_value AS tested_p, t.group_tested AS tested_significant
    FROM audit.regression_estimates r
    JOIN audit.robustness t ON t.run_id = r.run_id AND t.attribute = r.attribute)
SELECT run_id, 'regression' AS engine, attribute, 'protected' AS group_name,
       'adjusted denial disparity' AS finding, true AS headline,
       is_flagged AS flagged,
       'adjusted_denial_difference' AS measure, estimate AS value, ci_low, ci_high, confidence,
       tested_p AS p_value, tested_significant AS significant,
       CAST(CASE WHEN estimate > 0 THEN round(estimate * n_protected) ELSE 0 END AS BIGINT) AS individuals,
       'regression_estimates' AS cases_table,
       CASE
         WHEN estimate IS NULL THEN printf(
           'The denials of %s and %s could not be compared after controls (%s applicants): %s.',
           protected_label, reference_label,
           audit.num(n), coalesce(concat_ws('; ', note, logit_note), 'no estimate'))
         ELSE printf(
           'After controlling for %s%s, %s were denied %.1f points %s often than '
           '%s (%.0f%% CI %.1f to %.1f, %s, N = %s%s)%s%s.%s%s',
           CASE WHEN controls = '' THEN 'nothing' ELSE controls END,
           CASE WHEN fixed_effects IS NULL THEN ''
                ELSE printf(' and comparing within the same %s', replace(fixed_effects, ', ', ' and ')) END
           || CASE WHEN cluster IS NULL AND coalesce(inference, 'classical') = 'classical' THEN ''
                   ELSE ' (' || audit.inference_text(inference, cluster, clusters, bootstrap_draws) || ')' END,
           protected_label, 100 * abs(estimate),
           CASE WHEN estimate >= 0 THEN 'more' ELSE 'less' END,
           reference_label, 100 * confidence, 100 * ci_low, 100 * ci_high,
           CASE WHEN p_adjusted IS NULL THEN 'not tested'
                ELSE audit.pval(p_adjusted) || ', ' || correction || '-adjusted' END,
           audit.num(n), CASE WHEN raw_difference IS NULL THEN ''
                              ELSE printf('; unadjusted difference %.1f points', 100 * raw_difference) END,
           CASE WHEN has_logit THEN printf(
                  '; by the denial logit on the same controls their odds of denial were %.2f times the '
                  'reference group''s (%.0f%% CI %.2f to %.2f, %s), an average marginal effect of %+.1f '
                  'points (%.1f to %.1f), E-value %.2f (%.2f for the interval''s limit nearer 1: the '
                  'risk ratio an unobserved factor would need with both group membership and denial '
                  'to explain it away)',
                  odds_ratio, 100 * confidence, or_ci_low, or_ci_high,
                  CASE WHEN logit_p_adjusted IS NULL THEN 'not tested'
                       ELSE audit.pval(logit_p_adjusted) || ', ' || correction || '-adjusted'
                            || CASE WHEN logit_inference IN ('score-bootstrap', 'HC1')
                                    THEN '; ' || audit.inference_text(logit_inference, cluster, clusters, bootstrap_draws)
                                    ELSE '' END END,
                  100 * ame, 100 * ame_ci_low, 100 * ame_ci_high, e_value, e_value_ci)
                WHEN odds_ratio IS NULL AND logit_note IS NOT NULL THEN
                  '; the denial logit has no estimate (' || logit_note || ')'
                ELSE '' END,
           printf('; an unobserved factor would need to explain %s of the residual variance of both '
                  'group membership and denial to remove the difference (robustness value; %s to make '
                  'it no longer significant)', audit.pct(rv_q1), audit.pct(rv_q1_alpha)),
           CASE WHEN note IS NULL AND (logit_note IS NULL OR NOT has_logit) THEN ''
                ELSE ' Note: ' || concat_ws('; ', note, CASE WHEN has_logit THEN logit_note END) || '.' END,
           ' ' || CASE
             WHEN NOT coalesce(is_flagged, false) THEN
               CASE WHEN tested_p IS NULL THEN 'Not tested: the estimate is descriptive.'
                    ELSE 'Not a significant difference in the applicants'' disfavour.' END
             WHEN c.question <> 'disparate_treatment' THEN
               'An adjusted disparity: a screen for review; the audit''s question is not disparate treatment.'
             WHEN c.inputs = 'complete' THEN
               'The records hold every input of the decisions, so no omitted input can explain it: '
               'evidence of disparate treatment.'
             WHEN survives_bound THEN printf(
               'It survives the stated bound on %s (partial R-squared %.2f with group membership and %.2f '
               'with denial; source: %s): at most %.1f points of it could be theirs, leaving %.1f (%.1f to '
               '%.1f, %s, %s-adjusted): evidence of disparate treatment.',
               c.missing, bound_r2_group, bound_r2_outcome, bound_source, 100 * abs(estimate - bounded_estimate),
               100 * bounded_estimate, 100 * bounded_ci_low, 100 * bounded_ci_high, audit.pval(bounded_p_adjusted),
               correction)
             WHEN bound_source IS NOT NULL THEN printf(
               'An unexplained disparity for review, not evidence: %s as strong as the stated bound (partial '
               'R-squared %.2f with group membership and %.2f with denial; source: %s) could explain it '
               '(bounded difference %.1f points, %.1f to %.1f).',
               c.missing, bound_r2_group, bound_r2_outcome, bound_source,
               100 * bounded_estimate, 100 * bounded_ci_low, 100 * bounded_ci_high)
             ELSE printf(
               'An unexplained disparity for review, not evidence: the records lack %s, which may explain it, '
               'and no bound on them was stated (decision.bounds).', c.missing) END)
       END AS statement,
       'adjusted disparity' AS estimand,
       'controls: ' || controls || CASE WHEN fixed_effects IS NULL THEN ''
                                        ELSE '; fixed effects: ' || fixed_effects END AS basis,
       -- on complete inputs the logit's test stands (no omitted input); on records lacking inputs only
       -- under a stated bound on them that the difference survives
       coalesce(c.question = 'disparate_treatment' AND is_flagged
                AND (c.inputs = 'complete' OR coalesce(survives_bound, false)), false) AS evidence,
       robust,
       rv_q1_alpha AS robustness_value,
       e_value
FROM e
LEFT JOIN audit.run_context c USING (run_id);
