-- CST findings (Alvarez & Ruggieri 2023): per run x protected attribute x method x k, how many
-- complainants were treated worse than their neighbours with significance (Def. 3.5: the
-- one-sided (1 - alpha) lower bound of delta_p above tau). The headline is CST at the largest k.
-- CF compares one decision with one counterfactual decision: no sample, no test (significant is
-- null); its finding counts the decisions that flip.
CREATE OR REPLACE VIEW audit.findings_cst AS
WITH params AS (
  SELECT run_id,
         coalesce(TRY_CAST(json_extract(parameters, '$.cst.alpha') AS DOUBLE), 0.05) AS alpha,
         coalesce(TRY_CAST(json_extract(parameters, '$.cst.tau') AS DOUBLE), 0.0) AS tau
  FROM audit.runs
), s AS (
  SELECT s.*, max(CASE WHEN s.method = 'CST' THEN s.k END)
           OVER (PARTITION BY s.run_id, s.protected_attribute) AS k_headline
  FROM audit.cst_summary s
)
SELECT s.run_id, 'cst' AS engine, s.protected_attribute AS attribute, 'protected' AS group_name,
       CASE s.method WHEN 'CST' THEN printf('counterfactual situation testing, k = %d', s.k)
                     WHEN 'CST_wo_centres' THEN printf('counterfactual situation testing without centres, k = %d', s.k)
                     WHEN 'ST' THEN printf('situation testing, k = %d', s.k)
                     WHEN 'CF' THEN 'counterfactual fairness'
                     ELSE printf('%s, k = %d', s.method, s.k) END AS finding,
       s.method = 'CST' AND s.k = s.k_headline AS headline,
       coalesce(s.significant, s.discriminated) > 0 AS flagged,
       CASE WHEN s.method = 'CF' THEN 'discriminated_share' ELSE 'significant_share' END AS measure,
       coalesce(s.significant_share, s.discriminated_share) AS value, NULL::DOUBLE AS ci_low,
       NULL::DOUBLE AS ci_high, 1 - p.alpha AS confidence, NULL::DOUBLE AS p_value,
       s.significant > 0 AS significant, coalesce(s.significant, s.discriminated) AS individuals,
       'cst_claims' AS cases_table,
       CASE WHEN s.method = 'CF' THEN printf(
              '%s of %s complainants of %s (%s) were refused while their counterfactual, '
              'the same person had they belonged to the reference group, would have been accepted.',
              audit.num(s.discriminated), audit.num(s.complainants),
              audit.group_label(s.protected_attribute, 'protected'), audit.pct(s.discriminated_share))
            ELSE printf(
              '%s of %s complainants of %s (%s) were treated worse than their %s neighbours in the '
              'reference group with significance (one-sided, alpha = %s, tau = %s, k = %d); '
              '%s (%s) show some gap.',
              audit.num(s.significant), audit.num(s.complainants),
              audit.group_label(s.protected_attribute, 'protected'), audit.pct(s.significant_share),
              CASE WHEN s.method = 'ST' THEN 'factual' ELSE 'counterfactual' END,
              CAST(p.alpha AS VARCHAR), CAST(p.tau AS VARCHAR), s.k,
              audit.num(s.discriminated), audit.pct(s.discriminated_share))
       END AS statement
FROM s
LEFT JOIN params p USING (run_id);
