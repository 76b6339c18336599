-- CEC findings (counterfactual explanation consistency, seed 000): per run x attribute x group,
-- the share of matched pairs in regime B (same prediction, different reasoning: hidden bias)
-- with the mean explanation gap CEC, and the input whose attributions differ most between the
-- groups. Flagged when the mean gap exceeds the "same reasoning" threshold. A census of the
-- matched pairs, not a test: no interval. The headline is the whole attribute (group 'all').
-- Estimand: procedural, a property of the model's explanations (the surrogate's, unless the
-- spec supplies the lender's model); never by itself evidence of disparate treatment.
CREATE OR REPLACE VIEW audit.findings_cec AS
WITH top AS (
  SELECT run_id, attribute, "group", feature, direction, share_of_delta
  FROM audit.cec_features
  WHERE rank = 1
)
SELECT s.run_id, 'cec' AS engine, s.attribute, s."group" AS group_name,
       'hidden bias: same decision, different reasoning (CEC regime B)' AS finding,
       s."group" = 'all' AS headline,
       coalesce(s.cec > s.threshold, false) AS flagged,
       'regime_b_share' AS measure, s.regime_b AS value, NULL::DOUBLE AS ci_low, NULL::DOUBLE AS ci_high,
       NULL::DOUBLE AS confidence, NULL::DOUBLE AS p_value, NULL::BOOLEAN AS significant,
       CAST(round(s.regime_b * s.matched) AS BIGINT) AS individuals, 'cec_pairs' AS cases_table,
       printf('%s of %s matched pairs (%s) of %s get the same decision as their nearest counterpart '
              'of the other group but for different reasons (explanation gap above %s; mean gap CEC '
              '%s)%s.',
              audit.num(round(s.regime_b * s.matched)), audit.num(s.matched), audit.pct(s.regime_b),
              CASE WHEN s."group" = 'all' THEN printf('all applicants (by %s)', s.attribute)
                   ELSE audit.applicants(s.run_id, s.attribute, s."group") END,
              printf('%.2f', s.threshold), printf('%.3f', s.cec),
              CASE WHEN t.feature IS NULL THEN ''
                   ELSE printf('; the attributions differ most on %s (%s of the gap, %s)',
                               t.feature, audit.pct(t.share_of_delta), t.direction) END)
       || CASE WHEN c.model = 'surrogate' THEN ' (explanations of the surrogate fitted to the recorded decisions)'
               ELSE '' END AS statement,
       'procedural (model explanations)' AS estimand, coalesce(c.model_basis, 'the audited model') AS basis,
       false AS evidence, NULL::BOOLEAN AS robust, NULL::DOUBLE AS robustness_value, NULL::DOUBLE AS e_value
FROM audit.cec_summary s
LEFT JOIN top t ON t.run_id = s.run_id AND t.attribute = s.attribute AND t."group" = s."group"
LEFT JOIN audit.run_context c ON c.run_id = s.run_id;
