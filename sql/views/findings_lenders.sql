-- Lender-by-lender findings (engine lenders): per run x comparison x outcome (denial, or a price
-- field among originations) one headline row (how many lenders were tested and flagged, and how
-- many markets showed a significant controlled gap), and one row per flagged lender.
-- A lender's figure (audit.lender_disparities) is its group gap in the outcome net of the
-- recorded inputs (a pooled fit with market, lender and group fixed effects) within each market
-- and product, MINUS the gap its markets' other lenders show within their own books (leave-one-out;
-- lenders flagged are left out of their peers' benchmarks). flagged: significant after the
-- Benjamini-Hochberg adjustment across the lenders of the comparison x outcome AND the
-- empirical-Bayes shrunk estimate adverse. On records lacking inputs that drive the decision (the
-- public LAR lacks the credit score: audit.run_context.inputs = 'partial') a flagged lender is an
-- unexplained disparity for review, never evidence; evidence only on records holding every input.
CREATE OR REPLACE VIEW audit.findings_lenders AS
WITH labelled AS (
    SELECT run_id, attribute, audit.applicants(run_id, attribute, 'protected') AS protected_label,
           audit.applicants(run_id, attribute, 'reference') AS reference_label
    FROM (SELECT DISTINCT run_id, attribute FROM audit.lender_disparities)),
lender_counts AS (
    SELECT run_id, attribute, field,
           count(*) FILTER (WHERE p_value IS NOT NULL) AS tested,
           count(*) FILTER (WHERE flagged) AS flagged_lenders,
           count(*) AS lenders,
           min(p_adjusted) FILTER (WHERE flagged) AS best_p,
           min(correction) AS correction, min(confidence) AS confidence,
           max(estimate) FILTER (WHERE flagged) AS worst,
           string_agg(lei, ', ' ORDER BY p_adjusted, lei) FILTER (WHERE flagged) AS names,
           sum(n_protected) FILTER (WHERE flagged) AS affected,
           min(controls) AS controls
    FROM audit.lender_disparities
    GROUP BY ALL),
market_counts AS (
    SELECT run_id, attribute, field,
           count(*) FILTER (WHERE p_value IS NOT NULL) AS tested,
           count(*) FILTER (WHERE significant AND adverse) AS adverse_markets
    FROM audit.market_disparities
    GROUP BY ALL),
wording AS (
    SELECT run_id, inputs, question,
           CASE WHEN inputs = 'complete'
                THEN 'The records hold every input of the decisions: a disparity no recorded input explains.'
                ELSE 'An unexplained disparity for review (file review of the lender''s applications), not evidence '
                     'of discrimination: the public LAR lacks the credit score and other inputs of the decision, '
                     'and a lender whose protected applicants differ from its peers'' in them shows an excess it '
                     'did not cause.' END AS caveat
    FROM audit.run_context)
SELECT c.run_id, 'lenders' AS engine, c.attribute, 'protected' AS group_name,
       printf('lenders against peers: %s', c.field) AS finding, true AS headline,
       c.flagged_lenders > 0 AS flagged, 'lenders_flagged' AS measure, CAST(c.flagged_lenders AS DOUBLE) AS value,
       NULL::DOUBLE AS ci_low, NULL::DOUBLE AS ci_high, c.confidence, c.best_p AS p_value,
       c.flagged_lenders > 0 AS significant, CAST(coalesce(c.affected, 0) AS BIGINT) AS individuals,
       'lender_disparities' AS cases_table,
       printf('%s of %s lenders tested (of %s with applications) had a %s gap between %s and %s, after the '
              'recorded inputs, significantly above their markets'' other lenders'' (%s-adjusted across lenders, '
              'the shrunk estimate adverse)%s; %s of %s markets tested showed a significant controlled gap. %s',
              audit.num(c.flagged_lenders), audit.num(c.tested), audit.num(c.lenders),
              CASE WHEN c.field = 'denial' THEN 'denial' ELSE c.field END, l.protected_label, l.reference_label,
              coalesce(c.correction, 'not'),
              CASE WHEN c.flagged_lenders > 0 THEN ': ' || c.names ELSE '' END,
              audit.num(coalesce(m.adverse_markets, 0)), audit.num(coalesce(m.tested, 0)),
              coalesce(w.caveat, '')) AS statement,
       'adjusted disparity' AS estimand,
       'controls: ' || coalesce(c.controls, '') || '; each lender against the other lenders of its markets and products' AS basis,
       coalesce(w.question = 'disparate_treatment' AND w.inputs = 'complete' AND c.flagged_lenders > 0, false) AS evidence,
       NULL::BOOLEAN AS robust, NULL::DOUBLE AS robustness_value, NULL::DOUBLE AS e_value
