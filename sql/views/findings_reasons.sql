-- Reason-consistency findings: per run x attribute x reason, whether the unfavourable decisions
-- citing a reason did so at different values of the variable it cites for the protected group
-- (two-sided Mann-Whitney U, adjusted across the run). The headline is each attribute's most
-- significant reason.
--
-- Only the penalty direction is flagged: the protected group's denials cite the reason at
-- *better* values than the reference group's (reason_consistency.penalty_direction, which
-- knows for each variable which way is better), what a stricter standard for them produces.
-- A difference the other way (the protected group cited at worse values) and equal medians
-- are reported, never flagged. Estimand: procedural (how the stated reasons were applied), a
-- screen for disparate treatment on one input, not by itself evidence of it: denials citing
-- a reason at better values can also follow from other inputs the records lack.
CREATE OR REPLACE VIEW audit.findings_reasons AS
WITH r AS (
  SELECT r.*, coalesce(r.significant AND r.penalty_direction, false) AS flagged
  FROM audit.reason_consistency r
)
SELECT run_id, 'reasons' AS engine, attribute, 'protected' AS group_name,
       printf('reason consistency: %s (code %s)', feature, reason_code) AS finding,
       row_number() OVER (PARTITION BY run_id, attribute
                          ORDER BY flagged DESC, p_adjusted NULLS LAST, feature) = 1 AS headline,
       flagged,
       'median_difference' AS measure, protected_median_value - reference_median_value AS value,
       NULL::DOUBLE AS ci_low, NULL::DOUBLE AS ci_high, confidence, p_adjusted AS p_value, significant,
       protected_citing AS individuals, 'reason_consistency' AS cases_table,
       printf('Among unfavourable decisions citing %s (reason %s), %s had a median '
              '%s of %s against %s for %s (%s of %s decisions; %s, %s-adjusted)%s.',
              feature, reason_code, audit.applicants(run_id, attribute, 'protected'), feature,
              coalesce(protected_median, 'n/a'), coalesce(reference_median, 'n/a'),
              audit.applicants(run_id, attribute, 'reference'), audit.num(protected_citing), audit.num(reference_citing),
              audit.pval(p_adjusted), 'multiple-testing',
              CASE WHEN flagged THEN ': the reason was cited at better values for '
                                     || audit.applicants(run_id, attribute, 'protected') || ' (' || direction
                                     || '), consistent with the variable being judged by a stricter standard '
                                     'for them, unless inputs the records lack explain it'
                   WHEN significant AND protected_median_value = reference_median_value
                     THEN ': the distributions differ but the medians are equal; no penalty is indicated'
                   WHEN significant THEN ': the reason was cited at worse values for '
                                         || audit.applicants(run_id, attribute, 'protected') || ' ('
                                         || direction || '), the opposite of a penalty; not flagged'
                   ELSE '' END) AS statement,
       'procedural (stated reasons)' AS estimand,
       printf('denials citing reason %s, compared on %s', reason_code, feature) AS basis,
       false AS evidence, NULL::BOOLEAN AS robust, NULL::DOUBLE AS robustness_value, NULL::DOUBLE AS e_value
FROM r;
