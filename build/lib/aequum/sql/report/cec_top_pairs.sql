-- CEC cases: the matched pairs of one attribute in regime B (same decision, different
-- reasoning) with the largest explanation gap, at most $limit: who was matched with whom.
SELECT record_id, counterpart_id, "group", distance, decision, counterpart_decision,
       score, counterpart_score, delta_cec, regime
FROM audit.cec_pairs
WHERE run_id = $run_id AND attribute = $attribute AND matched AND regime = 'B'
ORDER BY delta_cec DESC, record_id
LIMIT $limit;
