-- Geography and peers findings (engine geography; FAIR_LENDING.md "Geography and peers").
-- Redlining screen (audit.geography_lenders): per run x measure x basis one headline row (how
-- many lender-market pairs were tested and which had a significantly lower share of
-- applications, or of approvals, from majority-minority / low-to-moderate income tracts than
-- the other lenders of the same MSA, engines/geography/benchmark.py), and one row per such
-- lender and market.
-- Per-lender denial disparities (audit.geography_disparities): per run x attribute one headline
-- row, and one row per lender whose odds ratio of denial (protected against reference) is
-- significantly above its peers'. Estimand: raw disparities against peers, no underwriting
-- controls: a screening that says where to look. It cannot see why a lender's applications
-- come from where they do (branches, marketing, brokers, product mix), nor whether peers of
-- similar volume are comparable otherwise, nor any credit factor: never evidence by itself
-- (evidence = false); the controlled comparison is the regression engine's.
CREATE OR REPLACE VIEW audit.findings_geography AS
WITH screen AS (
    SELECT run_id, measure, basis,
           count(*) FILTER (WHERE p_value IS NOT NULL) AS tested,
           count(*) FILTER (WHERE flagged) AS below,
           count(DISTINCT lender) FILTER (WHERE flagged) AS lenders,
           min(p_adjusted) FILTER (WHERE flagged) AS best_p,
           min(correction) AS correction,
           string_agg(DISTINCT lender, ', ' ORDER BY lender) FILTER (WHERE flagged) AS names,
           min(note) FILTER (WHERE lender IS NULL) AS absent
    FROM audit.geography_lenders
    GROUP BY ALL),
gaps AS (
    SELECT run_id, attribute,
           count(*) FILTER (WHERE p_value IS NOT NULL) AS tested,
           count(*) FILTER (WHERE flagged) AS above,
           min(p_adjusted) FILTER (WHERE flagged) AS best_p,
           min(correction) AS correction,
           string_agg(lender, ', ' ORDER BY lender) FILTER (WHERE flagged) AS names
    FROM audit.geography_disparities
    GROUP BY ALL)
SELECT s.run_id, 'geography' AS engine, 'geography' AS attribute, 'all lenders' AS group_name,
       printf('redlining screen: %s (%s)', s.measure, s.basis) AS finding, true AS headline,
       s.below > 0 AS flagged, 'lenders_below_peers' AS measure, CAST(s.lenders AS DOUBLE) AS value,
       NULL::DOUBLE AS ci_low, NULL::DOUBLE AS ci_high, NULL::DOUBLE AS confidence,
       s.best_p AS p_value, s.below > 0 AS significant, CAST(s.lenders AS BIGINT) AS individuals,
       'geography_lenders' AS cases_table,
       CASE WHEN s.absent IS NOT NULL THEN printf('Redlining screen, %s: not screened (%s).', s.measure, s.absent)
            ELSE printf('Redlining screen, %s among %s: %s lender-MSA pair(s) of %s tested had a significantly '
                        'lower share than the other lenders of their MSA (an outlier test against their '
                        'inverse-variance mean that allows for how much lenders'' shares ordinarily differ, '
                        '%s-adjusted across lenders)%s. A raw comparison '
                        'against peers: it does not see why a lender''s applications come from where they do '
                        '(branches, marketing, brokers, product mix) or any credit factor; a screening, not '
                        'evidence of redlining.',
                        s.measure, s.basis, audit.num(s.below), audit.num(s.tested), coalesce(s.correction, 'not'),
                        CASE WHEN s.below > 0 THEN ': ' || s.names ELSE '' END) END AS statement,
       'raw disparity' AS estimand,
       'share of ' || s.basis || ' from such tracts against the other lenders of the same MSA, no controls' AS basis,
       false AS evidence, NULL::BOOLEAN AS robust, NULL::DOUBLE AS robustness_value, NULL::DOUBLE AS e_value
FROM screen s
UNION ALL
SELECT l.run_id, 'geography', 'geography', l.lender,
       printf('redlining screen: %s (%s), MSA %s', l.measure, l.basis, l.market), false, true,
       'share_difference', l.difference, NULL, NULL, NULL, l.p_adjusted, l.significant,
       CAST(greatest(0, round(l.expected_share * l.n - l.count)) AS BIGINT), 'geography_lenders',
       printf('Lender %s in MSA %s: %s of its %s %s with the tract reported came from tracts with %s, against '
              '%s expected from the MSA''s %s other lenders (%s, %s-adjusted); about %s more at that share. A raw '
              'comparison against the market (no controls): a screening, not evidence of redlining.',
              l.lender, l.market, audit.pct(l.share), audit.num(l.n), l.basis, l.measure,
              audit.pct(l.expected_share), audit.num(l.benchmark_lenders), audit.pval(l.p_adjusted),
              l.correction, audit.num(greatest(0, round(l.expected_share * l.n - l.count)))),
       'raw disparity', 'share of ' || l.basis || ' against the other lenders of the same MSA, no controls',
       false, NULL, NULL, NULL
FROM audit.geography_lenders l
WHERE l.flagged
UNION ALL
SELECT g.run_id, 'geography', g.attribute, 'all lenders', 'denial disparity against peers', true,
       g.above > 0, 'lenders_above_peers', CAST(g.above AS DOUBLE), NULL, NULL, NULL, g.best_p, g.above > 0,
       CAST(g.above AS BIGINT), 'geography_disparities',
       printf('%s lender(s) of %s tested denied %s significantly more often, relative to %s, than their '
              'volume-matched peers in the same MSAs did (ratio of denial odds ratios, Woolf test, %s-adjusted '
              'across lenders)%s. Raw rates without underwriting controls: a screening; the controlled '
              'comparison is the regression engine''s.',
              audit.num(g.above), audit.num(g.tested), audit.applicants(g.run_id, g.attribute, 'protected'),
              audit.applicants(g.run_id, g.attribute, 'reference'), coalesce(g.correction, 'not'),
              CASE WHEN g.above > 0 THEN ': ' || g.names ELSE '' END),
       'raw disparity', 'denial odds ratio of each lender against its volume-matched peers'' in the same MSAs, no controls',
       false, NULL, NULL, NULL
FROM gaps g
UNION ALL
SELECT d.run_id, 'geography', d.attribute, d.lender, 'denial disparity against peers', false, true,
       'ratio_of_odds_ratios', d.ratio, d.ci_low, d.ci_high, d.confidence, d.p_adjusted, d.significant,
       CAST(d.n_protected AS BIGINT), 'geography_disparities',
       printf('Lender %s: the odds of denial of %s against %s were %.2f (its peers in the same MSAs: %.2f), '
              'a ratio of %.2f (%.0f%% CI %.2f to %.2f, %s, %s-adjusted) over %s MSA(s); denial rates %s against %s. '
              'Raw, without underwriting controls: a screening, not evidence of disparate treatment.',
              d.lender, audit.applicants(d.run_id, d.attribute, 'protected'), audit.applicants(d.run_id, d.attribute, 'reference'),
              d.odds_ratio, d.peer_odds_ratio, d.ratio, 100 * d.confidence, d.ci_low, d.ci_high,
              audit.pval(d.p_adjusted), d.correction, audit.num(d.markets),
              audit.pct(d.denial_rate_protected), audit.pct(d.denial_rate_reference)),
       'raw disparity', 'denial odds ratio against volume-matched peers'' in the same MSAs, no controls',
       false, NULL, NULL, audit.e_value(d.ratio)
FROM audit.geography_disparities d
WHERE d.flagged;
