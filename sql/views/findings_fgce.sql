-- FGCE findings (Kavouras et al.): per run x protected attribute, the protected group's
-- recourse against the reference group's — how many of its rejected members can be shown a
-- feasible path to a favourable decision (coverage with k counterfactuals) and at what cost
-- (d0, the smallest maximum cost that covers them with k0 counterfactuals).
CREATE OR REPLACE VIEW audit.findings_fgce AS
WITH pr AS (
  SELECT p.*, r.coverage_at_k AS ref_coverage, r.d0_at_k0 AS ref_d0, r.k0 AS ref_k0,
         r.factuals AS ref_factuals
  FROM audit.fgce_k0d0 p
  JOIN audit.fgce_k0d0 r
    ON r.run_id = p.run_id AND r.attribute = p.attribute AND r.group_name = 'reference'
  WHERE p.group_name = 'protected'
)
SELECT run_id, 'fgce' AS engine, attribute, group_name, 'recourse coverage' AS finding,
       true AS headline, coalesce(coverage_at_k < ref_coverage, false) AS flagged,
       'coverage_at_k' AS measure, coverage_at_k AS value, NULL::DOUBLE AS ci_low,
       NULL::DOUBLE AS ci_high, NULL::DOUBLE AS confidence, NULL::DOUBLE AS p_value,
       NULL::BOOLEAN AS significant, factuals - coverable AS individuals,
       'fgce_counterfactuals' AS cases_table,
       printf('%s of the %s rejected %s can be shown a feasible path to a favourable '
              'decision with %d counterfactual(s), against %s of the %s rejected %s; '
              '%s have no feasible path at all.',
              audit.pct(coverage_at_k), audit.num(factuals), audit.applicants(run_id, attribute, group_name),
              k, audit.pct(ref_coverage), audit.num(ref_factuals), audit.applicants(run_id, attribute, 'reference'),
              audit.num(factuals - coverable)) AS statement,
       'recourse' AS estimand, 'feasible changes to the recorded inputs under the audited model' AS basis,
       false AS evidence, NULL::BOOLEAN AS robust, NULL::DOUBLE AS robustness_value, NULL::DOUBLE AS e_value
FROM pr
UNION ALL
SELECT run_id, 'fgce', attribute, group_name, 'recourse cost', true,
       coalesce(d0_at_k0 > ref_d0, false), 'd0_at_k0', d0_at_k0, NULL, NULL, NULL, NULL, NULL,
       coverable, 'fgce_counterfactuals',
       printf('Covering the %s %s who have a feasible path takes recourse costs up to '
              '%.3f (d0 with k0 = %d counterfactuals), against %.3f for %s '
              '(k0 = %d)%s.',
              audit.num(coverable), audit.applicants(run_id, attribute, group_name), d0_at_k0, k0, ref_d0,
              audit.applicants(run_id, attribute, 'reference'), ref_k0,
              CASE WHEN d0_at_k0 > ref_d0 THEN printf(': %s must change more to be accepted',
                                                      audit.applicants(run_id, attribute, group_name))
                   ELSE '' END),
       'recourse', 'feasible changes to the recorded inputs under the audited model', false, NULL, NULL, NULL
FROM pr
WHERE d0_at_k0 IS NOT NULL AND ref_d0 IS NOT NULL;
