-- The matched-pair exhibit's cases of one CEC finding: the matched pairs of the attribute in
-- regime B (same decision, different reasoning) of the finding's group ('all': both groups;
-- cec_pairs.group is 1 for a protected record, 0 for a reference one), the largest explanation
-- gap first (ties by record id, numeric ids as numbers), at most $limit; cases is how many in all.
SELECT record_id, counterpart_id, "group", distance, decision, counterpart_decision, score,
       counterpart_score, delta_cec, count(*) OVER () AS cases
FROM audit.cec_pairs
WHERE run_id = $run_id AND attribute = $attribute AND matched AND regime = 'B'
  AND ($group_name = 'all' OR "group" = CASE $group_name WHEN 'protected' THEN 1 WHEN 'reference' THEN 0 END)
ORDER BY delta_cec DESC, TRY_CAST(record_id AS HUGEINT) NULLS LAST, record_id
LIMIT $limit;
