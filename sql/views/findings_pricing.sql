-- Pricing findings (engine pricing): per run x unit x pricing field, how much more (or less)
-- the protected group's originated loans cost than the reference group's after controlling for
-- the named recorded inputs (audit.pricing_estimates: OLS of the price on the group and the
-- controls, the other columns' groups held), with its sensitivity to an omitted variable
-- (Cinelli & Hazlett 2020); and per run x unit the higher-priced share of the rate spread
-- (audit.pricing_hpml: HPML, Reg Z 1026.35, 1.5 points for a first lien and 3.5 for a
-- subordinate one), a raw disparity with its ratio and two-proportion test.
-- flagged: the adjusted p (across the run's pricing tests) significant and the difference in
-- the borrower's disfavour (higher; lower for lender credits: adverse); for the HPML share, a
-- significantly higher share. Evidence (of disparate treatment): flagged, and robust to an
-- unobserved factor as strong as each control and as all of them together (the public LAR lacks
-- the credit score a pricer reads) or on records holding every input of the decisions; the HPML
-- share is a raw disparity, evidence only when the audit asks about disparate impact.
CREATE OR REPLACE VIEW audit.findings_pricing AS
WITH labelled AS (
    -- a per-value comparison (race=Asian) is against its attribute's reference group
    SELECT run_id, attribute, audit.group_label(attribute, 'protected') AS protected_label,
           audit.group_label(coalesce(audit.compared_attribute(attribute), attribute), 'reference') AS reference_label
    FROM (SELECT DISTINCT run_id, attribute FROM audit.pricing_estimates
          UNION SELECT DISTINCT run_id, attribute FROM audit.pricing_hpml))
SELECT e.run_id, 'pricing' AS engine, e.attribute, 'protected' AS group_name,
       'adjusted ' || e.field || ' difference' AS finding, true AS headline,
       coalesce(e.significant AND e.adverse, false) AS flagged,
       'adjusted_price_difference' AS measure, e.estimate AS value, e.ci_low, e.ci_high, e.confidence,
       e.p_adjusted AS p_value, e.significant,
       CAST(CASE WHEN coalesce(e.adverse, false) THEN e.n_protected ELSE 0 END AS BIGINT) AS individuals,
       'pricing_estimates' AS cases_table,
       CASE
         WHEN e.estimate IS NULL THEN printf(
           'The %s of loans originated to %s and to %s could not be compared after controls (%s loans%s): %s.',
           e.field, l.protected_label, l.reference_label,
           audit.num(e.n), CASE WHEN e.mean_protected IS NOT NULL AND e.mean_reference IS NOT NULL
                                THEN printf('; means %.3f and %.3f', e.mean_protected, e.mean_reference) ELSE '' END,
           coalesce(e.note, 'no estimate'))
         ELSE printf(
           'Among originated loans, after controlling for %s, the %s of %s was %.3f %s than that of %s '
           '(%.0f%% CI %.3f to %.3f, %s, N = %s; means %.3f and %.3f, medians %.3f and %.3f, unadjusted '
           'difference %.3f)%s%s.%s',
           CASE WHEN e.controls = '' THEN 'nothing' ELSE e.controls END, e.field,
           l.protected_label, abs(e.estimate),
           CASE WHEN e.estimate >= 0 THEN 'higher' ELSE 'lower' END,
           l.reference_label, 100 * e.confidence, e.ci_low, e.ci_high,
           CASE WHEN e.p_adjusted IS NULL THEN 'not tested'
                ELSE audit.pval(e.p_adjusted) || ', ' || e.correction || '-adjusted' END,
           audit.num(e.n), e.mean_protected, e.mean_reference, e.median_protected, e.median_reference,
           e.raw_difference,
           printf('; an unobserved factor (such as the credit score the public LAR lacks) would need to '
                  'explain %s of the residual variance of both group membership and the price to remove '
                  'the difference (robustness value; %s to make it no longer significant)',
                  audit.pct(e.rv_q1), audit.pct(e.rv_q1_alpha)),
           CASE WHEN e.strongest_control IS NULL THEN ''
                ELSE printf('; one %sas strong as %s %s explain it away',
                            CASE WHEN coalesce(e.robust_multiplier, 1) = 1 THEN ''
                                 ELSE printf('%gx ', e.robust_multiplier) END, e.strongest_control,
                            CASE WHEN e.robust THEN 'would not' ELSE 'would' END) END,
           CASE WHEN e.note IS NULL THEN '' ELSE ' Note: ' || e.note || '.' END)
       END AS statement,
       'adjusted disparity' AS estimand,
       'controls: ' || coalesce(e.controls, '') || '; originated loans reporting ' || e.field AS basis,
       coalesce(c.question = 'disparate_treatment' AND e.significant AND e.adverse
                AND (coalesce(e.robust, false) OR c.inputs = 'complete'), false) AS evidence,
       e.robust, e.rv_q1_alpha AS robustness_value, NULL::DOUBLE AS e_value
FROM audit.pricing_estimates e
JOIN labelled l USING (run_id, attribute)
LEFT JOIN audit.run_context c USING (run_id)
UNION ALL
SELECT h.run_id, 'pricing', h.attribute, 'protected', 'higher-priced loan share', true,
       coalesce(h.significant AND h.difference > 0, false),
       'hpml_ratio', h.ratio, h.ratio_ci_low, h.ratio_ci_high, h.confidence, h.p_adjusted, h.significant,
       CAST(CASE WHEN h.difference > 0 THEN round(h.difference * h.n_protected) ELSE 0 END AS BIGINT),
       'pricing_hpml',
       CASE
         WHEN h.share_protected IS NULL THEN printf(
           'The higher-priced shares of loans originated to %s and to %s could not be compared: %s.',
           l.protected_label, l.reference_label,
           coalesce(h.note, 'no loans'))
         ELSE printf(
           '%s of the loans originated to %s were higher-priced (rate spread at least %g points for a first '
           'lien, %g for a subordinate one) against %s of those to %s: ratio %s (%.0f%% CI %s to %s), %s '
           '(N = %s and %s). A raw disparity with no controls: it does not say why the prices differ.%s',
           audit.pct(h.share_protected), l.protected_label, h.threshold_first,
           h.threshold_subordinate, audit.pct(h.share_reference), l.reference_label,
           coalesce(printf('%.2f', h.ratio), 'n/a'), 100 * h.confidence,
           coalesce(printf('%.2f', h.ratio_ci_low), 'n/a'), coalesce(printf('%.2f', h.ratio_ci_high), 'n/a'),
           CASE WHEN h.p_adjusted IS NULL THEN 'not tested'
                ELSE audit.pval(h.p_adjusted) || ', ' || h.correction || '-adjusted' END,
           audit.num(h.n_protected), audit.num(h.n_reference),
           CASE WHEN h.note IS NULL THEN '' ELSE ' Note: ' || h.note || '.' END)
       END,
       'raw disparity', 'higher-priced share of originated loans by group, no controls',
       coalesce(c.question = 'disparate_impact' AND h.significant AND h.difference > 0, false),
       NULL::BOOLEAN, NULL::DOUBLE, audit.e_value(h.ratio)
FROM audit.pricing_hpml h
JOIN labelled l USING (run_id, attribute)
LEFT JOIN audit.run_context c USING (run_id);
