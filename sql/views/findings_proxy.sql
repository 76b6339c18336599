-- Proxy findings (audit.proxy_gaps, audit.proxy_coverage): where race was inferred by BISG
-- (surname and geography) instead of recorded, each attribute's gap in the unfavourable-decision
-- rate and in each pricing field, corrected for the proxy's errors (the regression of the outcome
-- on the group probabilities), with the probability-weighted (CFPB) and the hard-assignment
-- estimates beside it, and how many records were inferred. Each lender's corrected gap follows
-- (with a geography section).
-- The controlled finding is the examiner's controlled regression with the probabilities as the
-- group (corrected_regression: the regression engine's controls, fixed effects and clustered
-- errors), with the probability-weighted regression beside it; where it was not run, the
-- corrected gap given the numeric features (corrected_controlled). The headline is the
-- controlled regression's gap in the unfavourable rate when there is one, else the corrected gap.
-- Estimand: a raw disparity (corrected), or an adjusted one (corrected_regression,
-- corrected_controlled); either rests on the correction's assumption, that the outcome depends on
-- race and not on surname or geography once race is known, and on the proxy being calibrated.
-- Flagged: the gap is significant and adverse (a higher unfavourable rate or price for the
-- protected group; lower lender credits).
CREATE OR REPLACE VIEW audit.findings_proxy AS
WITH g AS (
  SELECT g.*, v.inferred, v.records AS all_records, v.not_inferred, v.surnames_not_found,
         v.geographies_not_found, v.geography, v.threshold, v.recorded,
         w.gap AS weighted_gap, h.gap AS hard_gap,
         coalesce(g.p_value < 1 - g.confidence, false) AS significant,
         CASE WHEN g.outcome = 'lender_credits' THEN g.gap < 0 ELSE g.gap > 0 END AS adverse
  FROM audit.proxy_gaps g
  JOIN audit.proxy_coverage v USING (run_id, attribute)
  LEFT JOIN audit.proxy_gaps w ON w.run_id = g.run_id AND w.attribute = g.attribute AND w.outcome = g.outcome
       AND w.lender IS NULL AND g.lender IS NULL
       AND w.estimator = CASE g.estimator WHEN 'corrected_regression' THEN 'weighted_regression' ELSE 'weighted' END
  LEFT JOIN audit.proxy_gaps h ON h.run_id = g.run_id AND h.attribute = g.attribute AND h.outcome = g.outcome
       AND h.lender IS NULL AND g.lender IS NULL AND h.estimator = 'hard'
  WHERE g.estimator IN ('corrected', 'corrected_regression')
     OR (g.estimator = 'corrected_controlled' AND NOT EXISTS (
         SELECT 1 FROM audit.proxy_gaps r WHERE r.run_id = g.run_id AND r.attribute = g.attribute
           AND r.outcome = g.outcome AND r.estimator = 'corrected_regression' AND r.gap IS NOT NULL))
)
SELECT g.run_id, 'proxy' AS engine, g.attribute, 'protected' AS group_name,
       printf('%s gap in %s, race inferred%s', CASE g.estimator WHEN 'corrected' THEN 'corrected'
              WHEN 'corrected_regression' THEN 'corrected controlled regression' ELSE 'corrected controlled' END, g.outcome,
              CASE WHEN g.lender IS NOT NULL THEN ' (lender ' || g.lender || ')' ELSE '' END) AS finding,
       g.outcome = 'unfavourable' AND g.lender IS NULL AND CASE
         WHEN EXISTS (SELECT 1 FROM audit.proxy_gaps r WHERE r.run_id = g.run_id AND r.attribute = g.attribute
                        AND r.outcome = 'unfavourable' AND r.estimator = 'corrected_regression' AND r.gap IS NOT NULL)
         THEN g.estimator = 'corrected_regression' ELSE g.estimator = 'corrected' END AS headline,
       coalesce(g.significant AND g.adverse, false) AS flagged,
       -- the measures' names as the other engines' (the conclusion writes adjusted_denial_difference in points)
       CASE WHEN g.outcome = 'unfavourable' THEN
              CASE g.estimator WHEN 'corrected' THEN 'denial_difference' ELSE 'adjusted_denial_difference' END
            ELSE CASE g.estimator WHEN 'corrected' THEN 'price_difference' ELSE 'adjusted_price_gap' END
       END AS measure, g.gap AS value, g.ci_low, g.ci_high, g.confidence, g.p_value, g.significant,
       CASE WHEN g.outcome = 'unfavourable' AND g.gap > 0
            THEN CAST(round(g.gap * g.n_protected) AS BIGINT) ELSE 0 END AS individuals,
       'proxy_gaps' AS cases_table,
       CASE WHEN g.gap IS NULL THEN printf('%s: %s not estimated (%s).', audit.applicants(g.run_id, g.attribute, 'protected'),
                                           g.outcome, coalesce(g.note, 'no estimate'))
       ELSE printf(
         'Race inferred, not recorded: BISG (surname and %s) filled %s of %s records%s, assigning a race to %s '
         '(largest probability at least %.2f); %s surnames were not on the Census list and %s places not found. '
         '%s a gap of %s '
         '(%.0f%% CI %s to %s, %s)%s%s. The correction assumes the outcome depends on race, not on surname or '
         'place once race is known; the interval includes the proxy''s uncertainty.%s',
         g.geography, audit.num(g.all_records - g.recorded), audit.num(g.all_records),
         CASE WHEN g.recorded > 0 THEN printf(' (race was not provided; %s recorded)', audit.num(g.recorded)) ELSE '' END,
         audit.num(g.inferred), g.threshold, audit.num(g.surnames_not_found), audit.num(g.geographies_not_found),
         CASE WHEN g.estimator = 'corrected_regression' THEN printf(
                'Comparing applicants with the same %s%s (errors %s), the corrected controlled regression of the %s '
                'of %s against %s on the group probabilities gives',
                coalesce(g.controls, 'recorded inputs (none)'),
                CASE WHEN g.fixed_effects IS NOT NULL THEN ', within the same ' || replace(g.fixed_effects, ', ', ' and ')
                     ELSE '' END,
                CASE WHEN g.inference = 'HC1' OR g.inference IS NULL THEN 'heteroskedasticity-robust'
                     ELSE printf('clustered by %s, %s clusters', g.cluster, audit.num(g.clusters)) END,
                CASE WHEN g.outcome = 'unfavourable' THEN 'unfavourable decision' ELSE g.outcome END,
                audit.applicants(g.run_id, g.attribute, 'protected'), audit.applicants(g.run_id, g.attribute, 'reference'))
         ELSE printf('%s %s of %s is %s against %s for %s once corrected for the proxy''s errors,',
           CASE WHEN g.lender IS NOT NULL THEN 'At lender ' || g.lender || ', the'
                WHEN g.estimator = 'corrected_controlled' THEN 'Controlling for ' || g.controls || ', the'
                ELSE 'The' END,
           CASE WHEN g.outcome = 'unfavourable' THEN 'unfavourable-decision rate' ELSE 'mean ' || g.outcome END,
           audit.applicants(g.run_id, g.attribute, 'protected'),
           CASE WHEN g.outcome = 'unfavourable' THEN audit.pct(g.protected_mean) ELSE printf('%.3f', g.protected_mean) END,
           CASE WHEN g.outcome = 'unfavourable' THEN audit.pct(g.reference_mean) ELSE printf('%.3f', g.reference_mean) END,
           audit.applicants(g.run_id, g.attribute, 'reference')) END,
         CASE WHEN g.outcome = 'unfavourable' THEN printf('%+.1f points', 100 * g.gap) ELSE printf('%+.3f', g.gap) END,
         100 * g.confidence,
         CASE WHEN g.outcome = 'unfavourable' THEN printf('%+.1f', 100 * g.ci_low) ELSE printf('%+.3f', g.ci_low) END,
         CASE WHEN g.outcome = 'unfavourable' THEN printf('%+.1f', 100 * g.ci_high) ELSE printf('%+.3f', g.ci_high) END,
         audit.pval(g.p_value),
         CASE WHEN g.weighted_gap IS NOT NULL AND g.estimator IN ('corrected', 'corrected_regression') THEN printf(
           '; the CFPB''s probability-weighted %s, %s, is pulled toward zero where the proxy errs',
           CASE g.estimator WHEN 'corrected' THEN 'gap' ELSE 'regression''s gap' END,
           CASE WHEN g.outcome = 'unfavourable' THEN printf('%+.1f points', 100 * g.weighted_gap)
                ELSE printf('%+.3f', g.weighted_gap) END) ELSE '' END,
         CASE WHEN g.hard_gap IS NOT NULL AND g.estimator = 'corrected' THEN printf(
           ', and the gap between the records assigned a group, %s, leaves out the uncertain ones',
           CASE WHEN g.outcome = 'unfavourable' THEN printf('%+.1f points', 100 * g.hard_gap)
                ELSE printf('%+.3f', g.hard_gap) END) ELSE '' END,
         CASE WHEN g.estimator = 'corrected_regression' THEN printf(' It also assumes the controls%s tell nothing about '
              'race beyond surname and place.', CASE WHEN g.fixed_effects IS NOT NULL THEN ' and fixed effects' ELSE '' END)
              ELSE '' END)
       END AS statement,
       CASE g.estimator WHEN 'corrected' THEN 'raw disparity' ELSE 'adjusted disparity' END AS estimand,
       CASE g.estimator WHEN 'corrected' THEN printf('%s by inferred race (BISG, corrected), no controls', g.outcome)
            WHEN 'corrected_regression' THEN printf('%s by inferred race (BISG, corrected regression), given %s%s', g.outcome,
                                                  coalesce(g.controls, 'no recorded inputs'),
                                                  coalesce(', fixed effects ' || g.fixed_effects, ''))
            ELSE printf('%s by inferred race (BISG, corrected), given %s', g.outcome, g.controls) END AS basis,
       coalesce(CASE g.estimator
         WHEN 'corrected' THEN c.question = 'disparate_impact' AND g.significant AND g.adverse
         ELSE c.inputs = 'complete' AND g.significant AND g.adverse END, false) AS evidence,
       NULL::BOOLEAN AS robust, NULL::DOUBLE AS robustness_value, NULL::DOUBLE AS e_value
FROM g
LEFT JOIN audit.run_context c USING (run_id);
