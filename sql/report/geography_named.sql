-- Geography section: the lender-MSA pairs significantly below their peers, surest first, at
-- most $limit.
SELECT lender, market, measure, basis, applications, n, share, peers, peer_share, difference, p_adjusted
FROM audit.geography_lenders
WHERE run_id = $run_id AND flagged
ORDER BY p_adjusted, lender, market, measure, basis
LIMIT $limit;
