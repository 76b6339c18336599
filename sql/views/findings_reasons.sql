-- Reason-consistency findings: per run x attribute x reason, whether the unfavourable decisions
-- citing a reason did so at different values of the variable it cites for the protected group
-- (two-sided Mann-Whitney U, adjusted across the run). The headline is each attribute's most
-- significant reason.
CREATE OR REPLACE VIEW audit.findings_reasons AS
SELECT run_id, 'reasons' AS engine, attribute, 'protected' AS group_name,
       printf('reason consistency: %s (code %s)', feature, reason_code) AS finding,
       row_number() OVER (PARTITION BY run_id, attribute ORDER BY p_adjusted NULLS LAST, feature) = 1 AS headline,
       coalesce(significant, false) AS flagged,
       'median_difference' AS measure, protected_median_value - reference_median_value AS value,
       NULL::DOUBLE AS ci_low, NULL::DOUBLE AS ci_high, confidence, p_adjusted AS p_value, significant,
       protected_citing AS individuals, 'reason_consistency' AS cases_table,
       printf('Among unfavourable decisions citing %s (reason %s), the protected group of %s had a median '
              '%s of %s against %s for the reference group (%s of %s decisions; %s, %s-adjusted)%s.',
              feature, reason_code, attribute, feature, coalesce(protected_median, 'n/a'),
              coalesce(reference_median, 'n/a'), audit.num(protected_citing), audit.num(reference_citing),
              audit.pval(p_adjusted), 'multiple-testing',
              CASE WHEN significant THEN ': the reason is ' || direction || ', so the variable is judged '
                                         'by a different standard for them'
                   ELSE '' END) AS statement
FROM audit.reason_consistency;
