-- Geography section: per attribute, lenders tested and those whose denial odds ratio is
-- significantly above their peers', and the flagged lenders (surest first, at most $limit).
SELECT attribute, lender, markets, n_protected, n_reference, denial_rate_protected, denial_rate_reference,
       odds_ratio, peer_odds_ratio, ratio, ci_low, ci_high, p_adjusted, flagged,
       count(*) FILTER (WHERE p_value IS NOT NULL) OVER (PARTITION BY attribute) AS tested
FROM audit.geography_disparities
WHERE run_id = $run_id
QUALIFY flagged OR row_number() OVER (PARTITION BY attribute ORDER BY lender) = 1
ORDER BY attribute, flagged DESC, p_adjusted NULLS LAST, lender
LIMIT $limit;
