-- The report's CST cases: the complainants of one attribute, method and k most clearly treated
-- worse (significant first, then the highest one-sided bound — the surest —, then the largest
-- delta_p; ties by record id, numeric ids as numbers: 15 before 1324), at most $limit.
SELECT record_id, n_control, n_test, p_c, p_t, delta_p, ci_low, ci_high, one_sided_low,
       discriminated, significant, decision, decision_counterfactual
FROM audit.cst_claims
WHERE run_id = $run_id AND protected_attribute = $attribute AND method = $method AND k = $k
ORDER BY significant DESC NULLS LAST, one_sided_low DESC NULLS LAST, delta_p DESC NULLS LAST,
         TRY_CAST(record_id AS HUGEINT) NULLS LAST, record_id
LIMIT $limit;
