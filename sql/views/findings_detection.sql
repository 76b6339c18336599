-- Detection quality (engines/detection.py): where the source has a ground truth of who was
-- harmed, each engine's individual findings scored against the truth of their own kind (CF and
-- CST: the total effect of do(attribute := reference); ST and PBA: the direct effect). One row
-- per run x engine x method x parameter x attribute x group x finding; the headline is the
-- CST significant finding at the largest k and CF. Never flagged: flagged says something is
-- wrong with the audited decisions, and these rows grade the audit itself (the statement says
-- whether the findings beat chance: precision against the base rate of harm among those
-- examined). The interval is precision's 95% Wilson interval.
CREATE OR REPLACE VIEW audit.findings_detection AS
WITH d AS (
  SELECT d.*, TRY_CAST(regexp_extract(d.parameter, 'k=(\d+)', 1) AS INTEGER) AS k,
         max(TRY_CAST(regexp_extract(d.parameter, 'k=(\d+)', 1) AS INTEGER))
           FILTER (WHERE d.method = 'CST' AND d.finding = 'significant')
           OVER (PARTITION BY d.run_id, d.protected_attribute, d."group") AS k_headline
  FROM audit.detection d
  WHERE d.same_kind
)
SELECT d.run_id, 'detection' AS engine, d.protected_attribute AS attribute,
       CASE WHEN d."group" = 'pooled' THEN 'protected' ELSE d."group" END AS group_name,
       printf('%s %s (%s, %s) against the %s-effect truth', d.engine, d.method, d.parameter, d.finding,
              d.effect) AS finding,
       (d.method = 'CST' AND d.finding = 'significant' AND d.k = d.k_headline) OR d.method = 'CF' AS headline,
       false AS flagged,
       'precision' AS measure, d.precision AS value, d.precision_ci_low AS ci_low, d.precision_ci_high AS ci_high,
       CASE WHEN d.precision_ci_low IS NULL THEN NULL ELSE 0.95 END AS confidence, NULL::DOUBLE AS p_value,
       NULL::BOOLEAN AS significant,
       d.true_positives AS individuals, 'detection' AS cases_table,
       printf('%s %s (%s) flagged %s of %s examined (%s); of them %s were harmed (precision %s, against a '
              'base rate of %s: %s chance), finding %s of the %s harmed (recall %s, F1 %s).',
              d.engine, d.method, d.parameter, audit.num(d.flagged), audit.num(d.population),
              audit.applicants(d.run_id, d.protected_attribute, CASE WHEN d."group" = 'pooled' THEN 'protected' ELSE d."group" END),
              audit.num(d.true_positives), audit.pct(d.precision), audit.pct(d.base_rate),
              CASE WHEN d.precision IS NULL OR d.base_rate IS NULL OR d.base_rate = 0 THEN 'n/a'
                   ELSE printf('%.2fx', d.precision / d.base_rate) END,
              audit.num(d.true_positives), audit.num(d.harmed), audit.pct(d.recall), audit.pct(d.f1)) AS statement,
       'detection quality' AS estimand, printf('the ground truth of %s effects', d.effect) AS basis,
       false AS evidence, NULL::BOOLEAN AS robust, NULL::DOUBLE AS robustness_value, NULL::DOUBLE AS e_value
FROM d;
