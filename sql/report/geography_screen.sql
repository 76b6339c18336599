-- Geography section: the redlining screen per measure x basis of one run (lender-MSA pairs
-- tested, those significantly below their peers, and a note where a measure is not in the data).
SELECT measure, basis,
       count(*) FILTER (WHERE lender IS NOT NULL) AS pairs,
       count(*) FILTER (WHERE p_value IS NOT NULL) AS tested,
       count(*) FILTER (WHERE flagged) AS below_peers,
       count(DISTINCT lender) FILTER (WHERE flagged) AS lenders,
       min(correction) AS correction,
       min(note) FILTER (WHERE lender IS NULL) AS note
FROM audit.geography_lenders
WHERE run_id = $run_id
GROUP BY ALL
ORDER BY measure, basis;
