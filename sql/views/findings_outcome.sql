-- Outcome findings: each group against its reference (DI with its log-method interval, the
-- adjusted two-proportion test, the four-fifths rule both ways, or "too small to judge"), and
-- a reference group under four fifths of the highest-rate group (the EEOC reading).
-- Estimand: a raw disparity (no controls): a screen for disparate impact, never by itself
-- evidence of disparate treatment; evidence only when the audit asks about disparate impact
-- and the protected group's rate is significantly lower. The E-value says how strongly an
-- unobserved factor would have to be tied to both group and decision to explain the ratio.
CREATE OR REPLACE VIEW audit.findings_outcome AS
SELECT g.run_id, 'outcome' AS engine, g.attribute, g.group_name,
       CASE WHEN g.verdict = 'too small to judge' THEN 'too small to judge'
            ELSE 'disparate impact' END AS finding,
       true AS headline,
       coalesce(g.verdict IN ('adverse impact', 'significant difference'), false) AS flagged,
       'di_ratio' AS measure, g.di_ratio AS value, g.di_ci_low AS ci_low, g.di_ci_high AS ci_high,
       g.confidence, g.spd_p_adjusted AS p_value, g.significant,
       CASE WHEN g.spd < 0 THEN g.shortfall ELSE 0 END AS individuals,
       'outcome_gaps' AS cases_table,
       coalesce(CASE
         WHEN g.verdict = 'too small to judge' THEN printf(
           'Only %s %s against %s %s: too small to judge (favourable rate %s, DI %s).',
           audit.num(g.n_group), audit.applicants(g.run_id, g.attribute, g.group_name), audit.num(g.n_reference),
           audit.applicants(g.run_id, g.attribute, g.reference_group), audit.pct(g.favourable_rate),
           coalesce(printf('%.2f', g.di_ratio), 'n/a'))
         WHEN g.di_ratio IS NULL THEN printf('%s: the disparate impact ratio is undefined (%s).',
           audit.applicants(g.run_id, g.attribute, g.group_name), coalesce(g.note, 'no favourable reference decisions'))
         ELSE printf(
           '%s received favourable decisions at %s against %s for %s: disparate impact ratio %.2f '
           '(%.0f%% CI %s to %s)%s; the difference is %s (%s, %s-adjusted)%s.',
           audit.applicants(g.run_id, g.attribute, g.group_name), audit.pct(g.favourable_rate),
           audit.pct(g.reference_rate), audit.applicants(g.run_id, g.attribute, g.reference_group), g.di_ratio,
           100 * g.confidence, coalesce(printf('%.2f', g.di_ci_low), 'n/a'),
           coalesce(printf('%.2f', g.di_ci_high), 'n/a'),
           CASE WHEN g.four_fifths_violation AND g.four_fifths_vs_highest
                  THEN ', under four fifths of the reference''s rate and of the highest group''s'
                WHEN g.four_fifths_violation THEN ', under four fifths of the reference''s rate'
                WHEN g.four_fifths_vs_highest THEN printf(', under four fifths of the highest rate (%s)',
                  audit.group_label(g.run_id, g.attribute, g.highest_group))
                ELSE '' END,
           CASE WHEN g.significant THEN 'significant' ELSE 'not significant' END,
           audit.pval(g.spd_p_adjusted), g.correction,
           CASE WHEN g.spd < 0 AND g.shortfall > 0 THEN printf(
                  '; about %s of its %s members would have had a favourable decision at the reference''s rate',
                  audit.num(g.shortfall), audit.num(g.n_group)) ELSE '' END)
       END, printf('%s: disparate impact ratio %s against %s (written before intervals and '
                   'corrections were recorded).', audit.applicants(g.run_id, g.attribute, g.group_name),
                   coalesce(printf('%.2f', g.di_ratio), 'n/a'), audit.applicants(g.run_id, g.attribute, g.reference_group))
       ) || CASE WHEN g.di_ratio IS NOT NULL AND g.verdict <> 'too small to judge' THEN printf(
           ' A raw disparity with no controls: it does not say why the rates differ (E-value %.2f, '
           '%.2f for the interval''s limit nearer 1: an unobserved factor tied this strongly to both '
           'group and decision could explain it).', audit.e_value(g.di_ratio),
           audit.e_value_ci(g.di_ci_low, g.di_ci_high)) ELSE '' END AS statement,
       'raw disparity' AS estimand, 'favourable rates by group, no controls' AS basis,
       coalesce(c.question = 'disparate_impact' AND g.significant AND g.spd < 0, false) AS evidence,
       NULL::BOOLEAN AS robust, NULL::DOUBLE AS robustness_value, audit.e_value(g.di_ratio) AS e_value
FROM audit.outcome_gaps g
LEFT JOIN audit.run_context c USING (run_id)
UNION ALL
SELECT m.run_id, 'outcome', m.attribute, m.group_name, 'four-fifths of the highest rate', true, true,
       'ratio_to_highest', m.ratio_to_highest, NULL, NULL, NULL, NULL, NULL,
       CAST(greatest(0, round(m.n * h.favourable_rate) - m.n_favourable) AS BIGINT), 'outcome_metrics',
       printf('%s (the reference) received favourable decisions at %s, under four fifths of the '
              'highest rate, %s for %s (ratio %.2f); about %s of its %s members would have had a '
              'favourable decision at that rate.',
              audit.applicants(m.run_id, m.attribute, m.group_name), audit.pct(m.favourable_rate),
              audit.pct(h.favourable_rate), audit.applicants(m.run_id, m.attribute, m.highest_group),
              m.ratio_to_highest, audit.num(greatest(0, round(m.n * h.favourable_rate) - m.n_favourable)),
              audit.num(m.n)),
       'raw disparity', 'favourable rates by group, no controls', false, NULL, NULL,
       audit.e_value(m.ratio_to_highest)
FROM audit.outcome_metrics m
JOIN audit.outcome_metrics h
  ON h.run_id = m.run_id AND h.attribute = m.attribute AND h.group_name = m.highest_group
WHERE m.is_reference AND m.four_fifths_vs_highest;
