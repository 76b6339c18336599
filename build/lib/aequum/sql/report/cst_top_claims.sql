-- The report's CST cases: the complainants of one attribute, method and k most clearly treated
-- worse (significant first, then largest delta_p; record_id breaks ties), at most $limit.
SELECT record_id, n_control, n_test, p_c, p_t, delta_p, ci_low, ci_high, one_sided_low,
       discriminated, significant, decision, decision_counterfactual
FROM audit.cst_claims
WHERE run_id = $run_id AND protected_attribute = $attribute AND method = $method AND k = $k
ORDER BY significant DESC, delta_p DESC, record_id
LIMIT $limit;
