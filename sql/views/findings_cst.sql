-- CST findings (Alvarez & Ruggieri 2023): per run x protected attribute x method x k, how many
-- complainants fared worse than their neighbours with significance (Def. 3.5: the one-sided
-- (1 - alpha) lower bound of delta_p above tau). The headline is CST at the largest k.
-- CF compares one decision with one counterfactual decision: no sample, no test (significant is
-- null); its finding counts the decisions that flip.
--
-- What each method estimates (cst_summary.effect): ST compares a complainant with reference
-- applicants of similar recorded inputs, a direct effect given those inputs; CST and CF compare
-- with the complainant's counterfactual through the SCM, the total effect of the attribute
-- (group differences in income, DTI ... count), a path-specific effect when some mediators are
-- held, a direct effect when every one is. Each complainant's test holds its level alpha, so a
-- method is flagged only when significantly more complainants are significant than the alpha
-- share chance alone makes (cst_summary.excess_p_value, one-sided binomial). A
-- direct-effect finding is evidence of disparate treatment only when its group's controlled
-- disparity is significant too (audit.robustness.group_significant, the regression engine: a
-- group-level test, where the individual counts are not one — neighbourhoods overlap, and
-- where the groups' inputs differ in density a neighbourhood of k reaches further for one
-- group than the other) and the records hold every input of the decisions (decision.inputs:
-- complete). On records that lack inputs of the decisions the shares are descriptive (the
-- union, sql/findings_ranked.sql, never flags them). A total-effect finding is evidence only
-- for a counterfactual-fairness audit. Complainants without comparators in the
-- reference group (cst_summary.comparable, engines.cst.overlap) are not tested: the statement
-- says how many were.
CREATE OR REPLACE VIEW audit.findings_cst AS
WITH params AS (
  SELECT run_id,
         coalesce(TRY_CAST(json_extract(parameters, '$.cst.alpha') AS DOUBLE), 0.05) AS alpha,
         coalesce(TRY_CAST(json_extract(parameters, '$.cst.tau') AS DOUBLE), 0.0) AS tau
  FROM audit.runs
), s AS (
  SELECT s.*, max(CASE WHEN s.method = 'CST' THEN s.k END)
           OVER (PARTITION BY s.run_id, s.protected_attribute) AS k_headline,
         CASE WHEN s.method = 'ST' THEN 'direct effect given the recorded inputs'
              WHEN s.effect = 'total' THEN 'total effect'
              WHEN starts_with(s.effect, 'direct') THEN 'direct effect'
              ELSE 'path-specific effect' END AS estimand
  FROM audit.cst_summary s
), f AS (
  SELECT s.*, p.alpha, p.tau, c.question, c.inputs, c.missing, r.robust, r.robustness_value, r.strongest_control,
         r.group_significant,
         CASE WHEN s.method = 'CF' THEN coalesce(s.discriminated, 0) > 0
              ELSE coalesce(s.excess_p_value < p.alpha, s.significant_share > p.alpha, false) END AS flagged
  FROM s
  LEFT JOIN params p USING (run_id)
  LEFT JOIN audit.run_context c USING (run_id)
  LEFT JOIN audit.robustness r ON r.run_id = s.run_id AND r.attribute = s.protected_attribute
)
SELECT f.run_id, 'cst' AS engine, f.protected_attribute AS attribute, 'protected' AS group_name,
       CASE f.method WHEN 'CST' THEN printf('counterfactual situation testing, k = %d', f.k)
                     WHEN 'CST_wo_centres' THEN printf('counterfactual situation testing without centres, k = %d', f.k)
                     WHEN 'ST' THEN printf('situation testing, k = %d', f.k)
                     WHEN 'CF' THEN 'counterfactual fairness'
                     ELSE printf('%s, k = %d', f.method, f.k) END AS finding,
       f.method = 'CST' AND f.k = f.k_headline AS headline,
       f.flagged,
       CASE WHEN f.method = 'CF' THEN 'discriminated_share' ELSE 'significant_share' END AS measure,
       coalesce(f.significant_share, f.discriminated_share) AS value, NULL::DOUBLE AS ci_low,
       NULL::DOUBLE AS ci_high, 1 - f.alpha AS confidence,
       -- the flag's test: more complainants significant than chance makes (one-sided binomial; a
       -- screen, the neighbourhoods overlap); CF compares decisions and has none
       f.excess_p_value AS p_value,
       f.significant > 0 AS significant, coalesce(f.significant, f.discriminated) AS individuals,
       'cst_claims' AS cases_table,
       CASE WHEN f.method = 'CF' THEN printf(
              '%s of %s complainants among %s (%s) were refused while their counterfactual, the same '
              'applicant had they belonged to the reference group (%s) with %s as the SCM moves them, '
              'would have been accepted (%s).',
              audit.num(f.discriminated), audit.num(f.complainants),
              audit.applicants(f.run_id, f.protected_attribute, 'protected'), audit.pct(f.discriminated_share),
              audit.group_label(f.run_id, f.protected_attribute, 'reference'),
              CASE WHEN f.estimand = 'total effect' THEN 'every input'
                   ELSE 'the inputs not held as mediators' END, f.estimand)
            ELSE printf(
              '%s of %s complainants among %s (%s) fared worse than their %s neighbours among %s '
              'with significance (one-sided, alpha = %s, tau = %s, k = %d; %s); '
              '%s (%s) show some gap.%s %s',
              audit.num(f.significant), audit.num(f.complainants),
              audit.applicants(f.run_id, f.protected_attribute, 'protected'), audit.pct(f.significant_share),
              CASE WHEN f.method = 'ST' THEN 'factual' ELSE 'counterfactual' END,
              audit.applicants(f.run_id, f.protected_attribute, 'reference'),
              CAST(f.alpha AS VARCHAR), CAST(f.tau AS VARCHAR), f.k, f.estimand,
              audit.num(f.discriminated), audit.pct(f.discriminated_share),
              CASE WHEN f.comparable < f.complainants THEN printf(
                ' Only %s had comparators in the reference group (engines.cst.overlap); the others '
                'were not tested.', audit.num(f.comparable)) ELSE '' END,
              CASE WHEN f.inputs <> 'complete' THEN printf(
                     'The records lack %s: neighbours alike in what the records hold may differ in what they '
                     'lack, so these shares describe and are no test of how the applicants were treated.',
                     f.missing)
                   WHEN NOT f.flagged THEN printf('Not significantly more than the %s that chance alone flags '
                                                  'at this level.', audit.pct(f.alpha))
                   WHEN f.estimand IN ('total effect', 'path-specific effect') THEN
                     'The counterfactual moves the applicant''s inputs with the group, so group differences '
                     'in those inputs count: a counterfactual-fairness finding, not by itself evidence that '
                     'applicants with the same inputs were treated differently.'
                   WHEN f.group_significant IS NULL THEN
                     'No group-level test of the controlled disparity was run (engines.regression): '
                     'the individual counts alone are not evidence.'
                   WHEN NOT f.group_significant THEN
                     'The controlled disparity of the group is not significant (engines.regression): '
                     'not evidence of disparate treatment.'
                   WHEN f.inputs = 'complete' THEN
                     'The records hold every input of the decisions and the group''s controlled disparity '
                     'is significant: evidence of a direct effect.'
                   ELSE 'Inputs the records lack may explain it.' END)
       END AS statement,
       f.estimand,
       CASE WHEN f.method = 'ST' THEN 'the recorded inputs compared (engines.cst.features)'
            ELSE 'counterfactuals through the SCM: ' || f.effect END AS basis,
       CASE WHEN f.question = 'counterfactual_fairness' THEN f.flagged AND f.estimand <> 'direct effect given the recorded inputs'
            WHEN f.question = 'disparate_treatment' THEN
              f.flagged AND f.estimand IN ('direct effect given the recorded inputs', 'direct effect')
              AND coalesce(f.group_significant, false) AND f.inputs = 'complete'
            ELSE false END AS evidence,
       CASE WHEN f.estimand IN ('direct effect given the recorded inputs', 'direct effect') THEN
              CASE WHEN f.inputs = 'complete' THEN coalesce(f.robust, true) ELSE f.robust END END AS robust,
       f.robustness_value, NULL::DOUBLE AS e_value
FROM f;
