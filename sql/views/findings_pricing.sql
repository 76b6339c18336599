-- Pricing findings (engine pricing): per run x unit x pricing field, how much more (or less)
-- the protected group's originated loans cost than the reference group's after controlling for
-- the named recorded inputs (audit.pricing_estimates: OLS of the price on the group and the
-- controls, the other columns' groups held), with its sensitivity to an omitted variable
-- (Cinelli & Hazlett 2020); and per run x unit the higher-priced share of the rate spread
-- (audit.pricing_hpml: HPML, Reg Z 1026.35, 1.5 points for a first lien and 3.5 for a
-- subordinate one), a raw disparity with its ratio and two-proportion test.
-- flagged: the adjusted p (across the run's pricing tests) significant and the difference in
-- the borrower's disfavour (higher; lower for lender credits: adverse); for the HPML share, a
-- significantly higher share. Evidence (of disparate treatment): flagged, and either on records
-- holding every input of the decisions or surviving the spec's stated bound on the inputs the
-- records lack (decision.bounds for the field: engines.regression.bounds). On the public LAR,
-- which lacks the credit score a pricer reads first, a flagged difference without such a bound
-- is an unexplained disparity for review. The HPML share is a raw disparity, evidence only when
-- the audit asks about disparate impact.
-- One claim, once: the interest rate and the rate spread (the APR over a benchmark rate common
-- to loans locked together) measure one price; where both are estimated, the rate spread carries
-- the claim and the interest rate's row is a supporting figure (not headline, not flagged).
CREATE OR REPLACE VIEW audit.findings_pricing AS
WITH labelled AS (
    -- "Female applicants"; a per-value comparison (race=Asian) is against its attribute's reference group
    SELECT run_id, attribute, audit.applicants(run_id, attribute, 'protected') AS protected_label,
           audit.applicants(run_id, attribute, 'reference') AS reference_label
    FROM (SELECT DISTINCT run_id, attribute FROM audit.pricing_estimates
          UNION SELECT DISTINCT run_id, attribute FROM audit.pricing_hpml))
SELECT e.run_id, 'pricing' AS engine, e.attribute, 'protected' AS group_name,
       'adjusted ' || e.field || ' difference' AS finding, NOT e.supporting AS headline,
       coalesce(e.significant AND e.adverse AND NOT e.supporting, false) AS flagged,
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
           'difference %.3f)%s.%s%s',
           CASE WHEN e.controls = '' THEN 'nothing' ELSE e.controls END, e.field,
           l.protected_label, abs(e.estimate),
           CASE WHEN e.estimate >= 0 THEN 'higher' ELSE 'lower' END,
           l.reference_label, 100 * e.confidence, e.ci_low, e.ci_high,
           CASE WHEN e.p_adjusted IS NULL THEN 'not tested'
                ELSE audit.pval(e.p_adjusted) || ', ' || e.correction || '-adjusted' END
           || CASE WHEN e.cluster IS NULL AND coalesce(e.inference, 'classical') = 'classical' THEN ''
                   ELSE '; ' || audit.inference_text(e.inference, e.cluster, e.clusters, e.bootstrap_draws) END,
           audit.num(e.n), e.mean_protected, e.mean_reference, e.median_protected, e.median_reference,
           e.raw_difference,
           printf('; an unobserved factor would need to explain %s of the residual variance of both group '
                  'membership and the price to remove the difference (robustness value; %s to make it no '
                  'longer significant)', audit.pct(e.rv_q1), audit.pct(e.rv_q1_alpha)),
           CASE WHEN e.note IS NULL THEN '' ELSE ' Note: ' || e.note || '.' END,
           ' ' || CASE
             WHEN e.supporting THEN
               'Counted once: the rate spread''s finding carries this claim (the spread is the rate over a '
               'benchmark common to loans locked together).'
             WHEN NOT coalesce(e.significant AND e.adverse, false) THEN
               CASE WHEN e.p_adjusted IS NULL THEN 'Not tested: the estimate is descriptive.'
                    ELSE 'Not a significant difference in the borrowers'' disfavour.' END
             WHEN c.question <> 'disparate_treatment' THEN
               'An adjusted disparity: a screen for review; the audit''s question is not disparate treatment.'
             WHEN c.inputs = 'complete' THEN
               'The records hold every input of the price, so no omitted input can explain it: evidence of '
               'disparate treatment.'
             WHEN e.survives_bound THEN printf(
               'It survives the stated bound on %s (partial R-squared %.2f with group membership and %.2f '
               'with the %s; source: %s): at most %.3f of it could be theirs, leaving %.3f (%.3f to %.3f, %s, '
               '%s-adjusted): evidence of disparate treatment.',
               c.missing, e.bound_r2_group, e.bound_r2_outcome, e.field, e.bound_source,
               abs(e.estimate - e.bounded_estimate), e.bounded_estimate, e.bounded_ci_low, e.bounded_ci_high,
               audit.pval(e.bounded_p_adjusted), e.correction)
             WHEN e.bound_source IS NOT NULL THEN printf(
               'An unexplained disparity for review, not evidence: %s as strong as the stated bound (partial '
               'R-squared %.2f with group membership and %.2f with the %s; source: %s) could explain it '
               '(bounded difference %.3f, %.3f to %.3f).',
               c.missing, e.bound_r2_group, e.bound_r2_outcome, e.field, e.bound_source,
               e.bounded_estimate, e.bounded_ci_low, e.bounded_ci_high)
             ELSE printf(
               'An unexplained disparity for review, not evidence: the records lack %s, which drive prices '
               'and may explain it, and no bound on them was stated (decision.bounds).', c.missing) END)
       END AS statement,
       'adjusted disparity' AS estimand,
       'controls: ' || coalesce(e.controls, '') || '; originated loans reporting ' || e.field AS basis,
       coalesce(c.question = 'disparate_treatment' AND e.significant AND e.adverse AND NOT e.supporting
                AND (c.inputs = 'complete' OR coalesce(e.survives_bound, false)), false) AS evidence,
       e.robust, e.rv_q1_alpha AS robustness_value, NULL::DOUBLE AS e_value
FROM (SELECT p.*,
             -- the interest rate beside an estimated rate spread of the same unit: one price, one claim
             p.field = 'interest_rate' AND EXISTS (
               SELECT 1 FROM audit.pricing_estimates q
               WHERE q.run_id = p.run_id AND q.attribute = p.attribute AND q.field = 'rate_spread'
                 AND q.estimate IS NOT NULL) AS supporting
      FROM audit.pricing_estimates p) e
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
