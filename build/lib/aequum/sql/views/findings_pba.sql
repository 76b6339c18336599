-- PBA findings (twin-network verification, seed 004): per run x attribute x group x setting x
-- delta, the share of the group's considered inputs proven persistently more confident as
-- observed, or as flipped (the model favours the input's twin in the other group). A proof,
-- not a test: no interval; inconclusive inputs are counted apart. The headline is the
-- protected group, flipped, at the smallest delta (bias against the protected group).
CREATE OR REPLACE VIEW audit.findings_pba AS
WITH s AS (
  SELECT s.*, min(s.delta) OVER (PARTITION BY s.run_id, s.attribute) AS delta_headline
  FROM audit.pba_summary s
)
SELECT run_id, 'pba' AS engine, attribute, group_name,
       printf('persistent bias (PBA, %s, delta = %s)', setting, CAST(delta AS VARCHAR)) AS finding,
       setting = 'flipped' AND delta = delta_headline
         AND (group_name = 'protected' OR (group_name LIKE '%=%' AND group_name NOT LIKE '%=reference%')) AS headline,
       coalesce(verified > 0, false) AS flagged,
       'pba' AS measure, pba AS value, NULL::DOUBLE AS ci_low, NULL::DOUBLE AS ci_high,
       NULL::DOUBLE AS confidence, NULL::DOUBLE AS p_value, NULL::BOOLEAN AS significant,
       verified AS individuals, 'pba_inputs' AS cases_table,
       printf('For %s of the %s considered inputs of %s (%s), the model is proven to be more '
              'confident in the true class %s over the whole delta = %s box; %s falsified, %s '
              'inconclusive%s.',
              audit.num(verified), audit.num(considered), audit.group_label(attribute, group_name),
              audit.pct(pba),
              CASE WHEN setting = 'flipped' THEN printf('when shown as %s than as itself',
                                                        audit.group_label(attribute, presented_group))
                   ELSE 'as itself than when its protected attribute is flipped' END,
              CAST(delta AS VARCHAR), audit.num(falsified), audit.num(inconclusive),
              CASE WHEN sampled THEN printf(' (a sample of %s of %s)', audit.num(inputs), audit.num(population))
                   ELSE '' END) AS statement
FROM s;
