-- PBA findings (twin-network verification, seed 004): per run x attribute x group x setting x
-- delta, the share of the group's considered inputs proven persistently more confident as
-- observed, or as flipped (the model favours the input's twin in the other group). A proof,
-- not a test: no interval; inconclusive inputs are counted apart. The headline is the
-- protected group, flipped, at the smallest delta (bias against the protected group).
-- Estimand: a property of the model verified (runs.parameters $.audit.model). With a surrogate
-- fitted to the recorded decisions it describes the surrogate, which loads whatever the inputs
-- lack onto the group indicator: never evidence about the lender. With the lender's own model
-- it is a proof about that model, which this part marks (flagged, evidence); the union
-- (sql/findings_ranked.sql) ranks every model property after the claims about the lender's
-- decisions and flags none: a model's bias under perturbation is not a decision made.
CREATE OR REPLACE VIEW audit.findings_pba AS
WITH s AS (
  SELECT s.*, min(s.delta) OVER (PARTITION BY s.run_id, s.attribute) AS delta_headline
  FROM audit.pba_summary s
), f AS (
  SELECT s.*, coalesce(s.verified > 0, false) AS flagged, c.question, c.model, c.model_basis
  FROM s
  LEFT JOIN audit.run_context c USING (run_id)
)
SELECT run_id, 'pba' AS engine, attribute, group_name,
       printf('persistent bias (PBA, %s, delta = %s)', setting, CAST(delta AS VARCHAR)) AS finding,
       setting = 'flipped' AND delta = delta_headline
         AND (group_name = 'protected' OR (group_name LIKE '%=%' AND group_name NOT LIKE '%=reference%')) AS headline,
       flagged,
       'pba' AS measure, pba AS value, NULL::DOUBLE AS ci_low, NULL::DOUBLE AS ci_high,
       NULL::DOUBLE AS confidence, NULL::DOUBLE AS p_value, NULL::BOOLEAN AS significant,
       verified AS individuals, 'pba_inputs' AS cases_table,
       printf('For %s of the %s considered inputs of %s (%s), %s is proven to be more '
              'confident in the true class %s over the whole delta = %s box; %s falsified, %s '
              'inconclusive%s.',
              audit.num(verified), audit.num(considered), audit.applicants(run_id, attribute, group_name),
              audit.pct(pba), CASE WHEN model = 'surrogate' THEN 'the surrogate model fitted to the recorded decisions' ELSE 'the model' END,
              CASE WHEN setting = 'flipped' THEN printf('when shown as %s than as itself',
                                                        audit.group_label(run_id, attribute, presented_group))
                   ELSE 'as itself than when its protected attribute is flipped' END,
              CAST(delta AS VARCHAR), audit.num(falsified), audit.num(inconclusive),
              CASE WHEN sampled THEN printf(' (a sample of %s of %s)', audit.num(inputs), audit.num(population))
                   ELSE '' END)
       || CASE WHEN model = 'surrogate' THEN ' A property of the surrogate, not of the lender''s model: the '
                                             'surrogate attributes to the group whatever its inputs lack.'
               ELSE '' END AS statement,
       'model property' AS estimand, model_basis AS basis,
       flagged AND model = 'lender' AND question = 'disparate_treatment' AS evidence,
       NULL::BOOLEAN AS robust, NULL::DOUBLE AS robustness_value, NULL::DOUBLE AS e_value
FROM f;