FROM lender_counts c
JOIN labelled l USING (run_id, attribute)
LEFT JOIN market_counts m USING (run_id, attribute, field)
LEFT JOIN wording w USING (run_id)
UNION ALL
SELECT d.run_id, 'lenders', d.attribute, d.lei,
       printf('lender against peers: %s', d.field), false, true,
       CASE WHEN d.field = 'denial' THEN 'excess_denial_rate' ELSE 'excess_price' END,
       d.estimate, d.ci_low, d.ci_high, d.confidence, d.p_adjusted, d.significant,
       CAST(d.n_protected AS BIGINT), 'lender_disparities',
       printf('Lender %s (N = %s: %s %s, %s %s): %s gap after the recorded inputs was %s %s than the gap of its '
              'markets'' other lenders (%s against %s, %s; %.0f%% CI of the excess %s to %s; %s, %s-adjusted across '
              '%s lenders; shrunk to %s). %s',
              CASE WHEN p.name IS NULL THEN d.lei ELSE printf('%s (LEI %s)', p.name, d.lei) END, audit.num(d.n), audit.num(d.n_protected), l.protected_label, audit.num(d.n_reference),
              l.reference_label, CASE WHEN d.field = 'denial' THEN 'its denial' ELSE 'its ' || d.field END,
              CASE WHEN d.field = 'denial' THEN printf('%.1f points', 100 * abs(d.estimate))
                   ELSE printf('%.3f', abs(d.estimate)) END,
              CASE WHEN d.estimate >= 0 THEN 'higher' ELSE 'lower' END,
              CASE WHEN d.field = 'denial' THEN printf('%.1f', 100 * d.lender_gap) ELSE printf('%.3f', d.lender_gap) END,
              CASE WHEN d.field = 'denial' THEN printf('%.1f', 100 * d.peer_benchmark) ELSE printf('%.3f', d.peer_benchmark) END,
              CASE WHEN d.field = 'denial' THEN 'in points' ELSE 'in the field''s units' END,
              100 * d.confidence,
              CASE WHEN d.field = 'denial' THEN printf('%.1f', 100 * d.ci_low) ELSE printf('%.3f', d.ci_low) END,
              CASE WHEN d.field = 'denial' THEN printf('%.1f', 100 * d.ci_high) ELSE printf('%.3f', d.ci_high) END,
              audit.pval(d.p_adjusted), d.correction, audit.num(c.tested),
              CASE WHEN d.field = 'denial' THEN printf('%.1f points', 100 * d.shrunk_estimate)
                   ELSE printf('%.3f', d.shrunk_estimate) END,
              coalesce(w.caveat, '')),
       'adjusted disparity',
       'controls: ' || coalesce(d.controls, '') || '; against the other lenders of its markets and products',
       coalesce(w.question = 'disparate_treatment' AND w.inputs = 'complete', false),
       NULL::BOOLEAN, NULL::DOUBLE, NULL::DOUBLE
FROM audit.lender_disparities d
JOIN labelled l USING (run_id, attribute)
JOIN lender_counts c USING (run_id, attribute, field)
LEFT JOIN audit.lender_panel p ON p.lei = d.lei   -- the lender's name where a panel was loaded (aequum panel)
LEFT JOIN wording w USING (run_id)
WHERE d.flagged;
