-- The matched-pair exhibit's cases of one CST finding (attribute, method, k): the complainants
-- the finding counts — significant (ST, CST: Def. 3.5), or for CF, which has no test, those
-- whose decision flips — surest first as in cst_top_claims.sql (highest one-sided bound, then the
-- largest delta_p; ties by record id, numeric ids as numbers), at most $limit; cases is how many
-- the finding counts in all.
SELECT record_id, n_control, n_test, p_c, p_t, delta_p, ci_low, ci_high, one_sided_low,
       significant, discriminated, decision, decision_counterfactual, count(*) OVER () AS cases
FROM audit.cst_claims
WHERE run_id = $run_id AND protected_attribute = $attribute AND method = $method AND k = $k
  AND CASE WHEN $method = 'CF' THEN coalesce(discriminated, false) ELSE coalesce(significant, false) END
ORDER BY one_sided_low DESC NULLS LAST, delta_p DESC NULLS LAST,
         TRY_CAST(record_id AS HUGEINT) NULLS LAST, record_id
LIMIT $limit;
